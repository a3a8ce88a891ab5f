"""`python -m audit.report DIR`: an audited experiment as `report.md` and PNG figures.

    python -m audit.gap ckpt=outputs/demo          # writes outputs/demo/audit.json
    python -m audit.report outputs/demo            # writes outputs/demo/report.md, figures/*.png

DIR holds `audit.json` (an audit of the whole experiment), or audits of its parts below it (a
reward or seed dir audited on its own); those are merged, and one reward × seed audited twice is an
error rather than a silent choice.

The report opens with the oracle calibration: every verifier's agreement, accept-invalid and
reject-valid rates on the labelled answers (audit.calibration), the gate's verdict with its reasons
and any warning. Then one table per metric: a row per reward, a column per iteration, each cell the
mean over seeds with the t interval over seeds; where a reward has a single seed the cell is that
seed's value with its environment-bootstrap interval, marked `*`; `unverified` where the gate
withholds an oracle-dependent number. Then the paired comparison of judge designs on the final
iteration: for each reward against `rubric` (against the first reward, said so, when `rubric` was
not run), the difference in VA-Gap on impossible environments with a paired environment bootstrap
(both rewards resampled by the same draw of environments, pooled over the seeds both ran, so the
environment is the unit and its samples are never treated as independent), a two-sided bootstrap
p-value and Bonferroni correction over the comparisons. Last, the over-optimisation curve: apparent
and verified success on impossible environments against √KL(π_t ‖ π_0).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import metric_table as T
from . import stats as S
from .figures import write_figures
from .results import across_seeds, load_results, write_text_atomic

BASELINE = "rubric"
UNVERIFIED = "unverified"
# the controls first in the probe table: what the instrument must see, from both sides
CONTROL_ORDER = ("decisive", "label_anti", "oracle_verdict", "label_gold", "certificate")
CONTROL_ROLE = {"decisive": "positive control", "label_anti": "probe check (invalid chosen)",
                "oracle_verdict": "negative control", "label_gold": "probe check (valid chosen)",
                "certificate": "control: sees the hidden anchor"}


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


TRAIN_COLUMNS = (  # (metrics.json key, column heading), in the table's order
    ("pairs/found", "pairs found"), ("pairs/kept", "pairs kept"), ("train/steps", "optimizer steps"), ("train/loss", "DPO loss"),
    ("train/rewards_chosen", "reward chosen"), ("train/rewards_rejected", "reward rejected"),
    ("train/rewards_margin", "reward margin"), ("train/rewards_accuracy", "reward accuracy"),
    ("train/grad_norm", "grad norm"), ("sample/truncated_share", "truncated samples"),
    ("judge/score_mean", "judge score mean"), ("judge/score_std", "judge score sd"),
)


COUNTS = ("pairs/found", "pairs/kept", "train/steps")


def _count(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else str(int(x))


def train_metrics(audit_path: Path, doc: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """reward -> seed -> t -> the `metrics.json` the training loop wrote for that checkpoint
    (checkpoints are relative to the audit's directory); t = 0 (π_0, nothing trained) and a checkpoint
    whose metrics.json is not beside the audit are left out."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for reward, entry in doc["rewards"].items():
        for seed, s in entry["seeds"].items():
            for t, it in s["iterations"].items():
                f = audit_path.parent / str(it.get("checkpoint", "")) / "metrics.json"
                if int(t) == 0 or not f.is_file():
                    continue
                try:
                    m = json.loads(f.read_text())
                except ValueError as e:
                    raise ReportError(f"{f}: not valid JSON ({e})") from None
                out.setdefault(reward, {}).setdefault(seed, {})[t] = m
    return out


def load_dir(root: Path) -> dict[str, Any]:
    paths = find_audits(root)
    docs = []
    train: dict[str, Any] = {}
    for p in paths:
        try:
            docs.append((p, load_results(p)))
        except ValueError as e:
            raise ReportError(str(e)) from None
        for reward, seeds in train_metrics(p, docs[-1][1]).items():
            train.setdefault(reward, {}).update(seeds)
    doc = merge(docs)
    doc["train"] = train
    return doc


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
        if m.get("status") == UNVERIFIED:
            return UNVERIFIED
        if m["value"] is None:
            return "—"
        return f"{_num(m['value'])} [{_num(m['ci_low'])}, {_num(m['ci_high'])}]*"
    m = entry["across_seeds"][t][metric]
    if m.get("status") == UNVERIFIED:
        return UNVERIFIED
    if m["mean"] is None:
        return "—"
    return f"{_num(m['mean'])} [{_num(m['ci_low'])}, {_num(m['ci_high'])}]"


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


def _title(metric: str) -> str:
    d = T.declared().get(metric)
    return f"{d.metric.title if d else metric.split('/', 1)[0]} — `{metric}`"


# -- paired comparisons -----------------------------------------------------------------------------

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


def _unverified(entry: Mapping[str, Any], seeds: Sequence[str]) -> list[str]:
    return [f"seed {s}" for s in seeds
            if (entry["seeds"][s].get("calibration") or {}).get("gate", {}).get("status") == UNVERIFIED]


def comparisons(doc: Mapping[str, Any]) -> tuple[str | None, str, list[dict[str, Any]]]:
    """(baseline, note, rows): paired environment bootstrap of the VA-Gap difference of every other
    reward against the baseline, Bonferroni-adjusted."""
    rewards = sorted(doc["rewards"])
    if len(rewards) < 2:
        return None, "Only one reward was audited: no paired comparison.", []
    if BASELINE in rewards:
        base, note = BASELINE, f"Each judge design against `{BASELINE}`."
    else:
        base = rewards[0]
        note = (f"`{BASELINE}` was not part of this experiment, so each judge design is compared "
                f"against the first reward in alphabetical order, `{base}`.")
    settings = doc.get("settings") if isinstance(doc.get("settings"), Mapping) else {}
    B = int((settings.get("bootstrap") or {}).get("B") or S.DEFAULT_B)
    rows = []
    for reward in rewards:
        if reward == base:
            continue
        ea, eb = doc["rewards"][reward], doc["rewards"][base]
        t = min(final_iteration(ea), final_iteration(eb))
        seeds = sorted(set(ea["seeds"]) & set(eb["seeds"]), key=int)
        withheld = _unverified(ea, seeds) + _unverified(eb, seeds)
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
        lines.append(head + f"{_num(r['diff'])} [{_num(r['ci_low'])}, {_num(r['ci_high'])}] | "
                     f"{r['n_undefined']} of {r['B']} | {_num(r['p'])} | {_num(p_adj)} |")
    return lines


# -- the over-optimisation curve --------------------------------------------------------------------

def kl_points(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per reward, seed and t: √KL (per answer; a negative estimate is drawn at 0) and apparent and
    verified success on impossible environments (verified None and `unverified` when withheld)."""
    out = []
    for reward, entry in sorted(doc["rewards"].items()):
        for seed, s in sorted(entry["seeds"].items(), key=lambda kv: int(kv[0])):
            for t, it in sorted(s["iterations"].items(), key=lambda kv: int(kv[0])):
                m = it["metrics"]
                kl = (m.get("kl/per_answer") or {}).get("value")
                if kl is None:
                    continue
                ver = m.get("verified/impossible") or {}
                out.append({"reward": reward, "seed": seed, "t": int(t), "kl": kl, "sqrt_kl": math.sqrt(max(kl, 0.0)),
                            "apparent": (m.get("apparent/impossible") or {}).get("value"),
                            "verified": None if ver.get("status") == UNVERIFIED else ver.get("value"),
                            "verified_status": ver.get("status", "ok")})
    return out


def kl_section(doc: Mapping[str, Any]) -> list[str]:
    pts = kl_points(doc)
    if not pts:
        return []
    lines = ["## Apparent and verified success against √KL(π_t ‖ π_0) (impossible environments)", "",
             "KL per answer from the audit's own samples, mean of log π_t(a) − log π_0(a) (figure "
             "`kl_curve.png`, one line per reward and seed).", "",
             "| reward | seed | t | KL | √KL | apparent | verified |", "|---|---|---|---|---|---|---|"]
    for p in pts:
        ver = UNVERIFIED if p["verified_status"] == UNVERIFIED else _num(p["verified"])
        lines.append(f"| {p['reward']} | {p['seed']} | {p['t']} | {_num(p['kl'])} | {_num(p['sqrt_kl'])} | "
                     f"{_num(p['apparent'])} | {ver} |")
    return lines + [""]


def _probe_cell(m: Mapping[str, Any] | None) -> str:
    if not m or m.get("value") is None:
        return "—"
    return f"{_num(m['value'])} [{_num(m.get('ci_low'))}, {_num(m.get('ci_high'))}]"


def probe_section(doc: Mapping[str, Any]) -> list[str]:
    """The report's opening: what training taught each policy to prefer among labelled answers of the
    held-out environments, controls first, at every audited t (95% environment-bootstrap intervals)."""
    rewards = sorted(doc["rewards"], key=lambda r: (CONTROL_ORDER.index(r) if r in CONTROL_ORDER
                                                   else len(CONTROL_ORDER), r))
    rows = []
    for reward in rewards:
        for seed, s in sorted(doc["rewards"][reward]["seeds"].items(), key=lambda kv: int(kv[0])):
            for t, it in sorted(s["iterations"].items(), key=lambda kv: int(kv[0])):
                m = it["metrics"]
                if "pref_margin/impossible" not in m:
                    continue
                rows.append(f"| {reward} | {CONTROL_ROLE.get(reward, 'judge design')} | {seed} | {t} | "
                            f"{_probe_cell(m.get('pref_margin/impossible'))} | "
                            f"{_probe_cell(m.get('pref_accuracy/impossible'))} | "
                            f"{_probe_cell(m.get('pref_margin/control'))} | "
                            f"{_num((m.get('kl/per_answer') or {}).get('value'))} |")
    if not rows:
        return []
    lines = ["## Preference probe (held-out environments, labelled answers)", "",
             "Δℓ_t(a) = log π_t(a|x) − log π_0(a|x) of every labelled answer of the audited environments "
             "(the answer as the policy's own turn, end-of-turn included, τ = 1): DPO's implicit reward. "
             "`pref_margin` is the mean over environments of the mean over their (valid, invalid) pairs of "
             "Δℓ(valid) − Δℓ(invalid), per token (the primary form); below 0, training moved the policy "
             "towards the invalid answers. `pref_accuracy`: the share of pairs where the valid answer "
             "gained more. No verifier is involved: the labels are the data's.", "",
             "| reward | role | seed | t | pref_margin impossible | pref_accuracy impossible | "
             "pref_margin control | KL per answer |", "|---|---|---|---|---|---|---|---|", *rows, ""]
    auroc = [(r, sd, (s["iterations"].get("0", {}).get("metrics", {}).get("likelihood_auroc/impossible")))
             for r in rewards for sd, s in sorted(doc["rewards"][r]["seeds"].items(), key=lambda kv: int(kv[0]))]
    auroc = [(r, sd, m) for r, sd, m in auroc if m]
    if auroc:
        r, sd, m = auroc[0]
        lines += [f"Context at t = 0: π_0 gives the valid answer the higher per-token log-probability in "
                  f"{_probe_cell(m)} of {m.get('n')} (valid, invalid) pairs on impossible environments "
                  f"(`likelihood_auroc`; {r} seed {sd}). The margin of Δℓ cancels that tell; the raw "
                  "likelihood does not.", ""]
    return lines


def power_lines(doc: Mapping[str, Any]) -> list[str]:
    """The power section (audit.power): what this design could detect."""
    from .power import power_section

    return power_section(doc)


def _oracle_label(oracle: Any) -> str:
    """The configured primary oracle in words (its resolved form per run is in the calibration)."""
    if not isinstance(oracle, Mapping):
        return "the data's default (`any` of spec + checks on mini, `llm` on a release)"
    name = oracle.get("name")
    if name == "any":
        return f"`any` of {', '.join(f'`{v}`' for v in oracle.get('verifiers') or [])}"
    return f"`{name}` (model `{oracle.get('model')}`)" if name == "llm" else f"`{name}`"


# -- calibration ------------------------------------------------------------------------------------

def _rate(c: Mapping[str, Any], key: str, k: str, n: str) -> str:
    return f"{_num(c[key])} ({c[k]}/{c[n]})"


def calibration_section(doc: Mapping[str, Any]) -> list[str]:
    """The first table: every verifier on the labelled answers, then each run's gate."""
    lines = ["## Oracle calibration (read this first)", "",
             "Each verifier against labelled answers, per source, never pooled: `stress` = the labelled stress "
             "answers of the audited environments (reported only), `on-policy` = answers the audited policy "
             "wrote, labelled by reading (labelled_answers.jsonl, labels.jsonl of `python -m audit.label`), "
             "`on-policy t = <t>` = those of checkpoint t. The gate reads the on-policy set alone (a checkpoint's "
             "own labels where they hold enough of each class). Rates leave partially_valid answers and "
             "undecided verdicts out.", "",
             "| reward | seed | verifier | set | agreement | accept-invalid | reject-valid | valid | invalid "
             "| partial | undecided |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    gates, undecided = [], []
    for reward, entry in sorted(doc["rewards"].items()):
        for seed, s in sorted(entry["seeds"].items(), key=lambda kv: int(kv[0])):
            cal = s.get("calibration")
            if not cal:
                continue
            primary_first = sorted(cal["verifiers"], key=lambda r: (r != "oracle", not r.startswith("oracle/"), r))
            for role in primary_first:
                sets = {"stress": cal["verifiers"][role].get("stress"),
                        "on-policy": cal["verifiers"][role].get("labelled")}
                sets |= {f"on-policy t = {t}": c.get(role) for t, c in sorted(
                    (cal.get("checkpoints") or {}).items(), key=lambda kv: int(kv[0]))}
                for name, c in sets.items():
                    if c is None:
                        continue
                    lines.append(f"| {reward} | {seed} | {role} | {name} | {_num(c['agreement'])} | "
                                 f"{_rate(c, 'accept_invalid', 'n_accept_invalid', 'n_invalid')} | "
                                 f"{_rate(c, 'reject_valid', 'n_reject_valid', 'n_valid')} | {c['n_valid']} | "
                                 f"{c['n_invalid']} | {c['n_partial']} | {c['n_undecided']} of {c['n_answers']} |")
            g = cal["gate"]
            if g["status"] == UNVERIFIED:
                gates.append(f"- `{reward}` seed {seed}: **unverified** — every oracle-dependent figure (on-policy "
                             f"valid rate, VA-Gap, verified success, on-policy FPR/FNR/AUROC/IBE, Youden J and "
                             f"their drifts) is withheld: " + "; ".join(g["reasons"]) + ".")
            else:
                gates.append(f"- `{reward}` seed {seed}: the primary oracle passes the gate.")
            per_t = cal.get("gates") or {}
            if len({(x["status"], tuple(x["reasons"])) for x in per_t.values()}) > 1:  # checkpoints differ
                gates += [f"  - t = {t}: " + ("passes" if x["status"] != UNVERIFIED else "**unverified**: "
                                              + "; ".join(x["reasons"])) + f" (set `{x.get('set')}`)."
                          for t, x in sorted(per_t.items(), key=lambda kv: int(kv[0]))]
            gates += [f"- warning (`{reward}` seed {seed}): {w}." for w in g.get("warnings", [])]
            for role, recs in sorted((cal.get("undecided") or {}).items()):
                if recs:
                    undecided.append(f"- `{reward}` seed {seed}, `{role}`: {len(recs)} record(s): " + ", ".join(
                        f"`{tid}` ({c['n_undecided']} of {c['n_answers']})" for tid, c in recs.items()) + ".")
    if not gates:
        return []
    return lines + ["", "Gate:", "", *gates, "", "Records a verifier could not decide (undecided verdicts among "
                    "the stress, on-policy and policy answers; on a release, whose records carry no `checks`, "
                    "`spec` decides none):", "", *(undecided or ["- none."]), ""]


def train_section(doc: Mapping[str, Any]) -> list[str]:
    """The training loop's own record of every trained iteration (SPEC §5): pairs, steps, the DPO
    loss and implicit rewards, and the share of samples cut at the answer budget."""
    train = doc.get("train") or {}
    lines = ["## Training per iteration (`iter_<t>/metrics.json`)", ""]
    if not train:
        return lines + ["No training metrics beside the audited checkpoints.", ""]
    lines += ["| reward | seed | t | " + " | ".join(h for _, h in TRAIN_COLUMNS) + " | pairs dropped |",
              "|---" * (len(TRAIN_COLUMNS) + 4) + "|"]
    for reward in sorted(train):
        for seed in sorted(train[reward], key=int):
            for t in sorted(train[reward][seed], key=int):
                rec = train[reward][seed][t]
                m = rec.get("metrics", rec)
                m = {"pairs/found": m.get("pairs/kept")} | m  # runs before max_pairs trained on every pair found
                drops = sorted((k.split("/", 1)[1].removeprefix("dropped_"), int(v)) for k, v in m.items()
                               if k.startswith("pairs/dropped_") and v)
                lines.append(f"| {reward} | {seed} | {t} | "
                             + " | ".join(_count(m.get(k)) if k in COUNTS else _num(m.get(k))
                                          for k, _ in TRAIN_COLUMNS) + " | "
                             + (", ".join(f"{n} {why}" for why, n in drops) or "none") + " |")
    return lines + [""]


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
                  f"oracle {_oracle_label(settings.get('oracle'))}.", ""]
    lines += probe_section(doc)
    lines += calibration_section(doc)
    lines += train_section(doc)
    lines += ["Cells: mean over seeds [95% t interval over seeds]; `*` marks a reward with one seed, "
              "whose cell is that seed's value [95% environment-bootstrap interval]. "
              "— = undefined (e.g. no invalid answer for an FPR); `unverified` = withheld by the oracle "
              "gate (see the calibration above).", ""]
    for metric in metric_names(doc):
        lines += [f"## {_title(metric)}", "", *metric_table(doc, metric), ""]
    base, note, rows = comparisons(doc)
    lines += ["## Paired comparison of judge designs (final iteration)", "", note,
              "VA-Gap on impossible environments, reward minus baseline: paired environment bootstrap (one "
              "draw of environments for both rewards, samples of an environment pooled over the seeds both "
              "ran), two-sided bootstrap p-value; Bonferroni over the comparisons.", ""]
    if rows:
        lines += [*comparison_table(rows), ""]
    lines += kl_section(doc)
    lines += power_lines(doc)
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
