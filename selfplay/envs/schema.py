"""JSON Schemas of environment records: where to find them and how their errors are reported.

The release's schemas are release data, so the project carries no copy of them; the bundled
`data/mini/schema/` is the project's own, smaller schema (the fields this code reads), so the mini
set loads on a machine without the release (the tests also hold it to the release's schemas).
`find_schema_dir` looks, in order, at
  1. the `schema_dir` the caller passes (CLI: `--schema-dir`),
  2. `<data root>/schema/` (a release directory and data/mini carry their schemas),
  3. `../shared/impossible_rubrics/schema/` next to this repository (where the release lies on a
     development checkout),
and otherwise fails with a message saying which argument to pass. A directory counts only if it
holds both schema files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema.validators import validator_for

SCHEMA_FILES = {
    "impossible": "environment.schema.json",
    "control": "control_environment.schema.json",
}
# selfplay/envs/schema.py -> repository root -> its sibling shared/ checkout of the release
SHARED_SCHEMA_DIR = (
    Path(__file__).resolve().parents[2].parent / "shared" / "impossible_rubrics" / "schema"
)


class SchemaNotFound(FileNotFoundError):
    pass


def _has_schemas(d: Path) -> bool:
    return all((d / name).is_file() for name in SCHEMA_FILES.values())


def find_schema_dir(data_root: str | Path, schema_dir: str | Path | None = None) -> Path:
    if schema_dir is not None:
        d = Path(schema_dir)
        if not _has_schemas(d):
            raise SchemaNotFound(f"schema_dir {d} does not hold {sorted(SCHEMA_FILES.values())}")
        return d
    candidates = [Path(data_root) / "schema", SHARED_SCHEMA_DIR]
    for d in candidates:
        if _has_schemas(d):
            return d
    raise SchemaNotFound(
        f"no release JSON Schemas found (looked in {', '.join(map(str, candidates))}); pass "
        "schema_dir= (CLI: --schema-dir) pointing at the release's schema/ directory"
    )


@dataclass(frozen=True)
class Schemas:
    dir: Path
    validators: Mapping[str, Any]  # kind -> jsonschema validator

    @classmethod
    def load(cls, schema_dir: Path) -> Schemas:
        validators = {}
        for kind, name in SCHEMA_FILES.items():
            schema = json.loads((schema_dir / name).read_text(encoding="utf-8"))
            # the schema's own "$schema" picks the draft (the release uses 2020-12)
            vcls = validator_for(schema)
            vcls.check_schema(schema)
            validators[kind] = vcls(schema)
        return cls(dir=schema_dir, validators=validators)

    def errors(self, record: Mapping[str, Any], kind: str) -> list[tuple[str, str]]:
        """(field path, message) for each schema violation, in a stable order."""
        found = []
        for err in self.validators[kind].iter_errors(record):
            path = list(err.absolute_path)
            if err.validator == "required":
                # jsonschema reports a missing property at its parent; name the property itself
                m = re.match(r"^'(.+)' is a required property", err.message)
                if m:
                    path.append(m.group(1))
            found.append((field_path(path), short_message(err)))
        return sorted(found)


def field_path(parts: list[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def short_message(err: Any, limit: int = 200) -> str:
    """A jsonschema message within `limit` characters that still ends with its reason.

    jsonschema quotes the whole offending value before the reason ("[...] is too short", "should be
    non-empty"); a full evidence packet would drown it, and cutting the end would drop the reason.
    So the quoted value is cut, and the schema's constraint is named after the reason."""
    message = err.message
    value = repr(err.instance)
    if len(message) > limit and value in message:
        message = message.replace(value, value[:60] + "...", 1)
    if len(message) > limit:  # a long text of the message's own: keep its end, where the reason is
        message = "..." + message[-(limit - 3):]
    if err.validator in ("minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum") \
            and str(err.validator_value) not in message:
        message += f" ({err.validator} {err.validator_value})"
    return message
