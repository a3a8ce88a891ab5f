"""The self-play loop end to end on a tiny random Llama (CPU): 3 train environments, 2 iterations, the
real `generic` judge, TRL's DPO step.

Two runs share the module: `run_a` straight through, and `run_b` with the same settings, killed by an
exception inside the DPO step of iteration 2 and then rerun. The evidence of the 3 mini environments
is cut to its first 25 words so the tiny model's 49k-token LM head stays cheap; the loop is the same.
"""

import json
import math
from pathlib import Path

import pytest
from fakes import short_evidence
from hydra import compose, initialize_config_dir

import selfplay.train as train
from selfplay import artifacts as A
from selfplay.config import CONF_DIR

OVERRIDES = [
    "+policy=tiny-llama", "reward=generic", "reward.min_verdict_mass=0.0", "logger=none",
    "iterations=2", "k=2", "max_new_tokens=8", "max_train_envs=3",
    "margin=1.0", "reward.margin=0.0",  # the design's own δ, not the run's, decides which pairs are kept
    "learning_rate=1e-3", "batch_size=3", "lora.r=4", "lora.alpha=8", "lora.target_modules=[q_proj,v_proj]",
    "pair_truncated=true",  # the random model never writes an end token within 8 tokens
]
ITER_FILES = {"DONE", "adapter", "config.yaml", "generations.jsonl", "judgments.jsonl", "metrics.json", "pairs.jsonl"}


def composed(root: Path):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=[*OVERRIDES, f"output_root={root}"])


def short_envs(settings):
    return short_evidence(_real_loader(settings))


_real_loader = train.load_train_envs


@pytest.fixture(scope="module")
def patched():
    mp = pytest.MonkeyPatch()
    mp.setattr(train, "load_train_envs", short_envs)
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def run_a(tmp_path_factory, patched) -> Path:
    return train.run(composed(tmp_path_factory.mktemp("a")))


@pytest.fixture(scope="module")
def run_b(tmp_path_factory, patched):
    """(run dir, iter_1 file bytes before the rerun, the error raised by the first attempt)."""
    root = tmp_path_factory.mktemp("b")
    real_step, calls = train.dpo_step, []

    def crashing_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed during the DPO step of iteration 2")
        return real_step(*args, **kwargs)

    patched.setattr(train, "dpo_step", crashing_step)
    with pytest.raises(KeyboardInterrupt) as err:
        train.run(composed(root))
    patched.setattr(train, "dpo_step", real_step)
    run = A.run_dir(root, "selfplay", "generic", 0)
    snapshot = {p.relative_to(run): p.read_bytes() for p in (run / "iter_1").rglob("*") if p.is_file()}
    assert sorted(p.name for p in run.iterdir()) == ["iter_0", "iter_1"]  # nothing of iteration 2 left
    train.run(composed(root))
    return run, snapshot, err.value


def test_two_iterations_write_every_artifact(run_a):
    assert sorted(p.name for p in run_a.iterdir()) == ["iter_0", "iter_1", "iter_2"]
    assert {p.name for p in (run_a / "iter_0").iterdir()} == {"DONE", "adapter", "config.yaml", "metrics.json"}
    assert json.loads((run_a / "iter_0" / "metrics.json").read_text()) == {"iteration": 0, "metrics": {}, "pair_drops": {}}
    for t in (1, 2):
        it = run_a / f"iter_{t}"
        assert {p.name for p in it.iterdir()} == ITER_FILES
        assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (it / "adapter").iterdir()}

        gens = A.read_jsonl(it / "generations.jsonl")
        assert len(gens) == 3 and all(len(g["answers"]) == 2 for g in gens)
        assert {tuple(sorted(g)) for g in gens} == {("answers", "category", "kind", "prompt", "sources", "task_id",
                                                     "truncated")}
        assert all(g["sources"] == ["policy", "policy"] for g in gens)
        # the random model never ends an answer within 8 tokens: every sample is marked truncated
        assert all(g["truncated"] == [True, True] for g in gens)
        assert all("Evidence packet" in g["prompt"] for g in gens)

        judg = A.read_jsonl(it / "judgments.jsonl")
        assert [(j["task_id"], j["index"]) for j in judg] == [(g["task_id"], i) for g in gens for i in range(2)]
        for j in judg:
            assert set(j) == {"task_id", "index", "score", "error", "probs", "order_scores", "swap_consistent",
                              "artifact", "prompt"}
            assert 0.0 <= j["score"] <= 1.0 and j["error"] is None  # min_verdict_mass=0: always scoreable
            assert set(j["probs"]) == {"1", "2", "3", "4", "5"} and j["order_scores"] == [j["score"]]
            assert j["swap_consistent"] is None and j["artifact"] is None  # generic: pointwise, no stage 1

        pairs = A.read_jsonl(it / "pairs.jsonl")
        metrics = json.loads((it / "metrics.json").read_text())
        m = metrics["metrics"]
        assert metrics["iteration"] == t
        assert m["sample/truncated_share"] == 1.0 and m["sample/answers"] == 6.0
        assert m["pairs/envs"] == 3 and m["pairs/kept"] == len(pairs)
        assert m["pairs/margin"] == 0.0 and m["pairs/dropped_margin"] == 0
        assert len(pairs) + sum(m[f"pairs/dropped_{r}"] for r in ("nan", "tie", "margin", "identical", "truncated")) == 3
        assert set(metrics["pair_drops"]) == {g["task_id"] for g in gens} - {p["task_id"] for p in pairs}
        scores = {(j["task_id"], j["index"]): j["score"] for j in judg}
        for p in pairs:
            assert p["chosen_score"] == scores[(p["task_id"], p["chosen_index"])] > p["rejected_score"]
            assert math.isclose(p["margin"], p["chosen_score"] - p["rejected_score"])
            answers = next(g["answers"] for g in gens if g["task_id"] == p["task_id"])
            assert (p["chosen"], p["rejected"]) == (answers[p["chosen_index"]], answers[p["rejected_index"]])
        assert m["judge/nan_rate"] == 0.0 and 0.0 <= m["judge/score_mean"] <= 1.0
        assert m["train/truncated"] == 0 and m["train/dropped_long_prompts"] == 0
        phases = m["time/generate_s"] + m["time/judge_s"] + m["time/dpo_s"]
        assert 0 < phases <= m["time/iteration_s"]  # the phases are disjoint parts of the iteration
        if pairs:
            assert m["train/steps"] == 1 and math.isfinite(m["train/loss"])
            assert m["train/max_length"] == m["train/longest_sequence"]

        config = A.read_config(it)
        assert config["policy"]["name"] == "tiny-llama" and config["reward"]["name"] == "generic"
        assert config["iterations"] == 2 and config["k"] == 2


