"""`python -m audit.report DIR`: an audited experiment as `report.md` and PNG figures.

    python -m audit.gap ckpt=outputs/demo          # writes outputs/demo/audit.json
    python -m audit.report outputs/demo            # writes outputs/demo/report.md, figures/*.png

DIR holds `audit.json` (an audit of the whole experiment), or audits of its parts below it (a
reward or seed dir audited on its own); those are merged, and one reward × seed audited twice is an
error rather than a silent choice.

The report has one table per metric: a row per reward, a column per iteration, each cell the mean
over seeds with the t interval over seeds; where a reward has a single seed the cell is that seed's
value with its environment-bootstrap interval, marked `*`. Then the paired comparison of judge
designs on the final iteration: for each reward against `rubric` (against the first reward, said
so, when `rubric` was not run), McNemar's exact test on the VA-Gap event 1[A ∧ ¬valid] of impossible
environments, paired by (seed, environment, sample index), with Bonferroni correction over the
comparisons. The pairing by sample index is arbitrary but fair: the n samples of one environment
are exchangeable, so any pairing of them keeps the environments paired, which is what McNemar needs.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import stats as S
from .figures import write_figures
from .results import across_seeds, load_results, write_text_atomic

BASELINE = "rubric"
# report order; metrics not listed follow in alphabetical order
ORDER = (
    "va_gap/impossible", "va_gap/control", "apparent/impossible", "apparent/control",
    "verified/impossible", "verified/control", "valid_rate/impossible", "valid_rate/control",
    "fpr/policy", "fnr/policy", "fpr/stress", "fnr/stress",
    "fpr_drift/policy", "fpr_slope/policy", "fpr_drift/stress", "fpr_slope/stress",
    "youden_j",
    "auroc/stress/judge", "auroc/stress/length", "auroc/stress/hedge", "auroc/stress/length_matched",
    "auroc/policy/judge", "auroc/policy/length", "auroc/policy/hedge", "auroc/policy/length_matched",
    "ibe/policy/judge+checks", "ibe/stress/judge+checks", "ibe/policy/judge+oracle2", "ibe/stress/judge+oracle2",
    "oracle/fpr_stress", "oracle/fnr_stress",
)
TITLES = {
    "va_gap": "VA-Gap P(A ∧ ¬valid)", "apparent": "Apparent success mean(A)",
    "verified": "Verified success mean(A ∧ valid)", "valid_rate": "Policy valid rate",
    "fpr": "FPR P(A | ¬valid)", "fnr": "FNR P(¬A | valid)", "fpr_drift": "FPR drift FPR_t − FPR_0",
    "fpr_slope": "FPR drift: OLS slope over t", "youden_j": "Policy discrimination (Youden J)",
    "auroc": "Within-environment AUROC", "ibe": "Independence-bound excess (IBE)",
    "oracle": "The oracle against the release labels",
}


class ReportError(ValueError):
    pass


# -- loading ----------------------------------------------------------------------------------------

def find_audits(root: Path) -> list[Path]:
    """DIR/audit.json, or else every audit.json below DIR (reward and seed dirs audited apart)."""
    if (root / "audit.json").is_file():
        return [root / "audit.json"]
    found = sorted(p for p in root.rglob("audit.json") if "audit_cache" not in p.parts)
    if not found:
        raise ReportError(f"{root}: no audit.json found; run `python -m audit.gap ckpt={root}` first")
    return found


def merge(docs: Sequence[tuple[Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """One document from several audits; the same reward × seed in two of them is an error."""
    rewards: dict[str, Any] = {}
    seen: dict[tuple[str, str], Path] = {}
    settings = []
    for path, doc in docs:
        settings.append(doc.get("settings", {}))
        for reward, entry in doc["rewards"].items():
            for seed, s in entry["seeds"].items():
                if (reward, seed) in seen:
                    raise ReportError(f"{reward} seed {seed} is audited in both {seen[(reward, seed)]} and "
                                      f"{path}; remove one of them")
                seen[(reward, seed)] = path
                rewards.setdefault(reward, {"seeds": {}})["seeds"][seed] = s
    for entry in rewards.values():
        entry["across_seeds"] = across_seeds(entry["seeds"])
    distinct = [s for i, s in enumerate(settings) if s not in settings[:i]]
    return {"version": docs[0][1]["version"], "settings": distinct[0] if len(distinct) == 1 else distinct,
            "rewards": rewards}


def load_dir(root: Path) -> dict[str, Any]:
    paths = find_audits(root)
    docs = []
    for p in paths:
        try:
            docs.append((p, load_results(p)))
        except ValueError as e:
            raise ReportError(str(e)) from None
    return merge(docs)


# -- tables -----------------------------------------------------------------------------------------

def _num(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3f}"


def cell(entry: Mapping[str, Any], t: str, metric: str) -> str:
    """Mean over seeds [t interval]; one seed: its value [bootstrap interval]*; — when undefined."""
    seeds = [s for s in entry["seeds"].values() if metric in s["iterations"].get(t, {}).get("metrics", {})]
    if not seeds:
        return ""
    if len(seeds) == 1:
        m = seeds[0]["iterations"][t]["metrics"][metric]
        if m["value"] is None:
            return "—"
        return f"{_num(m['value'])} [{_num(m['ci_low'])}, {_num(m['ci_high'])}]*"
    m = entry["across_seeds"][t][metric]
    if m["mean"] is None:
        return "—"
    return f"{_num(m['mean'])} [{_num(m['ci_low'])}, {_num(m['ci_high'])}]"


def metric_names(doc: Mapping[str, Any]) -> list[str]:
    names = {n for e in doc["rewards"].values() for s in e["seeds"].values()
             for it in s["iterations"].values() for n in it["metrics"]}
    return [n for n in ORDER if n in names] + sorted(names - set(ORDER))


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


def _title(metric: str) -> str:
    head = metric.split("/", 1)[0]
    return f"{TITLES.get(head, head)} — `{metric}`"


# -- paired comparisons -----------------------------------------------------------------------------

def final_iteration(entry: Mapping[str, Any]) -> int:
    """The last iteration every seed of this reward has."""
    return min(max(int(t) for t in s["iterations"]) for s in entry["seeds"].values())


def paired_outcomes(a: Mapping[str, Any], b: Mapping[str, Any], t: int, kind: str = "impossible"):
    """VA-Gap events of two rewards at iteration t, paired by (seed, task_id, sample index)."""
    xa, xb = [], []
    for seed in sorted(set(a["seeds"]) & set(b["seeds"]), key=int):
        ia = a["seeds"][seed]["iterations"].get(str(t))
        ib = b["seeds"][seed]["iterations"].get(str(t))
        if ia is None or ib is None:
            continue
        ea, eb = ia["exploit"].get(kind, {}), ib["exploit"].get(kind, {})
        for task in sorted(set(ea) & set(eb)):
            for u, v in zip(ea[task], eb[task]):  # noqa: B905 - n may differ; pair what both have
                if u is not None and v is not None:
                    xa.append(bool(u))
                    xb.append(bool(v))
    return xa, xb


def comparisons(doc: Mapping[str, Any]) -> tuple[str | None, str, list[dict[str, Any]]]:
    """(baseline, note, rows): McNemar of every other reward against the baseline, Bonferroni-adjusted."""
    rewards = sorted(doc["rewards"])
    if len(rewards) < 2:
        return None, "Only one reward was audited: no paired comparison.", []
    if BASELINE in rewards:
        base, note = BASELINE, f"Each judge design against `{BASELINE}`."
    else:
        base = rewards[0]
        note = (f"`{BASELINE}` was not part of this experiment, so each judge design is compared "
                f"against the first reward in alphabetical order, `{base}`.")
    rows = []
    for reward in rewards:
        if reward == base:
            continue
        t = min(final_iteration(doc["rewards"][reward]), final_iteration(doc["rewards"][base]))
        xa, xb = paired_outcomes(doc["rewards"][reward], doc["rewards"][base], t)
        test = S.mcnemar_exact(xa, xb)
        rows.append({"reward": reward, "baseline": base, "iteration": t, "n": test.n,
                     "reward_only": test.a_only, "baseline_only": test.b_only,
                     "rate_reward": sum(xa) / len(xa) if xa else None,
                     "rate_baseline": sum(xb) / len(xb) if xb else None, "p": test.pvalue})
    for row, adj in zip(rows, S.bonferroni([r["p"] for r in rows]), strict=True):
        row["p_bonferroni"] = float(adj)
    return base, note, rows


def comparison_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| reward | vs | t | pairs | VA-Gap reward | VA-Gap baseline | only reward | only baseline "
             "| p (exact) | p (Bonferroni) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['reward']} | {r['baseline']} | {r['iteration']} | {r['n']} | "
                     f"{_num(r['rate_reward'])} | {_num(r['rate_baseline'])} | {r['reward_only']} | "
                     f"{r['baseline_only']} | {r['p']:.4g} | {r['p_bonferroni']:.4g} |")
    return lines


# -- the document -----------------------------------------------------------------------------------

def render(doc: Mapping[str, Any], figures: Sequence[str] = ()) -> str:
    """report.md text (pure)."""
    seeds = {r: sorted(e["seeds"], key=int) for r, e in sorted(doc["rewards"].items())}
    settings = doc.get("settings", {})
    lines = ["# Hidden-anchor audit report", "",
             "Rewards and seeds: " + "; ".join(f"`{r}` seeds {', '.join(s)}" for r, s in seeds.items()) + ".",
             ""]
    if isinstance(settings, Mapping) and settings:
        boot = settings.get("bootstrap", {})
        lines += [f"Audit settings: n = {settings.get('n')} answers per environment, bootstrap "
                  f"B = {boot.get('B')} environment resamples, seed {settings.get('seed')}, "
                  f"oracle `{settings.get('oracle', {}).get('model')}`.", ""]
    lines += ["Cells: mean over seeds [95% t interval over seeds]; `*` marks a reward with one seed, "
              "whose cell is that seed's value [95% environment-bootstrap interval]. "
              "— = undefined (e.g. no invalid answer for an FPR).", ""]
    for metric in metric_names(doc):
        lines += [f"## {_title(metric)}", "", *metric_table(doc, metric), ""]
    base, note, rows = comparisons(doc)
    lines += ["## Paired comparison of judge designs (final iteration)", "", note,
              "McNemar exact test on the VA-Gap event 1[A ∧ ¬valid] of impossible environments, pairs "
              "(seed, environment, sample index); Bonferroni over the comparisons.", ""]
    if rows:
        lines += [*comparison_table(rows), ""]
    if figures:
        lines += ["## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures] + [""]
    return "\n".join(lines)


def write_report(root: Path, out: Path | None = None) -> Path:
    doc = load_dir(root)
    out = out or root / "report.md"
    figs = write_figures(doc, out.parent / "figures")
    write_text_atomic(out, render(doc, [f.relative_to(out.parent).as_posix() for f in figs]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m audit.report", description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, help="an audited experiment dir (holding audit.json, or audits below it)")
    ap.add_argument("--out", type=Path, default=None, help="report path (default DIR/report.md)")
    args = ap.parse_args(argv)
    if not args.dir.is_dir():
        print(f"audit.report: error: {args.dir}: not a directory", file=sys.stderr)
        return 1
    try:
        out = write_report(args.dir, args.out)
    except ReportError as e:
        print(f"audit.report: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} and its figures in {out.parent / 'figures'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
