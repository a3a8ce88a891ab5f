"""Validation of the project's `evaluation_spec.checks` extension when a record carries it.

`checks` is the machine-checkable certificate the `spec` verifier reads (contract:
`data/mini/schema/checks.md`; JSON Schema: `checks.schema.json` beside it — the project's own
extension, so it is read from data/mini whichever release schema directory validates the rest).
Beyond the schema: every pattern compiles as a Python regular expression once its macros (`{GAP:n}`,
`{NEG}`, ..., checks.md "Macros") are expanded by `selfplay.envs.spec_expand.expand`, `kind` is the record's
kind, clause ids are unique within their list, and `doc_ids` equals the packet's evidence ids.
Schema errors come alone (a malformed block gives no cascade of follow-on errors).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema.validators import validator_for

from .schema import field_path, short_message
from .spec_expand import expand

CHECKS_SCHEMA = Path(__file__).resolve().parents[2] / "data" / "mini" / "schema" / "checks.schema.json"
FIELD = "evaluation_spec.checks"


@cache
def _validator():
    schema = json.loads(CHECKS_SCHEMA.read_text(encoding="utf-8"))
    vcls = validator_for(schema)
    vcls.check_schema(schema)
    return vcls(schema)


def _schema_errors(checks: Any) -> list[tuple[str, str]]:
    """At most one error: the deepest field every violation lies under, with their messages (a
    misspelled key is both "unexpected" and "required missing"; one line says so)."""
    errors = sorted(_validator().iter_errors(checks), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if not errors:
        return []
    common = list(errors[0].absolute_path)
    for err in errors[1:]:
        path = list(err.absolute_path)
        n = 0
        while n < min(len(common), len(path)) and common[n] == path[n]:
            n += 1
        common = common[:n]
    msgs = [short_message(e) for e in errors]
    path = field_path(common)
    return [(f"{FIELD}.{path}" if path else FIELD, "; ".join(dict.fromkeys(msgs)))]


def checks_errors(record: Mapping[str, Any], kind: str) -> list[tuple[str, str]]:
    """(field, message) for a malformed `evaluation_spec.checks`; empty when absent or well formed."""
    spec = record.get("evaluation_spec")
    if not isinstance(spec, Mapping) or "checks" not in spec:
        return []
    checks = spec["checks"]
    errs = _schema_errors(checks)
    if errs:
        return errs
    if checks["kind"] != kind:
        errs.append((f"{FIELD}.kind", f"kind {checks['kind']!r} but the record is {kind!r}"))
    for key in ("forbidden", "acknowledgements", "verdict"):
        seen: set[str] = set()
        for i, clause in enumerate(checks.get(key, ())):
            if clause["id"] in seen:
                errs.append((f"{FIELD}.{key}[{i}].id", f"duplicate clause id {clause['id']!r}"))
            seen.add(clause["id"])
            errs += _pattern_errors(f"{FIELD}.{key}[{i}].patterns", clause["patterns"])
    errs += _pattern_errors(f"{FIELD}.refusal", checks.get("refusal", ()))
    evidence = {d.get("doc_id") for d in record.get("evidence") or () if isinstance(d, Mapping)}
    if set(checks["doc_ids"]) != evidence:
        errs.append((f"{FIELD}.doc_ids", f"{sorted(checks['doc_ids'])} must equal the evidence ids "
                                         f"{sorted(map(str, evidence))}"))
    return errs


def _pattern_errors(where: str, patterns) -> list[tuple[str, str]]:
    out = []
    for j, p in enumerate(patterns):
        try:
            re.compile(expand(p), re.IGNORECASE)
        except (re.error, ValueError) as e:  # ValueError: an unknown macro
            out.append((f"{where}[{j}]", f"invalid regular expression {p!r}: {e}"))
    return out
