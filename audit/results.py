"""The audit's output files: `audit.json` (nested reward → seed → iteration) and `audit.csv`.

`audit.json` layout (NaN is written as null, keys sorted, so equal numbers give equal bytes):

    {"version": 1,
     "settings": {...audit settings...},
     "skipped": [incomplete iteration dirs],
     "rewards": {
       "<reward>": {
         "seeds": {"<seed>": {
             "experiment": ...,
             "calibration": {"verifiers": {"<role>": {"stress" | "labelled": null | {
                                  "agreement", "accept_invalid", "reject_valid", "n_valid", "n_invalid",
                                  "n_accept_invalid", "n_reject_valid", "n_partial", "n_undecided",
                                  "undecided", "n_answers"}}},
                             "checkpoints": {"<t>": {"<role>": {...the same, on t's own labels}}},
                             "gates": {"<t>": {"status", "reasons", "warnings", "primary",
                                               "set": "labelled" | "labelled/t=<t>", "where"}},
                             "gate": {...the seed's in one: ok when every t's is},
                             "undecided": {"<role>": {"<task_id>": {"n_undecided", "n_answers"}}},
                             "oracles": {"<role>": fingerprint}},
             "iterations": {"<t>": {
                 "checkpoint": "<path>",
                 "metrics": {"<metric>": {"status": "ok" | "unverified", "reason": null | "...",
                                          "value", "ci_low", "ci_high", "n", "n_partial",
                                          "n_unscored", "n_undefined"}},
                 "counts": {...},
                 "exploit": {"impossible" | "control": {"<task_id>": [0 | 1 | null per policy sample]}}}}}},
         "across_seeds": {"<t>": {"<metric>": {"status", "reason", "mean", "ci_low", "ci_high", "sd",
                                                "n_seeds", "n_missing"}}}}}}

A metric that rests on the primary oracle's verdicts (its audit.metric_table entry has `oracle`) is written
with `status: unverified`, the gate's reasons and no number (value and interval null) when the
gate of an iteration it reads fails (audit.calibration.metric_gate: the on-policy set decides,
never the stress answers); its mean over seeds is unverified when any seed's is. `n_undefined` counts the
bootstrap replicates whose statistic was undefined.

`audit.csv` has one row per reward × seed × iteration × metric (`value, ci_low, ci_high, n`, the
interval being the environment bootstrap, `n_undefined` its undefined replicates; `value` is `unverified` and `reason` says why for a
metric the gate withholds), plus rows with seed `all` for the mean over seeds (the interval then is
the t interval over seeds, `n` the number of seeds).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .calibration import UNVERIFIED, metric_gate
from .summary import IterationAudit, seed_summary

VERSION = 1
CSV_FIELDS = ("reward", "seed", "iteration", "metric", "value", "ci_low", "ci_high", "n", "n_undefined", "reason")
OK = "ok"


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, tuples -> lists, recursively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def build_results(settings: Mapping[str, Any],
                  audits: Mapping[tuple[str, int], Mapping[int, IterationAudit]],
                  checkpoints: Mapping[tuple[str, int, int], str],
                  experiments: Mapping[tuple[str, int], str],
                  skipped: list[str] | None = None,
                  calibrations: Mapping[tuple[str, int], Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The `audit.json` document from per-(reward, seed) iteration audits (pure). A seed whose
    calibration gate failed has its oracle-dependent metrics written `unverified`."""
    rewards: dict[str, Any] = {}
    for (reward, seed), by_t in sorted(audits.items()):
        calib = (calibrations or {}).get((reward, seed))
        iters = {}
        for t, a in sorted(by_t.items()):
            iters[str(t)] = {
                "checkpoint": checkpoints[(reward, seed, t)],
                "metrics": {k: (undefined_metric(asdict(v), a.undefined[k]) if k in a.undefined
                                else gated(k, asdict(v), calib, t)) for k, v in sorted(a.metrics.items())},
                "counts": dict(sorted(a.counts.items())),
                "exploit": {k: dict(sorted(v.items())) for k, v in sorted(a.exploit.items())},
            }
        entry = rewards.setdefault(reward, {"seeds": {}, "across_seeds": {}})
        entry["seeds"][str(seed)] = {"experiment": experiments[(reward, seed)], "iterations": iters}
        if calib is not None:
            entry["seeds"][str(seed)]["calibration"] = dict(calib)
    for entry in rewards.values():
        entry["across_seeds"] = across_seeds(entry["seeds"])
    doc = {"version": VERSION, "settings": dict(settings), "skipped": list(skipped or []), "rewards": rewards}
    return _clean(doc)