def test_training_changed_the_adapter(run_a):
    from safetensors.torch import load_file

    w = [load_file(run_a / f"iter_{t}" / "adapter" / "adapter_model.safetensors") for t in (0, 2)]
    assert w[0].keys() == w[1].keys()
    assert any(not (w[0][k] == w[1][k]).all() for k in w[0])


def test_resume_after_a_crash_in_dpo_redoes_only_iteration_2(run_b):
    run, iter1_before, err = run_b
    assert "iteration 2" in str(err)
    assert sorted(p.name for p in run.iterdir()) == ["iter_0", "iter_1", "iter_2"]
    assert (run / "iter_2" / "DONE").is_file()
    after = {p.relative_to(run): p.read_bytes() for p in (run / "iter_1").rglob("*") if p.is_file()}
    assert after == iter1_before  # byte identical


def test_same_seed_gives_identical_generations_and_pairs(run_a, run_b):
    """run_b's iteration 1 ran uninterrupted like run_a's; its iteration 2 ran after a resume, which
    reloads the iteration-1 adapter and reseeds per iteration, so it must match too."""
    run, _, _ = run_b
    for t in (1, 2):
        for name in ("generations.jsonl", "pairs.jsonl", "judgments.jsonl"):
            assert (run / f"iter_{t}" / name).read_bytes() == (run_a / f"iter_{t}" / name).read_bytes(), (t, name)


def test_rerunning_a_finished_run_changes_nothing(run_a, patched):
    before = {p: p.stat().st_mtime_ns for p in run_a.rglob("*")}
    assert train.run(composed(run_a.parents[2])) == run_a
    assert {p: p.stat().st_mtime_ns for p in run_a.rglob("*")} == before


def test_max_pairs_trains_on_a_seeded_subset_of_the_pairs_found(tmp_path, patched):
    """max_pairs=1 of the pairs one iteration finds: one pair reaches DPO and pairs.jsonl, and both
    counts are logged."""
    real_step, seen = train.dpo_step, []

    def recording_step(model, tokenizer, pairs, *args, **kwargs):
        seen.append(list(pairs))
        return real_step(model, tokenizer, pairs, *args, **kwargs)

    patched.setattr(train, "dpo_step", recording_step)
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            run = train.run(compose("config", overrides=[*OVERRIDES, f"output_root={tmp_path}", "iterations=1",
                                                         "max_pairs=1"]))
    finally:
        patched.setattr(train, "dpo_step", real_step)
    it = run / "iter_1"
    m = json.loads((it / "metrics.json").read_text())["metrics"]
    written = (it / "pairs.jsonl").read_text().splitlines()
    assert m["pairs/found"] >= 2, "the tiny run must find more pairs than it keeps for this test to mean anything"
    assert m["pairs/kept"] == 1 and len(seen) == 1 and len(seen[0]) == 1 and len(written) == 1
    assert json.loads(written[0])["chosen"] == seen[0][0].chosen
