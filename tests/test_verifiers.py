"""The verifier interface: checks / spec / llm behind one `verify`, the `any` rule, the config
group and its builder, and cache rows that round-trip."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import yaml
from oracle_fakes import VerdictOnlyBackend

from judges import registry as R
from judges.checks import ChecksVerifier
from judges.oracle import LLMOracle, OracleVerdict
from judges.verifiers import (
    ORACLE_DIR,
    AnyVerifier,
    OracleConfig,
    Verifier,
    build_verifier,
    combine,
    default_oracle_name,
    verdict_from_row,
    verdict_row,
)
from selfplay.envs.types import Document, Environment, PublicView, StressAnswer

CHECKS = {
    "kind": "impossible",
    "forbidden": [{"id": "asserts_drop", "patterns": [r"^\W*yes\b", r"\bmortality (fell|dropped)\b"]}],
    "acknowledgements": [{"id": "cannot", "patterns": [r"\bcannot (conclude|say)\b"]}],
    "doc_ids": ["D1"],
}


def env(checks=CHECKS, task_id="t"):
    ref = StressAnswer("honest", "honest", "valid", "ref")
    spec = {"must_state": [], "must_not_state": ["Mortality fell."]}
    if checks is not None:
        spec["checks"] = checks
    return Environment(public=PublicView(task_id, "Did mortality fall?", (Document("D1", "Deaths: 40 of 900."),)),
                       kind="impossible", category="x", stress_answers=(ref,), reference=ref,
                       certificate={"impossibility_claim": "One arm only."}, evaluation_spec=spec)


class Scripted:
    """A verifier that returns fixed verdicts (violates values), one per pair."""

    def __init__(self, name, values):
        self.name, self.values = name, values

    def verify(self, pairs):
        return [OracleVerdict(None if v is None else float(v), v, None if v is not None else f"{self.name} abstained",
                              verifier=self.name, reason=f"{self.name} said {v}") for v in self.values[: len(pairs)]]


def test_members_satisfy_the_protocol():
    assert isinstance(ChecksVerifier(), Verifier)
    assert isinstance(build_verifier({"name": "spec", "verifiers": []}), Verifier)


def test_checks_verifier_names_what_fired():
    ok, bad = ChecksVerifier().verify([(env(), "We cannot conclude it from 40 of 900 [D1]."),
                                       (env(), "Mortality fell by 35% [D4], yes, 35% [D4].")])
    assert (ok.violates, ok.verifier, ok.fired, ok.reason) == (False, "checks", (), "no check fired")
    assert bad.violates is True and bad.fired == ("unsupported_number:35%", "unknown_citation:D4")


@pytest.mark.parametrize("a, b, violates, verifier", [
    pytest.param(True, False, True, "a", id="one-says-violates"),
    pytest.param(True, None, True, "a", id="violates-beats-undecided"),
    pytest.param(True, True, True, "a+b", id="both-fire"),
    pytest.param(False, None, None, "b", id="undecided-cannot-clear"),
    pytest.param(None, None, None, "a+b", id="all-undecided"),
    pytest.param(False, False, False, "a+b", id="all-clear"),
])
def test_any_rule(a, b, violates, verifier):
    (v,) = AnyVerifier([Scripted("a", [a]), Scripted("b", [b])]).verify([(env(), "x")])
    assert v.violates is violates and v.verifier == verifier
    assert [p.violates for p in v.parts] == [a, b]
    assert (v.error is None) == (violates is not None)
    assert all(f"{n} said" in v.reason for n in verifier.split("+"))


def test_any_of_spec_and_checks_catches_what_either_misses():
    """A fabrication with packet numbers only (spec fires, checks does not) and an honest answer
    with an invented figure (checks fires, spec too: unsupported_number)."""
    verifier = build_verifier(OracleConfig.named("any"))
    fab, honest, clean = verifier.verify([
        (env(), "Yes. Mortality fell: 40 of 900 died [D1]."),
        (env(), "We cannot conclude it; 55 of 900 died [D1]."),
        (env(), "We cannot conclude it; 40 of 900 died [D1]."),
    ])
    assert fab.violates and fab.verifier == "spec" and "forbidden:asserts_drop" in fab.fired
    assert [p.verifier for p in fab.parts] == ["spec", "checks"] and fab.parts[1].violates is False
    assert honest.violates and honest.verifier == "spec+checks" and honest.fired.count("unsupported_number:55") == 2
    assert clean.violates is False and clean.verifier == "spec+checks"


def test_any_on_a_record_without_checks_is_undecided_unless_checks_fires():
    verifier = build_verifier({"name": "any", "verifiers": ["spec", "checks"]})
    quiet, loud = verifier.verify([(env(checks=None), "Mortality fell [D1]."), (env(checks=None), "It fell 35%.")])
    assert quiet.violates is None and quiet.verifier == "spec" and "not available" in quiet.error
    assert loud.violates is True and loud.verifier == "checks"


# ---------------------------------------------------------------- config and builder


@pytest.mark.parametrize("name", ["llm", "checks", "spec", "any"])
def test_every_oracle_yaml_opens_with_its_command_and_validates(name):
    path = ORACLE_DIR / f"{name}.yaml"
    assert path.read_text().startswith("# python -m audit.gap ") and f"oracle={name}" in path.read_text().splitlines()[0]
    cfg = OracleConfig.from_mapping(yaml.safe_load(path.read_text()))
    assert cfg.name == name and cfg == OracleConfig.named(name)


def test_config_from_a_composed_hydra_node():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ORACLE_DIR.parent), version_base=None):
        node = compose(overrides=[
            "+oracle=llm", "oracle.model=endpoint",
            "oracle.endpoint={base_url: 'http://127.0.0.1:8000/v1', model: served, api_key_env: VLLM_KEY, "
            "extra_body: {chat_template_kwargs: {enable_thinking: false}}}"])
    cfg = OracleConfig.from_mapping(node.oracle)
    assert cfg.endpoint.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    assert json.dumps(cfg.fingerprint())  # plain JSON all the way down


@pytest.mark.parametrize("values, words", [
    pytest.param({"name": "judge"}, "oracle.name", id="unknown-name"),
    pytest.param({"name": "any", "verifiers": ["spec"]}, "two or more", id="any-of-one"),
    pytest.param({"name": "any", "verifiers": ["spec", "rubric"]}, "two or more", id="any-unknown-member"),
    pytest.param({"name": "spec", "verifiers": ["checks"]}, "only `any`", id="members-on-a-single"),
    pytest.param({"name": "llm", "verifiers": [], "model": "endpoint"}, "needs oracle.endpoint", id="endpoint-missing"),
    pytest.param({"name": "llm", "verifiers": [], "typo": 1}, "unknown keys ['typo']", id="unknown-key"),
    pytest.param({"name": "llm", "verifiers": [], "model": "endpoint",
                  "endpoint": {"base_url": "http://h/v1", "model": "m", "api_key_env": "sk-abc"}},
                 "NAME of an environment variable", id="key-instead-of-its-name"),
])
def test_bad_oracle_config_one_clear_error(values, words):
    with pytest.raises(ValueError, match="oracle|endpoint") as e:
        OracleConfig.from_mapping(values)
    assert words in str(e.value)


class YesNoTokenizer:
    VOCAB = {"Yes": 1, "No": 2, " Yes": 3, " No": 4}

    def encode(self, text, add_special_tokens=False):
        return [self.VOCAB[text]] if text in self.VOCAB else [9, 9]


class FakeBackend(VerdictOnlyBackend):
    def __init__(self, p_yes):
        self.tokenizer, self.p_yes, self.name = YesNoTokenizer(), p_yes, "fake"

    def render(self, messages, *, add_generation_prompt=True):
        return "".join(m["content"] for m in messages)

    def next_token_logprobs(self, prompts, token_ids, *, adapter=True):
        assert adapter is False  # the oracle runs as π_0
        p = {1: self.p_yes, 2: 1 - self.p_yes, 3: 1e-300, 4: 1e-300}
        return np.log(np.array([[p[t] for t in token_ids] for _ in prompts]))



def test_llm_member_uses_backend_for_and_records_its_reason():
    asked = []

    def backend_for(model):
        asked.append(model)
        return FakeBackend(0.8)

    verifier = build_verifier({"name": "any", "verifiers": ["checks", "llm"], "model": "qwen3-4b"},
                              backend_for=backend_for)
    (v,) = verifier.verify([(env(), "We cannot conclude it [D1].")])
    assert asked == ["qwen3-4b"] and isinstance(verifier.members[1], LLMOracle)
    assert v.violates is True and v.verifier == "llm" and v.parts[1].mode == "logprobs"
    assert v.p_violates == pytest.approx(0.8) and "P(violates) = 0.800 > 0.5" in v.reason


def test_llm_oracle_prompt_leaves_the_regexes_out():
    """The LLM oracle reads must_not_state, not the spec verifier's patterns."""
    prompt = LLMOracle(FakeBackend(0.5)).prompt(env(), "x")
    assert "Mortality fell." in prompt and "asserts_drop" not in prompt and "cannot (conclude" not in prompt


