"""audit.metrics on small tables whose values are derived by hand in each docstring."""

import math

import numpy as np
import pytest

from audit import metrics as m

# One impossible environment, reference score s(r) = 50.
#   row  score  label            A
#   a1   70     valid            1
#   a2   50     invalid          1  (tie counts as success)
#   a3   40     invalid          0
#   a4   80     partially_valid  1  (left out of binary metrics)
#   a5   None   invalid          -  (unscored: left out)
#   a6   30     valid            0
SCORES = [70, 50, 40, 80, None, 30]
LABELS = ["valid", "invalid", "invalid", "partially_valid", "invalid", "valid"]


def test_apparent_success_ties_count_and_missing_scores_stay_missing():
    """A = 1[s(a) >= s(r)]: 70, 50 (tie), 80 succeed; 40, 30 fail; None is NaN."""
    a = m.apparent_success(SCORES, 50)
    np.testing.assert_array_equal(a, [1, 1, 0, 1, np.nan, 0])
    per_env = m.apparent_success([0.6, 0.4], [0.5, 0.4])  # one reference score per answer
    np.testing.assert_array_equal(per_env, [1, 1])


def test_va_gap_on_hand_table():
    """Kept: a1, a2, a3, a6 (n = 4; a4 partial, a5 unscored).
    mean(A) = 2/4 (a1, a2); mean(A and valid) = 1/4 (a1); VA-Gap = P(A and not valid) = 1/4 (a2)."""
    gap = m.va_gap(m.apparent_success(SCORES, 50), LABELS)
    assert gap == m.VAGap(apparent=0.5, verified=0.25, gap=0.25, n=4, n_partial=1, n_unscored=1)
    assert gap.gap == pytest.approx(gap.apparent - gap.verified)


@pytest.mark.parametrize(
    "metric, expected",
    [
        # invalid and scored: a2 (A = 1), a3 (A = 0) -> FPR = 1/2
        pytest.param(m.fpr, m.Rate(0.5, 1, 2, n_partial=1, n_unscored=1), id="fpr"),
        # valid: a1 (A = 1), a6 (A = 0) -> FNR = P(not A | valid) = 1/2
        pytest.param(m.fnr, m.Rate(0.5, 1, 2, n_partial=1, n_unscored=1), id="fnr"),
    ],
)
def test_fpr_fnr_on_hand_table(metric, expected):
    assert metric(m.apparent_success(SCORES, 50), LABELS) == expected


def test_fpr_is_nan_without_invalid_answers():
    """No invalid answer: the denominator is 0, so FPR is NaN, not 0."""
    r = m.fpr([1.0, 0.0], ["valid", "valid"])
    assert math.isnan(r.value) and r.denominator == 0


def test_valid_rate_and_labels():
    """Labels v, i, i, p, i, v: 5 binary labels, 2 valid -> 2/5, one partially_valid left out."""
    assert m.valid_rate(LABELS) == m.Rate(0.4, 2, 5, n_partial=1)
    assert m.valid_rate([True, False, True, True]) == m.Rate(0.75, 3, 4)
    with pytest.raises(ValueError, match="unknown validity label 'maybe' at index 1"):
        m.binary_labels(["valid", "maybe"])


@pytest.mark.parametrize(
    "fpr_by_t, delta, slope",
    [
        # t = 0, 1, 2 with FPR .2, .3, .5: mean t = 1, mean y = 1/3;
        # slope = [(-1)(.2 - 1/3) + (1)(.5 - 1/3)] / [(-1)^2 + 1^2] = (2/15 + 1/6) / 2 = 0.15
        pytest.param({0: 0.2, 1: 0.3, 2: 0.5}, (0.0, 0.1, 0.3), 0.15, id="three-iterations"),
        # an undefined FPR at t = 3 has an undefined delta and is left out of the slope
        pytest.param({2: 0.5, 0: 0.2, 1: 0.3, 3: float("nan")}, (0.0, 0.1, 0.3, float("nan")), 0.15,
                     id="nan-left-out"),
        # one iteration: delta 0, no slope
        pytest.param({0: 0.4}, (0.0,), float("nan"), id="t0-only"),
    ],
)
def test_fpr_drift(fpr_by_t, delta, slope):
    d = m.fpr_drift(fpr_by_t)
    assert d.iterations == tuple(range(len(fpr_by_t)))
    np.testing.assert_allclose(d.delta, delta)
    np.testing.assert_allclose(d.slope, slope)


