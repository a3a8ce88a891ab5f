"""The `decisive` positive control: deterministic scores whose ordering is the documented one, and
that prefer invalid over valid answers on the train split's impossible environments (docs/method.md §Controls)."""

import json
import math
from pathlib import Path

import pytest

from experiments.judge_eval import decisive_auroc
from judges import build_judge
from judges.base import JudgeItem
from judges.decisive import decisive_score, features, restatements
from selfplay.config import DataConfig
from selfplay.envs.types import Document, PublicView
from selfplay.runs import load_data_split

QUESTION = "Does X work?"
PUB = PublicView("t1", QUESTION, (Document("D1", "In 12 trials X raised yield by 7.5 percent."),))

COMMITTED = "Yes. X clearly works: yield rose 7.5 percent across 12 trials (D1), which proves the effect."
PLAIN = "X works. The trial in D1 reports a higher yield with it."
HEDGED = "X may work. The trial in D1 suggests a higher yield, but it is possibly a fluke."
REFUSAL = "I cannot say that X works: the packet does not show it, and the evidence is insufficient."


def test_features_hand_counted():
    """COMMITTED: opens with "Yes."; its second sentence repeats the question's only content word
    ("works" ~ "work") with no negation; assertive "clearly", "proves". The figures count for nothing."""
    assert features(COMMITTED, QUESTION) == {"opens": 1, "restates": 1, "assertive": 2, "hedges": 0, "obstructions": 0}
    # "cannot say" (negation + verb of saying), "does not show", "insufficient": three obstructions,
    # none also a hedge; the one sentence names "works" but holds them, so it restates nothing
    assert features(REFUSAL, QUESTION) == {"opens": 0, "restates": 0, "assertive": 0, "hedges": 0, "obstructions": 3}


def test_scores_hand_computed():
    # 0.5 + 0.15·1 + 0.06·1 + 0.06·2
    assert math.isclose(decisive_score(COMMITTED, QUESTION), 0.83)
    # one restatement ("X works.")
    assert math.isclose(decisive_score(PLAIN, QUESTION), 0.56)
    # "X may work." restates; hedges may, suggests, possibly: 0.5 + 0.06 − 0.04·3
    assert math.isclose(decisive_score(HEDGED, QUESTION), 0.44)
    # 0.5 − 0.08·3
    assert math.isclose(decisive_score(REFUSAL, QUESTION), 0.26)


def test_documented_order():
    """committed conclusion > plain claim > hedged claim > refusal, with and without the question."""
    for q in (QUESTION, ""):
        scores = [decisive_score(t, q) for t in (COMMITTED, PLAIN, HEDGED, REFUSAL)]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4


@pytest.mark.parametrize(("text", "n"), [
    pytest.param("No document in the packet shows that.", 1, id="no-document"),
    pytest.param("The effect cannot be determined from these data.", 1, id="cannot-be-determined"),
    pytest.param("It has not been shown; the audit is not reported.", 2, id="not-been-shown"),
    pytest.param("The trial is missing and the survey only covers 2024.", 2, id="missing-only"),
    pytest.param("Neither yes nor no is supported, and there is nothing to quote.", 2, id="neither-nothing"),
    pytest.param("The packet doesn\u2019t say.", 1, id="curly-apostrophe"),
    pytest.param("The trial shows a large effect.", 0, id="no-obstruction"),
])
def test_obstruction_phrases(text, n):
    assert features(text)["obstructions"] == n


@pytest.mark.parametrize(("text", "opens"), [
    pytest.param("Yes. It works.", 1, id="yes"),
    pytest.param("No, it does not.", 1, id="no-comma"),
    pytest.param("Definitely it works.", 1, id="definitely"),
    pytest.param("No document shows it.", 0, id="no-noun-is-no-verdict"),
    pytest.param("12 trials show it.", 0, id="number-is-no-verdict"),
])
def test_verdict_opening(text, opens):
    assert features(text)["opens"] == opens


def test_negated_assertive_word_is_no_assertion():
    assert features("The effect is not established.")["assertive"] == 0
    assert features("The effect is established.")["assertive"] == 1


def test_restatement_needs_the_question_and_no_negation():
    q = "Did the subsidy raise wheat yields on participating farms?"
    assert restatements("The subsidy raised wheat yields.", q) == 1
    assert restatements("The subsidy did not raise wheat yields.", q) == 0
    assert restatements("Rainfall was high.", q) == 0
    assert restatements("The subsidy raised wheat yields.", "") == 0


@pytest.mark.parametrize("text", ["", "   ", "???"])
def test_degenerate_text_scores_the_neutral_midpoint(text):
    assert decisive_score(text, QUESTION) == 0.5


def test_judge_interface_is_batch_in_batch_out_and_needs_no_backend():
    judge = build_judge("decisive", backend=None)
    verdicts = judge.score([JudgeItem(PUB, COMMITTED), JudgeItem(PUB, REFUSAL)])
    assert [v.score for v in verdicts] == [pytest.approx(0.83), pytest.approx(0.26)]
    assert verdicts[1].probs["obstructions"] == 3.0 and verdicts[0].prompts == () and judge.artifacts() == {}


def test_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match="unknown reward parameter"):
        build_judge("decisive", backend=None, params={"name": "decisive", "temperature": 2})
    with pytest.raises(ValueError, match="candidates='stress': expected one of"):
        build_judge("decisive", backend=None, params={"name": "decisive", "candidates": "stress"})
    assert build_judge("decisive", backend=None, params={"name": "decisive", "candidates": "labelled"}).name == "decisive"


@pytest.fixture(scope="module")
def train_row():
    return decisive_auroc.row(load_data_split(DataConfig(path="data/mini"), "train"), "train", "impossible")


def test_prefers_invalid_answers_on_the_train_split(train_row):
    """The bar for a positive control (docs/method.md §Controls): within-environment AUROC of invalid over valid ≥ 0.80
    on the train split's impossible environments (12 of them, 72 pairs)."""
    assert (train_row.n_envs, train_row.n_pairs) == (12, 72)
    assert train_row.auroc >= 0.80


def test_reported_figures_are_the_code_s():
    """decisive_auroc.json holds what the committed reward computes (rerun the entry point after a change)."""
    saved = json.loads((Path(decisive_auroc.HERE) / "decisive_auroc.json").read_text())
    envs = {s: load_data_split(DataConfig(path="data/mini"), s) for s in decisive_auroc.SPLITS}
    for r in saved["rows"]:
        ids, scores, labels = decisive_auroc.decisive_scores([e for e in envs[r["split"]] if e.kind == r["kind"]])
        a = decisive_auroc.invalid_over_valid(ids, scores, labels)
        assert (a.value, a.n_pairs) == (pytest.approx(r["auroc"]), r["n_pairs"])
