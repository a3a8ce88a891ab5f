"""How strongly the `decisive` positive control prefers invalid answers, on the labelled stress answers.

    python -m experiments.judge_eval.decisive_auroc          # from the repository root

docs/method.md §Controls: `decisive` counts as a positive control only when, on the fixed stress answers of the
*train* split, it prefers invalid over valid answers on impossible environments (within-environment
AUROC ≥ 0.80), reported beside its held-out figure on the audit split. For each split of data/mini
(train, audit) and each kind (impossible, control) this scores every stress answer with the reward
itself (`build_judge("decisive")`, the items `judge_item` builds) and reports

    AUROC(invalid ≻ valid) = over all (valid, invalid) pairs of one environment, the share where the
                             invalid answer scores higher, ties ½ (partially_valid left out)

computed by `audit.metrics.within_env_auroc` on the negated scores, with a 95% percentile interval
from B = 2000 resamples of environments (`audit.stats.bootstrap_ratio_ci` on each environment's
wins + ½ ties and pairs; seed 0, a fresh generator per row). Writes decisive_auroc.json (every row,
and each environment's own AUROC) and decisive_auroc.md (the table) next to this file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from audit.metrics import within_env_auroc
from audit.stats import DEFAULT_B, bootstrap_ratio_ci
from judges import build_judge
from judges.base import judge_item
from selfplay.config import DataConfig
from selfplay.envs.types import Environment
from selfplay.runs import load_data_split

HERE = Path(__file__).resolve().parent
DATA = "data/mini"
SPLITS = ("train", "audit")
KINDS = ("impossible", "control")
B = DEFAULT_B
SEED = 0
COMMAND = "python -m experiments.judge_eval.decisive_auroc"


@dataclass(frozen=True)
class EnvAuroc:
    task_id: str
    auroc: float  # invalid over valid; NaN without a pair
    n_pairs: int


@dataclass(frozen=True)
class Row:
    split: str
    kind: str
    auroc: float  # invalid over valid, all pairs of the row's environments
    low: float
    high: float
    n_pairs: int
    n_envs: int
    n_partial: int  # partially_valid answers, left out
    n_undefined: int  # bootstrap replicates without a pair, left out
    per_env: tuple[EnvAuroc, ...]


def decisive_scores(envs: Sequence[Environment]) -> tuple[list[str], list[float], list[str]]:
    """(task_id, score, oracle_validity) of every stress answer of `envs`, scored by the reward."""
    judge = build_judge("decisive", backend=None)
    ids, scores, labels = [], [], []
    for env in envs:
        verdicts = judge.score([judge_item(judge, env, a.text) for a in env.stress_answers])
        ids += [env.task_id] * len(verdicts)
        scores += [v.score for v in verdicts]
        labels += [a.validity for a in env.stress_answers]
    return ids, scores, labels


def invalid_over_valid(ids: Sequence[str], scores: Sequence[float], labels: Sequence[str]):
    """`within_env_auroc` with the invalid answer as the one that should score higher."""
    return within_env_auroc(ids, [-s for s in scores], labels)


def row(envs: Sequence[Environment], split: str, kind: str, *, B: int = B, seed: int = SEED) -> Row:
    chosen = [e for e in envs if e.kind == kind]
    ids, scores, labels = decisive_scores(chosen)
    whole = invalid_over_valid(ids, scores, labels)
    per_env = []
    for env in chosen:
        keep = [i for i, t in enumerate(ids) if t == env.task_id]
        a = invalid_over_valid([ids[i] for i in keep], [scores[i] for i in keep], [labels[i] for i in keep])
        per_env.append(EnvAuroc(env.task_id, a.value, a.n_pairs))
    nums = [p.auroc * p.n_pairs if p.n_pairs else 0.0 for p in per_env]
    dens = [p.n_pairs for p in per_env]
    ci = bootstrap_ratio_ci(nums, dens, [p.task_id for p in per_env], rng=np.random.default_rng(seed), B=B)
    return Row(split, kind, whole.value, ci.low, ci.high, whole.n_pairs, len(chosen), whole.n_partial,
               ci.n_undefined, tuple(per_env))


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| split | environments | AUROC invalid ≻ valid | 95% interval (environment bootstrap) | pairs | partially_valid left out |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r.split} | {r.kind} ({r.n_envs}) | {r.auroc:.3f} | [{r.low:.3f}, {r.high:.3f}] | "
                     f"{r.n_pairs} | {r.n_partial} |")
    return "\n".join(lines)


def main() -> None:
    data = DataConfig(path=DATA)
    rows = [row(load_data_split(data, split), split, kind) for split in SPLITS for kind in KINDS]
    out = {"command": COMMAND, "reward": "decisive", "data": DATA, "statistic": "within-environment "
           "AUROC, invalid over valid, ties 1/2, partially_valid left out", "B": B, "seed": SEED,
           "rows": [asdict(r) for r in rows]}
    (HERE / "decisive_auroc.json").write_text(json.dumps(out, indent=2) + "\n")
    md = (f"# `decisive` on the labelled stress answers of {DATA}\n\n`{COMMAND}`; B = {B}, seed {SEED}.\n\n"
          f"{table(rows)}\n")
    (HERE / "decisive_auroc.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
