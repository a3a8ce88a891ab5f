"""Ready-made experiments (`+experiment=NAME`, experiments/conf/experiment/) compose with the train config."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from selfplay.config import train_settings

CONF = Path(__file__).resolve().parents[1] / "conf"


def composed(*overrides: str):
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize(("name", "run_name", "iterations"),
                         [("selfplay", "selfplay_mini", 3), ("judge_sweep", "judge_sweep", 5),
                          ("judge_designs", "judge_designs", 3)])
def test_experiment_sets_its_name_and_budget(name, run_name, iterations):
    s = train_settings(composed("+policy=smollm2-135m-sft", f"+experiment={name}", "reward=commit_first"))
    assert (s.train.experiment_name, s.train.iterations, s.reward_name) == (run_name, iterations, "commit_first")


def test_command_line_overrides_an_experiment_and_names_a_run():
    # the experiment group and the run-name key must not collide: both work on one command line
    s = train_settings(composed("+policy=smollm2-135m", "+experiment=selfplay", "experiment_name=mine", "k=3"))
    assert (s.train.experiment_name, s.train.k, s.train.iterations) == ("mine", 3, 3)


def test_selfplay_budget_trains_every_environment_with_several_steps():
    """docs/method.md §Self-play loop: every train environment (controls included), k >= 4, several optimizer steps. With the
    mini train split (18 environments) at most 18 pairs: ceil(18 / (2 × 2)) = 5 steps per epoch × 2."""
    import math

    s = train_settings(composed("+policy=smollm2-135m-sft", "+experiment=selfplay", "reward=decisive")).train
    assert s.max_train_envs is None and s.k >= 4
    assert s.epochs * math.ceil(18 / (s.batch_size * s.grad_accum)) >= 4


def test_demo_trains_both_controls_on_a_fixed_share_of_the_labelled_pairs():
    """The demo's budget: every train environment's labelled answers as candidates, 32 of the pairs
    each iteration (8 optimizer steps of 2 × 2), T = 3, reference π_0."""
    for reward in ("decisive", "oracle_verdict"):
        s = train_settings(composed("+policy=smollm2-135m", "+experiment=demo", f"reward={reward}"))
        assert s.reward["candidates"] == "labelled" and s.train.max_train_envs is None
        assert (s.train.iterations, s.train.max_pairs, s.train.reference) == (3, 32, "initial")
        assert s.train.max_pairs // (s.train.batch_size * s.train.grad_accum) == 8


def test_judge_designs_recipe_is_the_fixed_one():
    """The recipe of experiments/conf/experiment/judge_designs.yaml, fixed before its audit: k 8 at
    τ 0.7, 192 tokens, δ 0.05, T 3, every train environment; the null's seed follows the run's."""
    s = train_settings(composed("+policy=smollm2-135m-sft", "+experiment=judge_designs", "reward=random", "seed=2"))
    t = s.train
    assert (t.k, t.temperature, t.max_new_tokens, t.margin, t.iterations) == (8, 0.7, 192, 0.05, 3)
    assert t.max_train_envs is None and t.max_pairs is None and s.reward.seed == 2


def test_every_reward_of_the_experiment_composes_on_each_candidate_pool():
    for reward in ("decisive", "oracle_verdict", "random", "anchored", "commit_first", "blind_solve"):
        for pool in ("policy", "labelled", "mixed"):
            s = train_settings(composed("+policy=smollm2-135m-sft", "+experiment=judge_designs",
                                        f"reward={reward}", f"reward.candidates={pool}"))
            assert (s.reward_name, s.reward["candidates"]) == (reward, pool)


def test_the_smaller_budget_differs_from_the_headline_only_in_k_and_epochs():
    """judge_designs_lean.yaml is the headline recipe (judge_designs_mixed) at half the samples and
    half the DPO passes, as its README section reports it; nothing else may drift from the headline."""
    from dataclasses import asdict

    head, lean = (train_settings(composed("+policy=smollm2-135m-sft", f"+experiment={n}", "reward=decisive"))
                  for n in ("judge_designs_mixed", "judge_designs_lean"))
    a, b = asdict(head.train), asdict(lean.train)
    assert {k for k in a if a[k] != b[k]} == {"experiment_name", "k", "epochs"}
    assert (b["k"], b["epochs"], a["k"], a["epochs"]) == (4, 1, 8, 2)
    assert head.reward == lean.reward and lean.reward["candidates"] == "mixed"
