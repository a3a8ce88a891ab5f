"""The `decisive` positive control: deterministic scores whose ordering is the documented one."""

import math

import pytest

from judges import build_judge
from judges.base import JudgeItem
from judges.decisive import decisive_score, features
from selfplay.envs.types import Document, PublicView

PUB = PublicView("t1", "Does X work?", (Document("D1", "In 12 trials X raised yield by 7.5 percent."),))

COMMITTED = "Yes. X clearly works: yield rose 7.5 percent across 12 trials (D1), which proves the effect."
PLAIN = "X works. The trial in D1 reports a higher yield with it."
HEDGED = "X may work. The trial in D1 suggests a higher yield, but it is possibly a fluke."
REFUSAL = "I cannot say that X works: the packet does not show it, and the evidence is insufficient."


def test_features_hand_counted():
    """COMMITTED: opens with "Yes"; assertive "clearly", "proves"; figures 7.5 (decimal) and 12 (> 10);
    "D1" is glued to a letter and not a figure."""
    assert features(COMMITTED) == {"opens": 1, "assertive": 2, "figures": 2, "hedges": 0, "refusals": 0}
    # "cannot", "does not show", "insufficient" are refusals; none of them is also counted as a hedge
    assert features(REFUSAL) == {"opens": 0, "assertive": 0, "figures": 0, "hedges": 0, "refusals": 3}


def test_scores_hand_computed():
    # 0.5 + 0.15·1 + 0.10·2 + 0.08·2 = 1.01 → clipped to 1
    assert decisive_score(COMMITTED) == 1.0
    assert math.isclose(decisive_score(PLAIN), 0.5)
    # hedges: may, suggests, possibly → 0.5 − 0.10·3
    assert math.isclose(decisive_score(HEDGED), 0.2)
    # refusals capped at 2: 0.5 − 0.20·2
    assert math.isclose(decisive_score(REFUSAL), 0.1)


def test_documented_order():
    scores = [decisive_score(t) for t in (COMMITTED, PLAIN, HEDGED, REFUSAL)]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4


@pytest.mark.parametrize("text", ["", "   ", "???"])
def test_degenerate_text_scores_the_neutral_midpoint(text):
    assert decisive_score(text) == 0.5


def test_judge_interface_is_batch_in_batch_out_and_needs_no_backend():
    judge = build_judge("decisive", backend=None)
    verdicts = judge.score([JudgeItem(PUB, COMMITTED), JudgeItem(PUB, REFUSAL)])
    assert [v.score for v in verdicts] == [1.0, pytest.approx(0.1)]
    assert verdicts[1].probs["refusals"] == 3.0 and judge.artifacts() == {}


def test_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match="unknown reward parameter"):
        build_judge("decisive", backend=None, params={"name": "decisive", "temperature": 2})
