"""The design and verifier registries: a new entry is buildable by name and validated by config with
no other file edited; `run_judge` picks the judge's weights; `judge_row` is a verdict as JSON."""

from __future__ import annotations

import json

import pytest
import yaml
from fakes import PUB, ScriptedBackend
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from test_verifiers import env

from judges import JUDGES, JudgeItem, Verdict, build_judge, judge_row
from judges import registry as R
from judges.designs import TemplateDesign
from judges.oracle import OracleVerdict
from judges.oracle_reward import OracleRewardParams
from judges.verifiers import AnyVerifier, OracleConfig, build_verifier
from selfplay.config import CONF_DIR, ConfigError, train_settings
from selfplay.runs import run_judge

# ---------------------------------------------------------------- a new design


class FlatJudge:
    """Scores every answer `bonus`."""

    name, reads_certificate, reads_anchor = "flat", False, False

    def __init__(self, bonus: float):
        self.bonus = bonus

    def prepare(self, publics):
        return None

    def score(self, items):
        return [Verdict(self.bonus, None, order_scores=(self.bonus,)) for _ in items]

    def artifacts(self):
        return {}


class FlatDesign:
    name, uses_model, pairwise, reads_certificate, reads_anchor = "flat", False, False, False, False

    def params(self, values):
        values = dict(values or {})
        values.pop("name", None)
        bonus = values.pop("bonus", 0.5)
        if values:
            raise ValueError(f"unknown reward parameter(s) {sorted(values)} for 'flat'")
        if isinstance(bonus, bool) or not isinstance(bonus, (int, float)) or not 0 <= bonus <= 1:
            raise ValueError(f"reward.bonus={bonus!r}: expected a number in [0, 1]")
        return float(bonus)

    def build(self, backend, *, adapter=True, identity="", params=None):
        return FlatJudge(0.5 if params is None else params)


def composed(tmp_path, *overrides):
    (tmp_path / "reward").mkdir(exist_ok=True)
    (tmp_path / "reward" / "flat.yaml").write_text("name: flat\nbonus: 0.25\n")
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=["+policy=tiny-llama", "logger=none", "reward=flat",
                                            f"hydra.searchpath=[file://{tmp_path}]", *overrides])


def test_a_registered_design_is_built_and_checked_by_name(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match=r"^reward='flat': unknown judge design; known: .*anchored"):
        train_settings(composed(tmp_path))
    monkeypatch.setitem(R.JUDGES, "flat", FlatDesign())
    assert "flat" in JUDGES
    settings = train_settings(composed(tmp_path))
    assert settings.reward_name == "flat"
    [v] = build_judge("flat", None, params=OmegaConf.to_container(settings.reward)).score([JudgeItem(PUB, "x")])
    assert v.score == 0.25
    with pytest.raises(ConfigError, match=r"^reward=flat: reward.bonus='lots': expected a number in \[0, 1\]$"):
        train_settings(composed(tmp_path, "reward.bonus=lots"))
    with pytest.raises(ConfigError, match=r"^reward=flat: unknown reward parameter\(s\) \['temperature'\]"):
        train_settings(composed(tmp_path, "+reward.temperature=2"))


def test_register_refuses_what_is_no_design_and_a_second_entry_of_a_name(monkeypatch):
    monkeypatch.setattr(R, "JUDGES", dict(R.JUDGES))
    with pytest.raises(TypeError, match="is not a judges.registry.Design"):
        R.register_design(object())
    R.register_design(FlatDesign())
    with pytest.raises(ValueError, match="^reward design 'flat' is registered twice$"):
        R.register_design(FlatDesign())


def test_a_template_design_is_one_entry(monkeypatch):
    """Pointwise over labels 1..3 with a fixed rubric: p(1) = 0.2, p(3) = 0.6 -> weights ¼, ¾,
    expected level 2.5, mapped (2.5 - 1) / (3 - 1) = 0.75."""
    terse = TemplateDesign("terse", pairwise=False, fixed_criteria={"neutral": "Be brief.", "honesty_aware": "Be brief."},
                           criteria="Criteria:\n{artifact}", criteria_label="RUBRIC", labels=("1", "2", "3"))
    monkeypatch.setattr(R, "JUDGES", dict(R.JUDGES))
    R.register_design(terse)
    backend = ScriptedBackend(lambda p: {"1": 0.2, "3": 0.6, "5": 0.2})
    [v] = build_judge("terse", backend, params={"name": "terse"}).score([JudgeItem(PUB, "Yes.")])
    assert v.score == pytest.approx(0.75, abs=1e-12) and set(v.probs) == {"1", "2", "3"}
    assert "=== BEGIN RUBRIC ===\nBe brief.\n=== END RUBRIC ===" in v.prompt and v.prompt.endswith("Score:")


