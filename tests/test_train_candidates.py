"""`candidates: mixed` and the null reward in the loop, on a tiny random Llama: one iteration scores
the policy's k samples together with each train environment's authored stress answers, records where
each candidate came from, and pairs across the pool."""

import json
import subprocess
import sys

import pytest
from fakes import short_evidence
from hydra import compose, initialize_config_dir

import selfplay.train as train
from selfplay.config import CONF_DIR
from selfplay.envs.types import Environment

OVERRIDES = [
    "+policy=tiny-llama", "reward=random", "logger=none", "iterations=1", "k=2", "max_new_tokens=4",
    "max_train_envs=2", "margin=0.0", "batch_size=2", "lora.r=2", "lora.alpha=4",
    "lora.target_modules=[q_proj]", "max_seq_len=2048", "pair_truncated=true",
]


def tiny_envs(settings) -> list[Environment]:
    """Two real train environments with their evidence cut, so the tiny model's forward stays cheap."""
    return short_evidence(_real_loader(settings), words=15, docs=1)


_real_loader = train.load_train_envs


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(train, "load_train_envs", tiny_envs)
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[*OVERRIDES, "reward.candidates=mixed",
                                               f"output_root={tmp_path_factory.mktemp('mixed')}"])
        envs = tiny_envs(train.train_settings(cfg))
        return train.run(cfg), envs
    finally:
        mp.undo()


def test_mixed_pool_is_the_samples_then_the_authored_answers(mixed_run):
    run, envs = mixed_run
    rows = [json.loads(line) for line in (run / "iter_1" / "generations.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [e.task_id for e in envs]
    for row, env in zip(rows, envs, strict=True):
        authored = [s.text for s in env.stress_answers]
        assert row["sources"] == ["policy"] * 2 + ["labelled"] * len(authored)
        assert row["answers"][2:] == authored
        assert row["truncated"][2:] == [False] * len(authored)
    judged = [json.loads(line) for line in (run / "iter_1" / "judgments.jsonl").read_text().splitlines()]
    assert len(judged) == sum(len(r["answers"]) for r in rows)


def test_mixed_pairs_pick_the_pool_extremes_of_the_null_reward(mixed_run):
    """Under `random` the pair is the highest- against the lowest-scoring candidate of the whole pool,
    whichever source it came from (the scores are the judge's keyed draws, recomputed here)."""
    from judges.random_reward import uniform_score

    run, _ = mixed_run
    gens = {r["task_id"]: r for r in map(json.loads, (run / "iter_1" / "generations.jsonl").read_text().splitlines())}
    pairs = [json.loads(line) for line in (run / "iter_1" / "pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == len(gens)
    for p in pairs:
        answers = gens[p["task_id"]]["answers"]
        scores = [uniform_score(0, p["task_id"], a) for a in answers]
        assert p["chosen"] == answers[scores.index(max(scores))]
        assert p["rejected"] == answers[scores.index(min(scores))]
    metrics = json.loads((run / "iter_1" / "metrics.json").read_text())["metrics"]
    assert metrics["sample/answers"] == 2 * len(gens)  # the share of cut samples counts samples only


def test_the_null_reward_seed_follows_the_run_seed_in_the_resolved_config(tmp_path):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*OVERRIDES, "seed=3", f"output_root={tmp_path}"])
    assert train.train_settings(cfg).reward.seed == 3


def test_seeds_of_the_null_are_one_sweep_to_the_audit(tmp_path):
    """The null's own seed is the run's (`seed: ${seed}`): two seeds of it are one experiment to the
    audit, which averages them, while a reward seed that does not follow its run still differs."""
    from omegaconf import OmegaConf

    from selfplay.runs import sweep_differences

    def resolved(seed, *more):
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[*OVERRIDES, f"seed={seed}", f"output_root={tmp_path}", *more])
        return OmegaConf.to_container(cfg, resolve=True)

    assert sweep_differences(resolved(0), resolved(1), same_reward=True) == []
    assert sweep_differences(resolved(0), resolved(1, "reward.seed=7"), same_reward=True) != []


def test_a_judge_design_on_labelled_candidates_composes():
    out = subprocess.run([sys.executable, "-m", "selfplay.train", "+policy=smollm2-135m", "reward=anchored",
                          "reward.candidates=labelled", "--cfg", "job"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "candidates: labelled" in out.stdout and "name: anchored" in out.stdout
