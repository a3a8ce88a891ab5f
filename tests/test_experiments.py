"""Ready-made experiments (`+experiment=NAME`, experiments/conf/experiment/) compose with the train config."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from selfplay.config import train_settings

CONF = Path(__file__).resolve().parents[1] / "conf"


def composed(*overrides: str):
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize(("name", "iterations"), [("demo", 3), ("judge_sweep", 5)])
def test_experiment_sets_its_name_and_budget(name, iterations):
    s = train_settings(composed("+policy=smollm2-135m-sft", f"+experiment={name}", "reward=commit_first"))
    assert (s.train.experiment_name, s.train.iterations, s.reward_name) == (name, iterations, "commit_first")


def test_command_line_overrides_an_experiment_and_names_a_run():
    # the experiment group and the run-name key must not collide: both work on one command line
    s = train_settings(composed("+policy=smollm2-135m", "+experiment=demo", "experiment_name=mine", "k=3"))
    assert (s.train.experiment_name, s.train.k, s.train.iterations) == ("mine", 3, 3)


def test_demo_budget_trains_every_environment_with_several_steps():
    """SPEC §5: every train environment (controls included), k >= 4, several optimizer steps. With the
    mini train split (18 environments) at most 18 pairs: ceil(18 / (2 × 2)) = 5 steps per epoch × 2."""
    import math

    s = train_settings(composed("+policy=smollm2-135m-sft", "+experiment=demo", "reward=decisive")).train
    assert s.max_train_envs is None and s.k >= 4
    assert s.epochs * math.ceil(18 / (s.batch_size * s.grad_accum)) >= 4