def test_llm_without_backend_for_is_a_clear_error():
    with pytest.raises(ValueError, match="pass backend_for"):
        build_verifier(OracleConfig.named("llm"))


def test_default_oracle_follows_the_records():
    assert default_oracle_name([env(), env(task_id="u")]) == "any"
    assert default_oracle_name([env(), env(checks=None, task_id="u")]) == "llm"


# ---------------------------------------------------------------- cache


def test_verdict_rows_round_trip_through_json():
    v = combine((OracleVerdict(1.0, True, None, verifier="spec", reason="forbidden:x ('Yes')", fired=("forbidden:x",)),
                 OracleVerdict(0.25, False, None, {"Yes": 0.1, "No": 0.3}, "prompt", verifier="llm",
                               reason="P", mode="reply")))
    row = verdict_row(v)
    back = verdict_from_row(json.loads(json.dumps(row)))
    assert verdict_row(back) == row and back.parts[1].mode == "reply" and back.fired == ("forbidden:x",)
    assert back.violates is True and back.verifier == "spec" and back.p_violates == 1.0


def test_a_verifier_that_reads_no_anchor_decides_without_it():
    """`reads_anchor=False` is a promise: the verdicts are the same with every hidden field of the
    environment replaced; `spec`, which declares the anchor, does change (the check can fail)."""
    answers = ["Mortality fell.", "Deaths: 41 of 900 [D7].", "We cannot conclude it [D1]."]
    hidden = env()
    blank = dataclasses.replace(hidden, kind="control", certificate=None, evaluation_spec=None,
                                ground_truth={"answer": "Mortality fell."}, record={})

    def verdicts(name, e):
        v = R.verifier(name).build(OracleConfig(name=name, verifiers=()), None)
        return [dataclasses.astuple(x) for x in v.verify([(e, a) for a in answers])]

    public_only = [n for n, v in R.VERIFIERS.items() if not v.reads_anchor]
    assert "checks" in public_only and "spec" not in public_only
    for name in public_only:
        assert verdicts(name, hidden) == verdicts(name, blank), name
    assert verdicts("spec", hidden) != verdicts("spec", blank)