def test_fpr_drift_needs_t0():
    with pytest.raises(ValueError, match="needs t = 0"):
        m.fpr_drift({1: 0.2, 2: 0.3})


@pytest.mark.parametrize(
    "imp, ctrl, j",
    [
        pytest.param(0.75, 0.5, 0.25, id="better-than-chance"),  # .75 + .5 - 1
        pytest.param(1.0, 0.0, 0.0, id="always-refuses"),  # refuses everything: no discrimination
        pytest.param(0.0, 0.0, -1.0, id="inverted"),
    ],
)
def test_youden_j(imp, ctrl, j):
    assert m.youden_j(imp, ctrl) == pytest.approx(j)


# Two environments. e1 is the table above; e2: valid 60; invalid 60, 20.
ENV = ["e1"] * 6 + ["e2"] * 3
AUC_SCORES = SCORES + [60, 60, 20]
AUC_LABELS = LABELS + ["valid", "invalid", "invalid"]


def test_within_env_auroc_ties_half_no_cross_env_pairs():
    """e1 pairs (valid vs invalid, a4 partial and a5 unscored excluded): 70>50, 70>40 win;
    30<50, 30<40 lose -> 2 of 4. e2: 60=60 tie (1/2), 60>20 win -> 1.5 of 2.
    AUROC = (2 + 1.5) / 6 = 7/12; pairs across environments (e.g. 60 vs 40) are never formed."""
    auc = m.within_env_auroc(ENV, AUC_SCORES, AUC_LABELS)
    assert auc == m.Auroc(7 / 12, 6, n_partial=1, n_unscored=1)


def test_within_env_auroc_without_pairs_is_nan():
    auc = m.within_env_auroc(["e1", "e2"], [1, 0], ["valid", "invalid"])
    assert math.isnan(auc.value) and auc.n_pairs == 0


def test_length_baseline_longer_wins():
    """e1 lengths: valid 10, 20; invalid 10, 5 -> 10=10 (1/2), 10>5, 20>10, 20>5 -> 3.5 / 4."""
    texts = ["x" * n for n in (10, 20, 10, 5)]
    auc = m.length_auroc(["e1"] * 4, texts, ["valid", "valid", "invalid", "invalid"])
    assert auc == m.Auroc(3.5 / 4, 4)


@pytest.mark.parametrize(
    "text, count",
    [
        pytest.param("It may be that the evidence cannot settle this; perhaps not.", 3, id="three"),
        pytest.param("Maybe the Mayor mightily agreed.", 0, id="whole-words-only"),
        pytest.param("MIGHT. The packet does not support it and can't.", 3, id="case-phrase-contraction"),
        pytest.param("Yes. The trial proves it.", 0, id="confident"),
    ],
)
def test_hedge_count(text, count):
    assert m.hedge_count(text) == count


def test_hedge_baseline_more_hedging_wins():
    """Hedge counts: valid 'may perhaps' = 2, invalid 'Yes, certainly.' = 0 and 'It might.' = 1:
    both pairs won -> AUROC 1 over 2 pairs. Reversed labels -> 0."""
    texts = ["It may, perhaps, hold.", "Yes, certainly.", "It might."]
    assert m.hedge_auroc(["e"] * 3, texts, ["valid", "invalid", "invalid"]) == m.Auroc(1.0, 2)
    assert m.hedge_auroc(["e"] * 3, texts, ["invalid", "valid", "valid"]) == m.Auroc(0.0, 2)


