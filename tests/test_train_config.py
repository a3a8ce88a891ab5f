"""Config composition and validation of `python -m selfplay.train`, and the run-directory rules
(atomic iterations, resume scan, refusal of a different config). No model is loaded here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from selfplay import artifacts as A
from selfplay.config import (
    CONF_DIR,
    GROUP_SCHEMAS,
    PROJECT_ROOT,
    ConfigError,
    DataConfig,
    JudgeConfig,
    LoggerConfig,
    TrainConfig,
    defaults_of,
    resolve_data_path,
    train_settings,
)
from selfplay.tracking import start_logger
from selfplay.train import run

REPO = Path(__file__).resolve().parents[1]


def composed(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    return subprocess.run([sys.executable, "-m", "selfplay.train", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cfg_job_prints_policy_and_reward_without_loading_a_model():
    out = cli("+policy=qwen3-4b", "reward=anchored", "--cfg", "job")
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load(out.stdout)
    assert cfg["policy"]["name"] == "qwen3-4b" and cfg["policy"]["hf_id"] == "Qwen/Qwen3-4B"
    assert cfg["reward"]["name"] == "anchored"
    assert cfg["judge"]["model"] == "self" and cfg["logger"]["mode"] == "offline"
    assert cfg["data"]["path"] == "data/mini"


def test_missing_policy_is_one_clear_error_naming_the_choices():
    out = cli("reward=anchored", "logger=none")
    assert out.returncode == 1
    assert "no policy given: add +policy=NAME" in out.stderr
    for name in ("smollm2-135m", "qwen3-4b", "gemma-3-4b"):
        assert name in out.stderr
    assert "Traceback" not in out.stderr


def test_both_documented_commands_compose():
    for policy in ("qwen3-4b", "smollm2-135m"):
        s = train_settings(composed(f"+policy={policy}", "reward=anchored"))
        assert s.policy_name == policy and s.reward_name == "anchored"
        assert s.train.reference == "previous" and s.judge.model == "self"


# -- one source of defaults: the dataclasses ------------------------------------------------------


def test_composed_defaults_are_the_dataclass_defaults():
    """What Hydra composes with no override is exactly what the dataclasses declare, top level and
    groups alike, so a documented default cannot be silently overridden by a YAML value again (the
    YAML once said batch_size 2, grad_accum 2 while the dataclass said 4, 1)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(composed("+policy=tiny-llama"), resolve=True)
    top = {k: v for k, v in cfg.items() if k not in ("policy", "reward", *GROUP_SCHEMAS)}
    assert top == defaults_of(TrainConfig)
    # the default options add only what makes them that option: data=mini names its directory
    assert cfg["data"] == defaults_of(DataConfig) | {"path": "data/mini"}
    assert (cfg["judge"], cfg["logger"]) == (defaults_of(JudgeConfig), defaults_of(LoggerConfig))
    s = train_settings(composed("+policy=tiny-llama"))
    assert (s.train, s.data, s.judge, s.logger) == (TrainConfig(), DataConfig("data/mini"), JudgeConfig(), LoggerConfig())
    # the measured micro-batching (bench P4): 2 pairs per step, accumulated twice
    assert (s.train.batch_size, s.train.grad_accum) == (2, 2)


def test_yaml_holds_no_default_of_its_own():
    """conf/config.yaml sets no TrainConfig field (only the defaults list and Hydra's settings); a group
    option sets only keys of its dataclass, and only where it differs from the dataclass default."""
    top = yaml.safe_load((CONF_DIR / "config.yaml").read_text())
    assert set(top) == {"defaults", "hydra"}
    assert top["defaults"][0] == "train_defaults"
    for group, schema in GROUP_SCHEMAS.items():
        base = defaults_of(schema)
        for path in sorted((CONF_DIR / group).glob("*.yaml")):
            option = yaml.safe_load(path.read_text())
            assert option.pop("defaults") == ["base", "_self_"], path
            assert set(option) <= set(base), (path, sorted(set(option) - set(base)))
            assert all(option[k] != base[k] for k in option), (path, option)


@pytest.mark.parametrize("schema", [TrainConfig, *GROUP_SCHEMAS.values()], ids=lambda c: c.__name__)
def test_every_setting_has_help_text(schema):
    from dataclasses import fields

    undocumented = [f.name for f in fields(schema) if len(f.metadata.get("help", "").split()) < 2]
    assert undocumented == []


def test_logger_option_overrides_only_its_keys():
    """logger=none sets kind and mode; project, entity and dir still come from LoggerConfig."""
    s = train_settings(composed("+policy=tiny-llama", "logger=none"))
    assert (s.logger.kind, s.logger.mode) == ("none", "disabled")
    assert (s.logger.project, s.logger.entity, s.logger.dir) == ("selfplay-judges", None, None)


