"""How far apart a judge design scores one iteration's train-split samples: the figure a design's
pair margin δ is chosen from (experiments/results/judge_designs/README.md).

    python -m experiments.judge_spread outputs/judge_designs/anchored/seed0/iter_1 \
        +policy=smollm2-135m-sft +experiment=judge_designs reward=blind_solve

The iteration directory's samples (generations.jsonl) are scored by the composed run's judge as it
judged at that iteration's start (π_{t-1} for judge.model=self, its adapter read from iter_{t-1});
prints one JSON line: per-environment best-minus-worst gaps and the median within-environment sd.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from selfplay import train as T
from selfplay.config import CONF_DIR, train_settings


def spread(scores: list[list[float]]) -> dict:
    gaps = [max(s) - min(s) for s in scores if len(s) > 1]
    return {"gaps": sorted(round(g, 4) for g in gaps),
            "median_within_sd": statistics.median(statistics.pstdev(s) for s in scores if len(s) > 1),
            "score_mean": statistics.mean(x for s in scores for x in s),
            "score_sd": statistics.pstdev([x for s in scores for x in s])}


def main(argv: list[str]) -> None:
    it_dir, overrides = Path(argv[0]), argv[1:]
    t = int(it_dir.name.removeprefix("iter_"))
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        settings = train_settings(compose("config", overrides=overrides))
    envs = T.load_train_envs(settings)
    by_task = {r["task_id"]: r["answers"] for r in map(json.loads, (it_dir / "generations.jsonl").open())}
    answers = [by_task[e.task_id] for e in envs]
    policy = T.build_policy(settings)
    policy.load_adapter(it_dir.parent / f"iter_{t - 1}" / "adapter")
    started = time.perf_counter()
    verdicts = T.judge_answers(T.build_judge_for(settings, policy, t), envs, answers, t, 6)
    scores = [[v.score for v in env if v.score is not None and v.score == v.score] for env in verdicts]
    print(json.dumps({"reward": settings.reward_name, "iteration": t, "judge_s": round(time.perf_counter() - started),
                      **spread(scores)}))


if __name__ == "__main__":
    main(sys.argv[1:])