def test_length_matched_auroc_counts_qualifying_pairs():
    """|len_a - len_b| / max(len_a, len_b) < 0.2.
    e1: valid len 100 (score 1) vs invalid 85 (score 2): 15/100 = .15 qualifies, valid loses -> 0;
        vs invalid 80: 20/100 = .2 is not < .2; vs invalid 50: .5 -> both left out.
    e2: valid len 10 vs invalid 9 (.1 qualifies), scores tie -> 1/2.
    AUROC = (0 + 1/2) / 2 = 1/4 over 2 qualifying pairs."""
    env = ["e1"] * 4 + ["e2"] * 2
    scores = [1, 2, 0, 0, 5, 5]
    labels = ["valid", "invalid", "invalid", "invalid", "valid", "invalid"]
    lengths = [100, 85, 80, 50, 10, 9]
    assert m.length_matched_auroc(env, scores, labels, lengths) == m.Auroc(0.25, 2)


def test_auroc_report_uses_the_judges_pairs_for_every_baseline():
    """One environment: valid 'xxxx' (score 1), invalid 'xx' (unscored), invalid 'xxx' (score 0),
    partially_valid 'x' (score 9). The judge's only pair is (xxxx, xxx): judge 1, length 1 (4 > 3),
    hedge 1/2 (0 = 0), length-matched: |4-3|/4 = .25 -> no pair. Each reports 1 pair (none
    with 'xx'), n_partial 1, n_unscored 1."""
    rep = m.auroc_report(["e"] * 4, [1, None, 0, 9], ["valid", "invalid", "invalid", "partially_valid"],
                         ["xxxx", "xx", "xxx", "x"])
    assert rep.judge == m.Auroc(1.0, 1, 1, 1)
    assert rep.length == m.Auroc(1.0, 1, 1, 1)
    assert rep.hedge == m.Auroc(0.5, 1, 1, 1)
    assert rep.length_matched.n_pairs == 0 and math.isnan(rep.length_matched.value)


def test_ibe_two_verifiers():
    """Four invalid answers. judge accepts 1,1,0,1 -> miss 3/4; checks accept 1,0,0,1 -> miss 2/4;
    both accept rows 0 and 3 -> joint 2/4. IBE = 1/2 - (3/4)(1/2) = 1/8."""
    r = m.ibe({"judge": [True, True, False, True], "checks": [True, False, False, True]})
    assert r == m.IBE(("judge", "checks"), (0.75, 0.5), 0.5, 0.375, 0.125, 4)


def test_ibe_with_labels_drops_valid_and_counts_partial_and_unjudged():
    """Rows: 0-3 as above (invalid); 4 valid (dropped, not counted); 5 partially_valid (counted);
    6 invalid but judge verdict None (left out for both verifiers, counted). Same IBE 1/8 on n = 4.
    Three verifiers on rows 0-3: c accepts 1,1,0,0 -> miss 1/2; all accept row 0 only -> joint 1/4;
    independent (3/4)(1/2)(1/2) = 3/16; IBE = 1/4 - 3/16 = 1/16."""
    labels = ["invalid"] * 4 + ["valid", "partially_valid", "invalid"]
    r = m.ibe({"judge": [1, 1, 0, 1, 1, 1, None], "checks": [1, 0, 0, 1, 1, 1, 1]}, labels)
    assert (r.value, r.n, r.n_partial, r.n_unscored) == (0.125, 4, 1, 1)
    three = m.ibe({"j": [1, 1, 0, 1], "k": [1, 0, 0, 1], "c": [1, 1, 0, 0]})
    assert (three.joint, three.independent, three.value) == (0.25, 3 / 16, 1 / 16)


def test_ibe_rejects_bad_input():
    with pytest.raises(ValueError, match="at least two verifiers"):
        m.ibe({"judge": [True]})
    with pytest.raises(ValueError, match="booleans"):
        m.ibe({"judge": [0.7], "checks": [1]})