@pytest.mark.parametrize(
    "override, message",
    [
        pytest.param("k=1", "k=1: expected an integer >= 2", id="k"),
        pytest.param("margin=1.5", "margin=1.5", id="margin"),
        pytest.param("reference=base", "reference='base'", id="reference"),
        pytest.param("max_pairs=0", "max_pairs=0", id="max-pairs"),
        pytest.param("backend=tpu", "backend='tpu'", id="backend"),
        pytest.param("lora.r=0", "lora", id="lora-rank"),
        pytest.param("+lr=0.1", "unknown setting(s) ['lr']", id="unknown-key"),
        pytest.param("logger.kind=tensorboard", "logger.kind='tensorboard'", id="logger"),
    ],
)
def test_bad_settings_are_refused_with_the_key(override, message):
    with pytest.raises(ConfigError, match=None) as err:
        train_settings(composed("+policy=tiny-llama", override))
    assert message in str(err.value)


def test_release_data_requires_a_path():
    cfg = composed("+policy=tiny-llama", "data=release")
    with pytest.raises(ConfigError, match="data.path=DIR"):
        train_settings(cfg)


def test_data_path_relative_to_cwd_then_project(tmp_path):
    assert resolve_data_path("data/mini", cwd=tmp_path) == PROJECT_ROOT / "data" / "mini"
    (tmp_path / "data" / "mini").mkdir(parents=True)
    assert resolve_data_path("data/mini", cwd=tmp_path) == tmp_path / "data" / "mini"
    assert resolve_data_path("/abs/x") == Path("/abs/x")


# -- run directories ---------------------------------------------------------------------------


def test_iteration_is_renamed_into_place_with_done_last(tmp_path):
    with A.writing_iteration(tmp_path, 0) as dest:
        assert dest.name == ".iter_0.tmp" and not (tmp_path / "iter_0").exists()
        (dest / "metrics.json").write_text("{}")
    assert sorted(p.name for p in (tmp_path / "iter_0").iterdir()) == ["DONE", "metrics.json"]
    assert not (tmp_path / ".iter_0.tmp").exists()
    with pytest.raises(FileExistsError):
        with A.writing_iteration(tmp_path, 0):
            pass


