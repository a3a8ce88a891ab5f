"""Markdown tables from experiments/judge_eval/summary.json: `python experiments/judge_eval/table.py`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REWARDS = ("anchored", "commit_first", "blind_solve", "rubric", "generic")


def f(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def rate(r):
    return "–" if r is None else f"{f(r['value'])} ({r['numerator']}/{r['denominator']})"


def auroc(a):
    return f"{f(a['value'])} ({a['n_pairs']})"


def table(summary: dict, data: str, kind: str) -> str:
    head = ("| reward | FPR | FNR | AUROC | length | hedge | length-matched | swap cons. | NaN | "
            "oracle agr. | checks agr. | IBE judge×checks |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for reward in REWARDS:
        s = summary.get(f"{data}/{reward}", {}).get(kind)
        if s is None:
            lines.append(f"| {reward} | " + " | ".join(["(not run)"] + [""] * 10) + " |")
            continue
        swap = s["swap_consistency"]
        oracle = s["oracle"]
        lines.append("| " + " | ".join([
            reward, rate(s["fpr"]), rate(s["fnr"]), auroc(s["auroc"]), auroc(s["length_auroc"]),
            auroc(s["hedge_auroc"]), auroc(s["length_matched_auroc"]),
            "n/a" if swap is None else f"{f(swap['value'])} ({swap['n']})",
            f(s["nan_rate"]["value"]),
            "–" if oracle is None else f(oracle["agreement"]), f(s["checks"]["agreement"]),
            f(s["ibe_judge_checks"]["value"], 3),
        ]) + " |")
    return "\n".join(lines)


def main(path: Path = HERE / "summary.json") -> None:
    summary = json.loads(path.read_text())
    for data in sorted({k.split("/")[0] for k in summary}):
        for kind in ("all", "impossible", "control"):
            print(f"**{data}, {kind} answers**\n\n{table(summary, data, kind)}\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "summary.json")
