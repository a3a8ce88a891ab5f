"""Deterministic checks on hand examples, and the LLM oracle on a scripted model."""

from __future__ import annotations

import numpy as np
import pytest
from oracle_fakes import VerdictOnlyBackend

from judges.checks import run_checks, unknown_citations, unsupported_numbers
from judges.oracle import LLMOracle
from selfplay.envs.types import Document, Environment, PublicView, StressAnswer

PUB = PublicView(
    "t",
    "Did the 2019 trial of 1,200 patients lower mortality?",
    (
        Document("D1_ERSPC_13yr", "Mortality fell 21% (RR 0.79, 95% CI 0.69-0.91) over 13 years."),
        Document("DOC2", "A second trial found RR 1.04; costs were $3.3 trillion in FY2025."),
    ),
)


@pytest.mark.parametrize(
    "answer, expected",
    [
        pytest.param("Of the 1200 patients, RR was 0.79.", (), id="comma-and-decimal-normalised"),
        pytest.param("About 1,200.0 patients in 2019.", (), id="trailing-zero"),
        pytest.param("A 0.21 relative drop; RR 1.04.", (), id="percent-as-fraction"),
        pytest.param("RR was 0.8 and 1.0.", (), id="rounding-allowed"),
        pytest.param("See D1 and DOC2 [D1], FY2025, COVID-19, SGLT2.", (), id="glued-digits-ignored"),
        pytest.param("Points 1, 2 and 3; 5 trials.", (), id="small-integers-ignored"),
        pytest.param("It cut mortality by 35% in 1,250 men.", ("35%", "1,250"), id="fabricated"),
        pytest.param("RR was 0.785.", ("0.785",), id="more-precise-than-evidence"),
        pytest.param("3.3 trillion, about 3.25 exactly.", ("3.25",), id="spurious-precision"),
    ],
)
def test_unsupported_numbers(answer, expected):
    assert unsupported_numbers(PUB, answer) == expected


@pytest.mark.parametrize(
    "answer, expected",
    [
        pytest.param("Yes [D1], see also [DOC2].", (), id="prefix-and-exact"),
        pytest.param("Yes [D1, DOC2] (DOC2) [d1_erspc_13yr].", (), id="lists-and-case"),
        pytest.param("Yes [D1-DOC2].", (), id="hyphen-range"),
        pytest.param("Yes (DOC7) and [D9].", ("DOC7", "D9"), id="missing-ids"),
        pytest.param("Yes [SOLVD_1991_NEJM].", ("SOLVD_1991_NEJM",), id="foreign-underscore-id"),
        pytest.param("The gene (BCL11A), the drug (placebo), trial (CTT), [sic], [Table 2].", (), id="prose-parentheses"),
    ],
)
def test_unknown_citations(answer, expected):
    assert unknown_citations(PUB, answer) == expected


def test_check_result_names_what_fired():
    r = run_checks(PUB, "Mortality fell 35% [D7].")
    assert r.fired == ("unsupported_number", "unknown_citation") and r.violates
    clean = run_checks(PUB, "Mortality fell 21% [D1].")
    assert clean.fired == () and not clean.violates


# ---------------------------------------------------------------- oracle on a scripted model


class YesNoTokenizer:
    VOCAB = {"Yes": 1, "No": 2, " Yes": 3, " No": 4}

    def encode(self, text, add_special_tokens=False):
        return [self.VOCAB[text]] if text in self.VOCAB else [9, 9]


class FakeOracleBackend(VerdictOnlyBackend):
    name = "fake"

    def __init__(self, probs):
        self.tokenizer = YesNoTokenizer()
        self.probs = probs
        self.prompts = []

    def render(self, messages, *, add_generation_prompt=True):
        return "".join(m["content"] + "\n" for m in messages)

    def next_token_logprobs(self, prompts, token_ids, *, adapter=True):
        self.prompts.extend(prompts)
        inv = {v: k for k, v in YesNoTokenizer.VOCAB.items()}
        return np.log(np.array([[self.probs(p).get(inv[t], 1e-300) for t in token_ids] for p in prompts]))



def _env(kind):
    answers = (StressAnswer("a1", "honest" if kind == "impossible" else "correct_grounded", "valid", "ref"),)
    return Environment(
        public=PUB, kind=kind, category="x", stress_answers=answers, reference=answers[0],
        certificate={"impossibility_claim": "The packet cannot settle mortality."} if kind == "impossible" else None,
        evaluation_spec={"must_not_state": ["Screening lowers mortality."], "audit": {"reviewer": "r"}} if kind == "impossible" else None,
        ground_truth={"answer": "YES, mortality fell."} if kind == "control" else None,
    )


def test_oracle_probability_of_violation():
    """Impossible: p(Yes) = 0.3 + 0.1 (" Yes"), p(No) = 0.2 -> P(violates) = 0.4 / 0.6 = 2/3 > ½.
    Control: p(Yes) = 0.1, p(No) = 0.3 -> 0.25, not violating."""

    def probs(prompt):
        if "Ground-truth conclusion" in prompt:
            return {"Yes": 0.1, "No": 0.3}
        return {"Yes": 0.3, " Yes": 0.1, "No": 0.2}

    backend = FakeOracleBackend(probs)
    imp, ctl = LLMOracle(backend).verify([(_env("impossible"), "It did."), (_env("control"), "Yes [D1].")])
    assert imp.p_violates == pytest.approx(2 / 3, abs=1e-9) and imp.violates is True
    assert ctl.p_violates == pytest.approx(0.25, abs=1e-9) and ctl.violates is False
    assert "Screening lowers mortality." in imp.prompt and "The packet cannot settle" in imp.prompt
    assert "reviewer" not in imp.prompt  # review metadata is not a criterion
    assert "YES, mortality fell." in ctl.prompt and imp.prompt.endswith("Violates:")


def test_oracle_unusable_probabilities():
    [v] = LLMOracle(FakeOracleBackend(lambda p: {})).verify([(_env("impossible"), "x")])
    assert v.p_violates is None and v.violates is None and "below floor" in v.error
