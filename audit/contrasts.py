"""Across seeds and between rewards, from an `audit.json`'s per-seed figures (pure).

- `seed_interval`: the `seed = all` interval of one reward's metric, `audit.stats.seeds_and_environments`:
  the spread of the seeds' values plus the environment sampling every seed shares. A seed's
  environment-level SE is read from its per-environment values where the audit wrote them
  (`per_env`: the means over environments, i.e. the preference probe) and they vary, sd/√k;
  otherwise from its interval, half-width / z (a percentile interval's normal-equivalent SE), with
  its iteration's environments for the degrees of freedom (none recorded: df ∞). The interval, and
  a contrast's, is cut to the metric's range where it has one (`audit.stats.within`).
- `reward_contrasts`: every reward against a baseline reward (default `random`, the null judge,
  when it was audited) on the same environments, `audit.stats.paired_contrast` of the per-environment
  values: written as `<metric>_diff/<rest>` (e.g. `pref_margin_diff/impossible`,
  `pref_margin_diff/impossible@release`) with the baseline named, at every iteration both audited.
  Only environments both rewards have (in every seed) are read; their number is `n`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import stats as sps

from . import stats as S
from .metric_table import bounds

DEFAULT_BASELINE = "random"


def diff_name(metric: str) -> str:
    """`pref_margin/impossible@release` -> `pref_margin_diff/impossible@release`."""
    head, sep, rest = metric.partition("/")
    return f"{head}_diff{sep}{rest}"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _seed_se(it: Mapping[str, Any], name: str, alpha: float) -> tuple[float, int]:
    """(environment-level SE, environments) of one seed's metric at one iteration; NaN when unknown."""
    per = (it.get("per_env") or {}).get(name)
    v = np.array([x for x in (per or {}).values() if _finite(x)], dtype=float)
    # no spread between environments at a share's edge (0 or 1 everywhere) is no certainty: the seed's
    # own interval (a Wilson one there, audit.stats.share_t_ci) says how much a dozen environments tell
    if per and not (len(v) > 1 and np.ptp(v) == 0 and v[0] in (0.0, 1.0)):
        return (float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan")), len(v)
    m = it["metrics"][name]
    k = int((it.get("counts") or {}).get("environments") or 0)
    if not (_finite(m.get("ci_low")) and _finite(m.get("ci_high"))):
        return float("nan"), k
    return (m["ci_high"] - m["ci_low"]) / (2 * float(sps.norm.ppf(1 - alpha / 2))), k


def seed_interval(seeds: Mapping[str, Any], t: str, name: str, alpha: float = 0.05) -> dict[str, Any]:
    """{ci_low, ci_high, se, df, interval}: the seeds' mean with seed and environment variation
    (NaN ends with fewer than two seeds that have a value and an SE)."""
    values, ses, ks = [], [], []
    for s in seeds.values():
        it = s["iterations"].get(t)
        m = it and it["metrics"].get(name)
        if not m or not _finite(m.get("value")):
            continue
        se, k = _seed_se(it, name, alpha)
        values.append(float(m["value"]))
        ses.append(se)
        ks.append(k)
    known = [k for k in ks if k >= 2]
    c = S.seeds_and_environments(values, ses, min(known) if known else None, alpha=alpha)
    low, high = S.within(c.low, c.high, bounds(name))
    return {"ci_low": low, "ci_high": high, "se": c.se, "df": c.df, "interval": "seeds+environments"}


def diff_bounds(name: str) -> tuple[float, float] | None:
    """The range of a difference of two values of `name`: [lo − hi, hi − lo]."""
    r = bounds(name)
    return None if r is None else (r[0] - r[1], r[1] - r[0])


def _per_env(entry: Mapping[str, Any], t: str, name: str) -> list[dict[str, float]] | None:
    out = []
    for s in entry["seeds"].values():
        it = s["iterations"].get(t)
        per = it and (it.get("per_env") or {}).get(name)
        if not per:
            return None  # a seed without this metric at t: no contrast rather than a partial one
        out.append({e: v for e, v in per.items() if _finite(v)})
    return out or None


def contrast(a: list[dict[str, float]], b: list[dict[str, float]], alpha: float = 0.05) -> S.Combined | None:
    """paired_contrast on the environments every seed of both rewards has; None with none shared."""
    envs = sorted(set.intersection(*(set(x) for x in a + b)))
    if not envs:
        return None
    return S.paired_contrast(np.array([[x[e] for e in envs] for x in a]), np.array([[x[e] for e in envs] for x in b]),
                             alpha=alpha)


def reward_contrasts(rewards: Mapping[str, Any], baseline: str | None = None,
                     alpha: float = 0.05) -> dict[str, Any]:
    """{"baseline": name | None, "reason": why none, "rewards": {reward: {t: {diff metric: {...}}}}}."""
    baseline = baseline or DEFAULT_BASELINE
    if baseline not in rewards:
        return {"baseline": None, "reason": f"baseline reward {baseline!r} was not audited", "rewards": {}}
    base = rewards[baseline]
    out: dict[str, Any] = {}
    for reward, entry in sorted(rewards.items()):
        if reward == baseline:
            continue
        for t in sorted(set.intersection(*(set(s["iterations"]) for s in [*entry["seeds"].values(),
                                                                          *base["seeds"].values()])), key=int):
            names = set.intersection(*(set(s["iterations"][t].get("per_env") or {})
                                       for s in [*entry["seeds"].values(), *base["seeds"].values()]))
            for name in sorted(names):
                a, b = _per_env(entry, t, name), _per_env(base, t, name)
                c = contrast(a, b, alpha) if a and b else None
                if c is None:
                    continue
                low, high = S.within(c.low, c.high, diff_bounds(name))
                out.setdefault(reward, {}).setdefault(t, {})[diff_name(name)] = {
                    "baseline": baseline, "of": name, "value": c.estimate, "ci_low": low, "ci_high": high,
                    "se": c.se, "df": c.df, "p": c.pvalue, "n": c.n_clusters,
                    "n_seeds": list(c.n_seeds), "status": "ok", "reason": None}
    return {"baseline": baseline, "reason": None, "rewards": out}


def _num(x: Any) -> str:
    return f"{x:+.3f}" if _finite(x) else "—"


def _cells(m: Mapping[str, Any]) -> str:
    """A contrast's table cells: difference [interval] | p | environments | seeds."""
    p = f"{m['p']:.3g}" if _finite(m.get("p")) else "—"
    return (f"{_num(m['value'])} [{_num(m['ci_low'])}, {_num(m['ci_high'])}] | {p} | {m['n']} | "
            f"{' vs '.join(map(str, m['n_seeds']))}")


def contrast_lines(doc: Mapping[str, Any]) -> list[str]:
    """The report's section: each reward minus the baseline at every iteration, per contrast metric."""
    c = doc.get("contrasts") or {}
    lines = ["## Rewards against the baseline (paired over environments, across seeds)", ""]
    if not c.get("baseline"):
        return lines + [f"No contrast: {c.get('reason') or 'no baseline reward'} (`baseline=NAME` picks one).", ""]
    lines += [f"Reward minus `{c['baseline']}` on the same environments (`audit.stats.paired_contrast`): per "
              "environment the mean over each reward's seeds, the difference's mean over the environments both "
              "have, 95% t interval with the seeds' spread added (Satterthwaite df); two-sided p.", "",
              "| reward | metric | t | difference [95% interval] | p | environments | seeds |",
              "|---|---|---|---|---|---|---|"]
    rows = 0
    for reward, by_t in sorted((c.get("rewards") or {}).items()):
        for t, ms in sorted(by_t.items(), key=lambda kv: int(kv[0])):
            for name, m in sorted(ms.items()):
                rows += 1
                lines.append(f"| {reward} | `{name}` | {t} | {_cells(m)} |")
    if not rows:
        lines.append("| — | no metric with per-environment values in both rewards | | | | | |")
    return lines + [""]


# the headline figure and its release twin: a design-against-design table of every contrast metric
# would repeat the baseline section once per reward compared against
PAIRWISE_METRICS = ("pref_margin_diff/impossible", "pref_margin_diff/impossible@release")


def pairwise_lines(rewards: Mapping[str, Any], against: list[str], alpha: float = 0.05) -> list[str]:
    """The report's section for `--against`: every reward minus each named reward at the last iteration
    both audited, on `PAIRWISE_METRICS` (e.g. a design against the positive control, or two designs)."""
    if not against:
        return []
    lines = ["## Rewards against each other (paired over environments, across seeds; last iteration both ran)", "",
             "As the section above, with the reward subtracted named in each row (`--against`).", "",
             "| reward | minus | metric | t | difference [95% interval] | p | environments | seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for base in dict.fromkeys(against):  # a reward named twice is read against once
        for reward, by_t in sorted(reward_contrasts(rewards, base, alpha)["rewards"].items()):
            t = max(by_t, key=int)
            for name in PAIRWISE_METRICS:
                m = by_t[t].get(name)
                if m is None:
                    continue
                lines.append(f"| {reward} | {base} | `{name}` | {t} | {_cells(m)} |")
    return lines + [""]