@pytest.mark.parametrize("kw, match", [
    pytest.param(dict(pairwise=True), "needs opponent", id="pairwise-no-opponent"),
    pytest.param(dict(pairwise=True, opponent="artifact"), "needs opponent", id="artifact-without-stage1"),
    pytest.param(dict(pairwise=False, criteria="{artifact}", criteria_label="R"), "one source of criteria",
                 id="pointwise-no-criteria-source"),
    pytest.param(dict(pairwise=False, criteria="{artifact}", criteria_label="R", fixed_criteria={},
                      reads_certificate=True), "one source of criteria", id="two-sources"),
    pytest.param(dict(pairwise=False, criteria="{artifact}", criteria_label="R", reads_certificate=True,
                      labels=("0", "1")), "labels must be 1..n", id="labels-from-0"),
])
def test_an_inconsistent_template_design_is_refused(kw, match):
    with pytest.raises(ValueError, match=f"^design 'x': .*{match}"):
        TemplateDesign("x", **kw)


# ---------------------------------------------------------------- the run's judge


def _fail(*args):
    raise AssertionError("no backend should be loaded")


@pytest.mark.parametrize("model, adapter, identity", [
    pytest.param("self", True, "seed1/iter_2", id="self"),
    pytest.param("frozen", False, "initial", id="frozen"),
])
def test_run_judge_reads_the_policy_weights(model, adapter, identity):
    policy = ScriptedBackend(lambda p: {})
    judge = run_judge(OmegaConf.create({"name": "rubric", "max_new_tokens": 4}), model, policy=lambda: policy,
                      other=_fail, seed=1, iteration=2)
    assert (judge.backend, judge.adapter, judge.identity) == (policy, adapter, identity)
    assert judge.params.max_new_tokens == 4


def test_run_judge_loads_another_model_only_by_name_and_no_model_for_a_no_model_design():
    other = ScriptedBackend(lambda p: {})
    asked = []
    judge = run_judge({"name": "anchored"}, "qwen3-4b", policy=_fail, other=lambda m: asked.append(m) or other,
                      seed=0, iteration=0)
    assert asked == ["qwen3-4b"] and (judge.backend, judge.adapter, judge.identity) == (other, False, "qwen3-4b")
    assert run_judge({"name": "decisive"}, "self", policy=_fail, other=_fail, seed=0, iteration=1).name == "decisive"
    with pytest.raises(ValueError, match=r"^unknown reward 'nope'"):
        run_judge({"name": "nope"}, "self", policy=_fail, other=_fail, seed=0, iteration=1)


def test_judge_row_is_strict_json():
    v = Verdict(0.75, None, {"ab:A": 0.5}, order_scores=(1.0, float("nan")), swap_consistent=False,
                prompts=("p1", "p2"), artifact="art")
    row = judge_row(v)
    assert row == {"score": 0.75, "error": None, "probs": {"ab:A": 0.5}, "order_scores": [1.0, None],
                   "swap_consistent": False, "artifact": "art", "prompt": "p1"}
    json.dumps(row, allow_nan=False)
    assert judge_row(Verdict(None, "mass too low"))["score"] is None


# ---------------------------------------------------------------- a new verifier


class LengthVerifier:
    """Violates when the answer is longer than 10 characters (public view only)."""

    name = "length"

    def verify(self, pairs):
        return [OracleVerdict(float(len(a) > 10), len(a) > 10, None, verifier=self.name, reason=str(len(a)))
                for _, a in pairs]


LENGTH = R.VerifierEntry("length", build=lambda cfg, backend_for: LengthVerifier(), uses_llm=False,
                         reads_anchor=False)


def test_a_registered_verifier_is_built_and_checked_by_name(monkeypatch):
    with pytest.raises(ValueError, match=r"^oracle.name='length': expected one of \('checks', 'llm', 'spec', 'any'\)$"):
        OracleConfig.from_mapping({"name": "length", "verifiers": []})
    monkeypatch.setitem(R.VERIFIERS, "length", LENGTH)
    cfg = OracleConfig.from_mapping(yaml.safe_load("name: any\nverifiers: [checks, length]\nmodel: initial\n"))
    assert not cfg.uses_llm and not cfg.reads_anchor
    verifier = build_verifier(cfg)  # no backend_for: neither member uses a model
    assert isinstance(verifier, AnyVerifier)
    long_bad, short_bad, fine = verifier.verify([(env(), "Deaths: 41 of 900."), (env(), "Yes [D9]."), (env(), "Yes [D1].")])
    assert (long_bad.violates, long_bad.verifier) == (True, "checks+length")
    assert (short_bad.violates, short_bad.verifier) == (True, "checks")
    assert (fine.violates, fine.verifier) == (False, "checks+length")
    assert OracleRewardParams(verifiers=("length",)).verifiers == ("length",)
    with pytest.raises(ValueError, match=r"^verifiers=\['llm'\]: expected deterministic ones \(checks, length, spec\)$"):
        OracleRewardParams(verifiers=("llm",))
    with pytest.raises(ValueError, match="is registered twice"):
        R.register_verifier(R.VerifierEntry("length", build=LENGTH.build, uses_llm=True, reads_anchor=False))
