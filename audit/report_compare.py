"""The report's paired comparison of rewards on the final iteration: each reward against the
baseline (the audit's `baseline=`, the null `random` by default; else `rubric`; else the first
reward, said so), the difference in VA-Gap on impossible environments with a paired environment
bootstrap (both rewards resampled by the same draw of environments, pooled over the seeds both ran,
so the environment is the unit and its samples are never treated as independent), a two-sided
bootstrap p-value and Bonferroni over the comparisons."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import stats as S
from .calibration import UNVERIFIED
from .contrasts import DEFAULT_BASELINE
from .report_tables import num

# After the audit's own `baseline=`: the null first, since every design is read against a reward that
# reads nothing (docs/method.md); `rubric`, the paper's naive judge, for experiments that ran no null.
BASELINES = (DEFAULT_BASELINE, "rubric")


def final_iteration(entry: Mapping[str, Any]) -> int:
    """The last iteration every seed of this reward has."""
    return min(max(int(t) for t in s["iterations"]) for s in entry["seeds"].values())


def _per_env_events(a: Mapping[str, Any], t: int, seeds: Sequence[str], kind: str) -> dict[str, list[int]]:
    """task_id -> the defined VA-Gap events 1[A ∧ ¬valid] of `seeds` at iteration t."""
    out: dict[str, list[int]] = {}
    for seed in seeds:
        it = a["seeds"][seed]["iterations"].get(str(t))
        for task, events in ((it or {}).get("exploit", {}).get(kind, {})).items():
            out.setdefault(task, []).extend(int(e) for e in events if e is not None)
    return out


def _unverified(reward: str, entry: Mapping[str, Any], seeds: Sequence[str]) -> list[str]:
    return [f"`{reward}` seed {s}" for s in seeds
            if (entry["seeds"][s].get("calibration") or {}).get("gate", {}).get("status") == UNVERIFIED]


def comparisons(doc: Mapping[str, Any]) -> tuple[str | None, str, list[dict[str, Any]]]:
    """(baseline, note, rows): paired environment bootstrap of the VA-Gap difference of every other
    reward against the baseline, Bonferroni-adjusted."""
    rewards = sorted(doc["rewards"])
    if len(rewards) < 2:
        return None, "Only one reward was audited: no paired comparison.", []
    settings = doc.get("settings") if isinstance(doc.get("settings"), Mapping) else {}
    base = next((b for b in (settings.get("baseline"), *BASELINES) if b in rewards), None)
    if base is not None:
        note = f"Each reward against `{base}`."
    else:
        base = rewards[0]
        note = (f"Neither {' nor '.join(f'`{b}`' for b in BASELINES)} was part of this experiment, so each "
                f"reward is compared against the first in alphabetical order, `{base}`.")
    B = int((settings.get("bootstrap") or {}).get("B") or S.DEFAULT_B)
    rows = []
    for reward in rewards:
        if reward == base:
            continue
        ea, eb = doc["rewards"][reward], doc["rewards"][base]
        t = min(final_iteration(ea), final_iteration(eb))
        seeds = sorted(set(ea["seeds"]) & set(eb["seeds"]), key=int)
        withheld = _unverified(reward, ea, seeds) + _unverified(base, eb, seeds)
        xa, xb = _per_env_events(ea, t, seeds, "impossible"), _per_env_events(eb, t, seeds, "impossible")
        tasks = sorted(set(xa) & set(xb))
        row = {"reward": reward, "baseline": base, "iteration": t, "environments": len(tasks),
               "n_reward": sum(len(xa[k]) for k in tasks), "n_baseline": sum(len(xb[k]) for k in tasks)}
        if withheld:
            row |= {"status": UNVERIFIED, "reason": f"the oracle gate failed for {', '.join(withheld)}"}
        elif tasks:
            d = S.paired_bootstrap_diff([sum(xa[k]) for k in tasks], [len(xa[k]) for k in tasks],
                                        [sum(xb[k]) for k in tasks], [len(xb[k]) for k in tasks], tasks,
                                        rng=np.random.default_rng([int(settings.get("seed") or 0), t]), B=B)
            row |= {"status": "ok", "diff": d.estimate, "ci_low": d.low, "ci_high": d.high, "p": d.pvalue,
                    "B": d.B, "n_undefined": d.n_undefined}
        else:
            row |= {"status": "ok", "diff": float("nan"), "ci_low": float("nan"), "ci_high": float("nan"),
                    "p": float("nan"), "B": B, "n_undefined": 0}
        rows.append(row)
    tested = [r for r in rows if r["status"] == "ok" and math.isfinite(r["p"])]
    for row, adj in zip(tested, S.bonferroni([r["p"] for r in tested]) if tested else [], strict=True):
        row["p_bonferroni"] = float(adj)
    return base, note, rows


def comparison_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| reward | vs | t | environments | answers (reward / baseline) | VA-Gap difference [95% CI] "
             "| undefined replicates | p (bootstrap) | p (Bonferroni) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = (f"| {r['reward']} | {r['baseline']} | {r['iteration']} | {r['environments']} | "
                f"{r['n_reward']} / {r['n_baseline']} | ")
        if r["status"] == UNVERIFIED:
            lines.append(head + f"unverified ({r['reason']}) | | | |")
            continue
        p_adj = r.get("p_bonferroni")
        lines.append(head + f"{num(r['diff'])} [{num(r['ci_low'])}, {num(r['ci_high'])}] | "
                     f"{r['n_undefined']} of {r['B']} | {num(r['p'])} | {num(p_adj)} |")
    return lines