UNDEFINED = "undefined"


def undefined_metric(m: dict[str, Any], reason: str) -> dict[str, Any]:
    """A metric that cannot be computed by construction: no number, the reason."""
    return {**m, "value": None, "ci_low": None, "ci_high": None, "status": UNDEFINED, "reason": reason}


def gated(name: str, m: dict[str, Any], calib: Mapping[str, Any] | None, t: int | None = None) -> dict[str, Any]:
    """A metric as written: withheld (`unverified`, the reasons, no number) when it rests on the
    primary oracle and the gate of an iteration it reads failed (audit.calibration.metric_gate)."""
    status, reasons = metric_gate(calib, name, t)
    if status == UNVERIFIED:
        return {**m, "value": None, "ci_low": None, "ci_high": None, "status": UNVERIFIED,
                "reason": "; ".join(reasons)}
    return {**m, "status": OK, "reason": None}


def across_seeds(seeds: Mapping[str, Any]) -> dict[str, Any]:
    """Per iteration and metric: mean over the seeds that have that iteration, t interval over seeds;
    unverified when any seed's value is."""
    values: dict[str, dict[str, list[float]]] = {}
    withheld: dict[tuple[str, str], str] = {}
    for seed in sorted(seeds, key=int):
        for t, it in seeds[seed]["iterations"].items():
            for name, m in it["metrics"].items():
                v = m["value"]
                values.setdefault(t, {}).setdefault(name, []).append(float("nan") if v is None else v)
                if m.get("status") == UNVERIFIED:
                    withheld.setdefault((t, name), f"seed {seed}: {m['reason']}")
    out: dict[str, Any] = {}
    for t, ms in sorted(values.items(), key=lambda kv: int(kv[0])):
        out[t] = {}
        for name, vs in sorted(ms.items()):
            if (t, name) in withheld:
                out[t][name] = {"mean": None, "ci_low": None, "ci_high": None, "sd": None, "n_seeds": len(vs),
                                "n_missing": 0, "status": UNVERIFIED, "reason": withheld[(t, name)]}
            else:
                out[t][name] = seed_summary(vs) | {"status": OK, "reason": None}
    return out


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(_clean(doc), indent=2, sort_keys=True, allow_nan=False) + "\n"


def csv_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for reward, entry in sorted(doc["rewards"].items()):
        for seed, s in sorted(entry["seeds"].items(), key=lambda kv: int(kv[0])):
            for t, it in sorted(s["iterations"].items(), key=lambda kv: int(kv[0])):
                for name, m in sorted(it["metrics"].items()):
                    rows.append({"reward": reward, "seed": seed, "iteration": int(t), "metric": name,
                                 "value": _csv_value(m, "value"), "ci_low": m["ci_low"], "ci_high": m["ci_high"],
                                 "n": m["n"], "n_undefined": m.get("n_undefined"), "reason": m.get("reason")})
        for t, ms in sorted(entry["across_seeds"].items(), key=lambda kv: int(kv[0])):
            for name, m in sorted(ms.items()):
                rows.append({"reward": reward, "seed": "all", "iteration": int(t), "metric": name,
                             "value": _csv_value(m, "mean"), "ci_low": m["ci_low"], "ci_high": m["ci_high"],
                             "n": m["n_seeds"], "n_undefined": None, "reason": m.get("reason")})
    return rows


def _csv_value(m: Mapping[str, Any], field: str) -> Any:
    return UNVERIFIED if m.get("status") == UNVERIFIED else m[field]


def to_csv(doc: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for row in csv_rows(doc):
        w.writerow({k: ("" if v is None else (repr(v) if isinstance(v, float) else v)) for k, v in row.items()})
    return buf.getvalue()


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def load_results(path: str | Path) -> dict[str, Any]:
    """Read an `audit.json`, checking it is one (clear error otherwise)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: not a readable audit.json ({e})") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("rewards"), dict):
        raise ValueError(f"{p}: not an audit.json of version {VERSION} (no `rewards` mapping)")
    return doc