def test_failed_iteration_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with A.writing_iteration(tmp_path, 1):
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_scan_finds_complete_and_partial_iterations(tmp_path):
    for t in (0, 1):
        (tmp_path / f"iter_{t}").mkdir()
        (tmp_path / f"iter_{t}" / "DONE").write_text("")
    (tmp_path / ".iter_2.tmp").mkdir()  # a killed writer
    (tmp_path / "train.log").write_text("")
    state = A.scan_run(tmp_path)
    assert state.complete == (0, 1) and state.last == 1
    assert [p.name for p in state.partial] == [".iter_2.tmp"]
    A.discard_partial(state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0", "iter_1", "train.log"]


def test_scan_refuses_an_iteration_without_done_and_deletes_nothing(tmp_path):
    """`iter_<t>` without DONE is no interrupted write (DONE comes before the rename): refused, kept."""
    (tmp_path / "iter_0").mkdir()
    (tmp_path / "iter_0" / "DONE").write_text("")
    (tmp_path / "iter_1").mkdir()
    with pytest.raises(ConfigError, match=r"iter_1 has no DONE marker.*rm -r .*iter_1.*seal"):
        A.scan_run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0", "iter_1"]


def test_scan_refuses_a_gap(tmp_path):
    for t in (0, 2):
        (tmp_path / f"iter_{t}").mkdir()
        (tmp_path / f"iter_{t}" / "DONE").write_text("")
    with pytest.raises(ConfigError, match="without gaps"):
        A.scan_run(tmp_path)


def test_different_config_over_an_existing_run_is_refused(tmp_path):
    """A run written with seed 0 and margin 0.1; rerunning with margin 0.3 into the same directory is
    refused before any model is built, and nothing in the directory changes. Growing T is allowed."""
    base = ["+policy=tiny-llama", "reward=generic", "logger=none", f"output_root={tmp_path}"]
    cfg = composed(*base)
    from omegaconf import OmegaConf

    run_dir = A.run_dir(tmp_path, "selfplay", "generic", 0)
    with A.writing_iteration(run_dir, 0) as dest:
        A.write_config(dest / A.CONFIG, OmegaConf.to_container(cfg, resolve=True))
    before = (run_dir / "iter_0" / A.CONFIG).read_bytes()

    with pytest.raises(ConfigError, match=r"margin: 0\.1 -> 0\.3"):
        run(composed(*base, "margin=0.3"))
    assert (run_dir / "iter_0" / A.CONFIG).read_bytes() == before
    assert sorted(p.name for p in run_dir.iterdir()) == ["iter_0"]

    state = A.scan_run(run_dir)
    A.check_resumable(run_dir, state, OmegaConf.to_container(composed(*base, "iterations=9"), resolve=True))


# -- logging -------------------------------------------------------------------------------------


class FakeRun:
    def __init__(self):
        self.logged, self.finished = [], False

    def log(self, metrics, step):
        self.logged.append((step, metrics))

    def finish(self):
        self.finished = True


def test_wandb_run_per_seed_named_after_reward_and_seed(tmp_path, monkeypatch):
    import wandb

    calls = []
    fake = FakeRun()
    monkeypatch.setattr(wandb, "init", lambda **kw: calls.append(kw) or fake)
    s = train_settings(composed("+policy=tiny-llama", "reward=anchored", "seed=2", "experiment_name=exp1"))
    logger = start_logger(s.logger, tmp_path, name="anchored-seed2", group="exp1", config={"seed": 2})
    logger.log({"judge/nan_rate": 0.0}, step=1)
    logger.finish()
    (kw,) = calls
    assert (kw["project"], kw["group"], kw["name"], kw["mode"]) == ("selfplay-judges", "exp1", "anchored-seed2", "offline")
    assert kw["config"] == {"seed": 2} and kw["dir"] == str(tmp_path) and kw["resume"] == "allow"
    assert fake.logged == [(1, {"judge/nan_rate": 0.0})] and fake.finished


def test_logger_none_touches_nothing(tmp_path):
    s = train_settings(composed("+policy=tiny-llama", "logger=none"))
    logger = start_logger(s.logger, tmp_path / "run", name="x", group="y", config={})
    logger.log({"a": 1.0}, step=1)
    logger.finish()
    assert not (tmp_path / "run").exists()


def test_launcher_configs_target_the_submitit_plugin():
    for name, cls in (("submitit_local", "LocalLauncher"), ("submitit_slurm", "SlurmLauncher")):
        conf = yaml.safe_load((CONF_DIR / "hydra" / "launcher" / f"{name}.yaml").read_text())
        assert conf["_target_"] == f"hydra_plugins.hydra_submitit_launcher.submitit_launcher.{cls}"
        assert conf["gpus_per_node"] == 1


def test_a_setting_added_later_at_null_does_not_block_resume():
    """A run written before `judge.endpoint` existed stores no such key; the same run today reads it as
    null, which changes nothing the run did. Any other value, or a stored key now gone, still differs."""
    from selfplay.artifacts import config_differences

    stored = {"judge": {"model": "self"}, "k": 8}
    assert config_differences(stored, {"judge": {"model": "self", "endpoint": None}, "k": 8}) == []
    assert config_differences(stored, {"judge": {"model": "self", "endpoint": {"base_url": "x"}}, "k": 8}) != []
    assert config_differences({**stored, "old": 1}, {"judge": {"model": "self"}, "k": 8}) != []


@pytest.mark.parametrize(("overrides", "margin"), [((), 0.05), (("reward.margin=0.005",), 0.005),
                                                   (("reward.margin=0",), 0.0)])
def test_a_judge_design_may_set_its_own_pair_margin(overrides, margin):
    from selfplay.train import margin_of

    s = train_settings(composed("+policy=tiny-llama", "reward=anchored", "margin=0.05", *overrides))
    assert margin_of(s) == margin


@pytest.mark.parametrize("value", ["1.5", "-0.1", "true"])
def test_a_design_margin_outside_0_1_is_refused_with_the_key(value):
    with pytest.raises(ValueError, match=r"reward\.margin="):
        train_settings(composed("+policy=tiny-llama", "reward=commit_first", f"reward.margin={value}"))


def test_runs_of_one_design_with_different_margins_are_not_one_sweep():
    from selfplay.runs import sweep_differences

    a = OmegaConf.to_container(composed("+policy=tiny-llama", "reward=blind_solve", "reward.margin=0.005"), resolve=True)
    b = OmegaConf.to_container(composed("+policy=tiny-llama", "reward=blind_solve", "seed=1"), resolve=True)
    c = OmegaConf.to_container(composed("+policy=tiny-llama", "reward=decisive", "seed=1"), resolve=True)
    assert sweep_differences(a, b, same_reward=True) == ["reward.margin: 0.005 -> None"]
    assert sweep_differences(a, c, same_reward=False) == []
