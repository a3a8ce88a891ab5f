"""How far apart a judge design scores one iteration's train-split samples: the figure a design's
pair margin δ is chosen from (experiments/results/judge_designs/README.md).

    python -m experiments.judge_spread outputs/judge_designs_failed/anchored_margin0.05/seed0/iter_1 \
        +policy=smollm2-135m-sft +experiment=judge_designs reward=blind_solve reward.margin=0.005

The iteration directory's samples (generations.jsonl) are scored by the composed run's judge as it
judged at that iteration's start (π_{t-1} for judge.model=self, its adapter read from iter_{t-1});
prints one JSON line: per-environment best-minus-worst gaps, the median within-environment sd, and
how many environments the loop's pairing rule would pair at the composed run's δ. The overrides
must compose the run the samples came from (its policy, data and budget), with any reward.
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
from selfplay.pairs import build_pairs


def spread(rows: list[dict], scores: list[list[float | None]], margin: float) -> dict:
    """The figures of one iteration's generations rows (one per environment) scored `scores`: each
    environment's best-minus-worst gap and score sd over its scored answers, and how many
    environments the loop's pairing rule (selfplay.pairs.build_pairs) pairs at δ = `margin`."""
    scored = [[x for x in env if x is not None and x == x] for env in scores]
    _, counts, _ = build_pairs([r["task_id"] for r in rows], [r["prompt"] for r in rows],
                               [r["answers"] for r in rows], scores, margin,
                               truncated=[r["truncated"] for r in rows])
    return {"margin": margin, "paired": counts.pairs, "environments": len(rows),
            "gaps": sorted(round(max(s) - min(s), 4) for s in scored if len(s) > 1),
            "median_within_sd": statistics.median(statistics.pstdev(s) for s in scored if len(s) > 1),
            "score_mean": statistics.mean(x for s in scored for x in s),
            "score_sd": statistics.pstdev([x for s in scored for x in s])}


def main(argv: list[str]) -> None:
    it_dir, overrides = Path(argv[0]), argv[1:]
    t = int(it_dir.name.removeprefix("iter_"))
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        settings = train_settings(compose("config", overrides=overrides))
    envs = T.load_train_envs(settings)
    by_task = {r["task_id"]: r for r in map(json.loads, (it_dir / "generations.jsonl").open())}
    rows = [by_task[e.task_id] for e in envs]
    policy = T.build_policy(settings)
    policy.load_adapter(it_dir.parent / f"iter_{t - 1}" / "adapter")
    started = time.perf_counter()
    verdicts = T.judge_answers(T.build_judge_for(settings, policy, t), envs, [r["answers"] for r in rows], t, 6)
    print(json.dumps({"reward": settings.reward_name, "iteration": t, "judge_s": round(time.perf_counter() - started),
                      **spread(rows, [[v.score for v in env] for env in verdicts], T.margin_of(settings))}))


if __name__ == "__main__":
    main(sys.argv[1:])
