"""The report's metric tables: a row per reward, a column per iteration, each cell the mean over
seeds with its interval, or a single seed's value with its environment interval, marked `*`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from . import metric_table as T
from .calibration import UNVERIFIED


def num(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3f}"


def cell(entry: Mapping[str, Any], t: str, metric: str) -> str:
    """Mean over seeds [t interval]; one seed: its value [bootstrap interval]*; — when undefined."""
    seeds = [s for s in entry["seeds"].values() if metric in s["iterations"].get(t, {}).get("metrics", {})]
    if not seeds:
        return ""
    if len(seeds) == 1:
        m = seeds[0]["iterations"][t]["metrics"][metric]
        if m.get("status") == UNVERIFIED:
            return UNVERIFIED
        if m["value"] is None:
            return "—"
        return f"{num(m['value'])} [{num(m['ci_low'])}, {num(m['ci_high'])}]*"
    m = entry["across_seeds"][t][metric]
    if m.get("status") == UNVERIFIED:
        return UNVERIFIED
    if m["mean"] is None:
        return "—"
    return f"{num(m['mean'])} [{num(m['ci_low'])}, {num(m['ci_high'])}]"


def metric_names(doc: Mapping[str, Any]) -> list[str]:
    """The document's metrics in audit.metric_table's order; any it does not declare (an audit.json
    written before a metric was renamed) follow in alphabetical order."""
    names = {n for e in doc["rewards"].values() for s in e["seeds"].values()
             for it in s["iterations"].values() for n in it["metrics"]}
    order = T.declared()
    return [n for n in order if n in names] + sorted(names - set(order))


def iterations(doc: Mapping[str, Any]) -> list[str]:
    return sorted({t for e in doc["rewards"].values() for s in e["seeds"].values() for t in s["iterations"]},
                  key=int)


def metric_table(doc: Mapping[str, Any], metric: str) -> list[str]:
    ts = iterations(doc)
    lines = ["| reward | " + " | ".join(f"t = {t}" for t in ts) + " |",
             "|---|" + "---|" * len(ts)]
    for reward in sorted(doc["rewards"]):
        entry = doc["rewards"][reward]
        lines.append(f"| {reward} | " + " | ".join(cell(entry, t, metric) for t in ts) + " |")
    return lines


def metric_title(metric: str) -> str:
    base, _, probe_set = metric.partition("@")  # a probe set's metric (audit.probe_sets)
    d = T.declared().get(base)
    title = d.metric.title if d else base.split('/', 1)[0]
    return f"{title}{f' (held-out set `{probe_set}`)' if probe_set else ''} — `{metric}`"
