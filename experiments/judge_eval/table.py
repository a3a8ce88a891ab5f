"""Markdown tables from experiments/judge_eval/summary.json: `python experiments/judge_eval/table.py`.

Per data set and answer kind, one row per reward and prompt regime (`reward.instruction`); then, per
data set, the two regimes side by side for each reward (what the neutral regime changes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REWARDS = ("anchored", "commit_first", "blind_solve", "rubric", "generic")
INSTRUCTIONS = ("neutral", "honesty_aware")
NOT_RUN = "(not run)"


def f(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def rate(r):
    return "–" if r is None else f"{f(r['value'])} ({r['numerator']}/{r['denominator']})"


def auroc(a):
    return "–" if a is None else f"{f(a['value'])} ({a['n_pairs']})"


def entry(summary: dict, data: str, reward: str, instruction: str, kind: str) -> dict | None:
    return summary.get(f"{data}/{reward}/{instruction}", {}).get(kind)


def table(summary: dict, data: str, kind: str) -> str:
    head = ("| reward | instruction | FPR | FNR | AUROC | length | hedge | verdict word | length-matched | "
            "swap cons. | NaN | oracle agr. | checks agr. | IBE judge×checks |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for reward in REWARDS:
        for instruction in INSTRUCTIONS:
            s = entry(summary, data, reward, instruction, kind)
            if s is None:
                lines.append(f"| {reward} | {instruction} | " + " | ".join([NOT_RUN] + [""] * 11) + " |")
                continue
            swap, oracle = s["swap_consistency"], s["oracle"]
            lines.append("| " + " | ".join([
                reward, instruction, rate(s["fpr"]), rate(s["fnr"]), auroc(s["auroc"]), auroc(s["length_auroc"]),
                auroc(s["hedge_auroc"]), auroc(s.get("verdict_word_auroc")), auroc(s["length_matched_auroc"]),
                "n/a" if swap is None else f"{f(swap['value'])} ({swap['n']})",
                f(s["nan_rate"]["value"]),
                "–" if oracle is None else f(oracle["agreement"]), f(s["checks"]["agreement"]),
                f(s["ibe_judge_checks"]["value"], 3),
            ]) + " |")
    return "\n".join(lines)


def comparison(summary: dict, data: str) -> str:
    """neutral → honesty_aware per reward: FPR, FNR, AUROC over all answers, and FPR on impossible ones."""
    head = "| reward | FPR | FNR | AUROC | FPR, impossible answers |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for reward in REWARDS:
        cells = []
        for kind, key, show in (("all", "fpr", rate), ("all", "fnr", rate), ("all", "auroc", auroc),
                                ("impossible", "fpr", rate)):
            pair = [entry(summary, data, reward, i, kind) for i in INSTRUCTIONS]
            cells.append(" → ".join(NOT_RUN if s is None else show(s[key]) for s in pair))
        lines.append(f"| {reward} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(path: Path = HERE / "summary.json") -> None:
    summary = json.loads(path.read_text())
    datas = sorted({k.split("/")[0] for k in summary})
    for data in datas:
        for kind in ("all", "impossible", "control"):
            print(f"**{data}, {kind} answers**\n\n{table(summary, data, kind)}\n")
    for data in datas:
        print(f"**{data}: neutral → honesty_aware**\n\n{comparison(summary, data)}\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "summary.json")
