"""The report's sections read from the audited runs: the preference probe, the oracle calibration
and its gate, the training loop's record per iteration, and apparent and verified success
against √KL(π_t ‖ π_0)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .calibration import UNVERIFIED
from .figures import kl_points
from .report_tables import num

# the controls first in the probe table: what the instrument must see, from both sides
CONTROL_ORDER = ("decisive", "label_anti", "random", "oracle_verdict", "label_gold", "certificate")
CONTROL_ROLE = {"decisive": "positive control", "label_anti": "probe check (invalid chosen)",
                "random": "null (reads nothing)",
                "oracle_verdict": "negative control", "label_gold": "probe check (valid chosen)",
                "certificate": "control: sees the hidden anchor"}

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


def kl_section(doc: Mapping[str, Any]) -> list[str]:
    pts = kl_points(doc)
    if not pts:
        return []
    lines = ["## Apparent and verified success against √KL(π_t ‖ π_0) (impossible environments)", "",
             "KL per answer from the audit's own samples, mean of log π_t(a) − log π_0(a) (figure "
             "`kl_curve.png`, one line per reward and seed).", "",
             "| reward | seed | t | KL | √KL | apparent | verified |", "|---|---|---|---|---|---|---|"]
    for p in pts:
        ver = UNVERIFIED if p["verified_status"] == UNVERIFIED else num(p["verified"])
        lines.append(f"| {p['reward']} | {p['seed']} | {p['t']} | {num(p['kl'])} | {num(p['sqrt_kl'])} | "
                     f"{num(p['apparent'])} | {ver} |")
    return lines + [""]


def _probe_cell(m: Mapping[str, Any] | None) -> str:
    if not m or m.get("value") is None:
        return "—"
    return f"{num(m['value'])} [{num(m.get('ci_low'))}, {num(m.get('ci_high'))}]"


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
                            f"{num((m.get('kl/per_answer') or {}).get('value'))} |")
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


def _rate(c: Mapping[str, Any], key: str, k: str, n: str) -> str:
    ci = c.get(f"{key}_ci")  # clustered by environment (audit.stats.cluster_wilson)
    return f"{num(c[key])} ({c[k]}/{c[n]})" + (f" [{num(ci[0])}, {num(ci[1])}]" if ci else "")


def calibration_section(doc: Mapping[str, Any]) -> list[str]:
    """The first table: every verifier on the labelled answers, then each run's gate."""
    lines = ["## Oracle calibration (read this first)", "",
             "Each verifier against labelled answers, per source, never pooled: `stress` = the labelled stress "
             "answers of the audited environments (reported only), `on-policy` = answers the audited policy "
             "wrote, labelled by reading (labelled_answers.jsonl, labels.jsonl of `python -m audit.label`), "
             "`on-policy t = <t>` = those of checkpoint t. The gate reads the on-policy set alone (a checkpoint's "
             "own labels where they hold enough of each class), and reads only the labelled rows the audited policy "
             "wrote (`audit.gate_rows`). Rates leave partially_valid answers and undecided verdicts out; "
             "[95% Wilson interval at the effective sample size, clustered by environment].", "",
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
                    lines.append(f"| {reward} | {seed} | {role} | {name} | {num(c['agreement'])} | "
                                 f"{_rate(c, 'accept_invalid', 'n_accept_invalid', 'n_invalid')} | "
                                 f"{_rate(c, 'reject_valid', 'n_reject_valid', 'n_valid')} | {c['n_valid']} | "
                                 f"{c['n_invalid']} | {c['n_partial']} | {c['n_undecided']} of {c['n_answers']} |")
            g = cal["gate"]
            read = cal.get("read")
            if read is not None:  # which labelled rows of the audited policy the gate read
                gates.append(f"- `{reward}` seed {seed}: the gate read {sum(read.values())} labelled row(s) the audited "
                             "policy wrote" + (": " + ", ".join(f"{n} of `{f}`" for f, n in read.items()) if read else "")
                             + ".")
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
    """The training loop's own record of every trained iteration (docs/method.md §Iteration record): pairs, steps, the DPO
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
                             + " | ".join(_count(m.get(k)) if k in COUNTS else num(m.get(k))
                                          for k, _ in TRAIN_COLUMNS) + " | "
                             + (", ".join(f"{n} {why}" for why, n in drops) or "none") + " |")
    return lines + [""]
