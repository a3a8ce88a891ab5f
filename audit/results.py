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
                 "exploit": {"impossible" | "control": {"<task_id>": [0 | 1 | null per policy sample]}},
                 "per_env": {"<metric>": {"<task_id>": value}}}}}},   (the means over environments)
         "across_seeds": {"<t>": {"<metric>": {"status", "reason", "mean", "ci_low", "ci_high", "sd",
                                                "n_seeds", "n_missing", "se", "df", "interval"}}}}},
     "contrasts": {"baseline": "<reward>" | null, "reason": null | "...",
                   "rewards": {"<reward>": {"<t>": {"<metric>_diff/<rest>": {"baseline", "of", "value", "ci_low",
                                "ci_high", "se", "df", "p", "n", "n_seeds", "status", "reason"}}}}}}

A metric that rests on the primary oracle's verdicts (its audit.metric_table entry has `oracle`) is written
with `status: unverified`, the gate's reasons and no number (value and interval null) when the
gate of an iteration it reads fails (audit.calibration.metric_gate: the on-policy set decides,
never the stress answers); its mean over seeds is unverified when any seed's is. `n_undefined` counts the
bootstrap replicates whose statistic was undefined.

`audit.csv` has one row per reward × seed × iteration × metric (`value, ci_low, ci_high, n`, the
interval being the environment bootstrap, `n_undefined` its undefined replicates; `value` is `unverified` and `reason` says why for a
metric the gate withholds), plus rows with seed `all` for the mean over seeds (the interval then holds seed and environment
variation, `audit.contrasts.seed_interval`; `n` the number of seeds), and rows with seed `all` for
each reward's paired contrast against the baseline reward (`<metric>_diff/...`, `baseline` names
it, `n` the environments; `audit.contrasts.reward_contrasts`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import stats as S
from .calibration import UNVERIFIED, metric_gate
from .contrasts import reward_contrasts, seed_interval
from .records import IterationAudit

VERSION = 1
CSV_FIELDS = ("reward", "seed", "iteration", "metric", "value", "ci_low", "ci_high", "n", "n_undefined", "reason",
              "baseline")
OK = "ok"
FIGURES_DIR = "figures"


def json_safe(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, tuples -> lists, recursively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
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
            if a.per_env:
                iters[str(t)]["per_env"] = {k: dict(sorted(v.items())) for k, v in sorted(a.per_env.items())}
        entry = rewards.setdefault(reward, {"seeds": {}, "across_seeds": {}})
        entry["seeds"][str(seed)] = {"experiment": experiments[(reward, seed)], "iterations": iters}
        if calib is not None:
            entry["seeds"][str(seed)]["calibration"] = dict(calib)
    alpha = float((settings.get("bootstrap") or {}).get("alpha") or 0.05)
    for entry in rewards.values():
        entry["across_seeds"] = across_seeds(entry["seeds"], alpha)
    doc = {"version": VERSION, "settings": dict(settings), "skipped": list(skipped or []), "rewards": rewards,
           "contrasts": reward_contrasts(rewards, settings.get("baseline"), alpha)}
    return json_safe(doc)


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


def across_seeds(seeds: Mapping[str, Any], alpha: float = 0.05) -> dict[str, Any]:
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
                # the interval holds seed and environment variation (audit.contrasts.seed_interval)
                out[t][name] = seed_summary(vs) | seed_interval(seeds, t, name, alpha) | {"status": OK, "reason": None}
    return out


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(json_safe(doc), indent=2, sort_keys=True, allow_nan=False) + "\n"


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
    contrasts = doc.get("contrasts") or {}
    for reward, by_t in sorted((contrasts.get("rewards") or {}).items()):
        for t, ms in sorted(by_t.items(), key=lambda kv: int(kv[0])):
            for name, m in sorted(ms.items()):
                rows.append({"reward": reward, "seed": "all", "iteration": int(t), "metric": name, "value": m["value"],
                             "ci_low": m["ci_low"], "ci_high": m["ci_high"], "n": m["n"], "n_undefined": None,
                             "reason": m.get("reason"), "baseline": m["baseline"]})
    return rows


def _csv_value(m: Mapping[str, Any], field: str) -> Any:
    return UNVERIFIED if m.get("status") == UNVERIFIED else m[field]


def to_csv(doc: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n", restval="")
    w.writeheader()
    for row in csv_rows(doc):
        w.writerow({k: ("" if v is None else (repr(v) if isinstance(v, float) else v)) for k, v in row.items()})
    return buf.getvalue()


def write_text_atomic(path: Path, text: str) -> None:
    """Whole or not at all; an OSError names `path` and leaves no temp file (selfplay.artifacts)."""
    from selfplay.artifacts import write_text_atomic as write

    write(path, text)


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


def write_outputs(root: Path, doc: Mapping[str, Any], more: Mapping[str, str] | None = None) -> list[Path]:
    """audit.json, audit.csv, the files `more` names (file name in `root` -> text) and
    figures/*.png of `doc` in `root`; returns their paths."""
    from selfplay.artifacts import write_texts_atomic

    from .figures import write_figures  # matplotlib, only where figures are drawn

    texts = {root / "audit.json": dumps(doc), root / "audit.csv": to_csv(doc)} | \
        {root / name: text for name, text in (more or {}).items()}
    figures = write_figures(doc, root / FIGURES_DIR)
    write_texts_atomic(texts)  # all or none
    return [*texts, *figures]


def log_wandb(logger: Any, doc: Mapping[str, Any], root: Path,
              tables: Callable[[Path, str, int, int], Any] | None = None) -> None:
    """One wandb run per reward × seed: every metric (value and interval) with the iteration as step,
    and `tables(root, reward, seed, t)` (e.g. `audit.view.wandb_answer_table`, the checkpoint's
    answers with their verdicts and probe Δℓ) under `audit/answers` where it returns one."""
    import wandb

    for reward, entry in sorted(doc["rewards"].items()):
        for seed, s in sorted(entry["seeds"].items(), key=lambda kv: int(kv[0])):
            run = wandb.init(project=logger.project, entity=logger.entity, mode=logger.mode,
                             group=s["experiment"], name=f"audit-{reward}-seed{seed}", job_type="audit",
                             dir=str(logger.dir or root), config={"audit": doc["settings"],
                                                                       "reward": reward, "seed": int(seed)})
            for t, it in sorted(s["iterations"].items(), key=lambda kv: int(kv[0])):
                row = {}
                for name, m in it["metrics"].items():
                    for field, key in (("value", f"audit/{name}"), ("ci_low", f"audit/{name}/ci_low"),
                                       ("ci_high", f"audit/{name}/ci_high")):
                        if m[field] is not None:
                            row[key] = m[field]
                row.update({f"audit/counts/{k}": v for k, v in it["counts"].items()})
                if tables is not None and (table := tables(root, reward, int(seed), int(t))) is not None:
                    row["audit/answers"] = table
                run.log(row, step=int(t))
            run.finish()


def seed_summary(values: Sequence[float]) -> dict[str, float | int]:
    """Mean over seeds and the interval over seeds (`audit.stats.across_seeds`)."""
    s = S.across_seeds(values)
    return {"mean": s.mean, "ci_low": s.low, "ci_high": s.high, "sd": s.sd, "n_seeds": s.n,
            "n_missing": s.n_missing}
