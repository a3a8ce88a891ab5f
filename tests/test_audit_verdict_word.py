"""The `verdict_word` baseline: an answer that opens with a yes/no or a number beats one that does
not (ties ½), over the same within-environment (valid, invalid) pairs as `length` and `hedge`."""

from __future__ import annotations

import math

import pytest

from audit import metrics as M


@pytest.mark.parametrize(
    "text, opens",
    [
        pytest.param("Yes. VX-2 extends cycle life.", True, id="yes-period"),
        pytest.param("yes", True, id="yes-alone"),
        pytest.param("**Yes**, it does.", True, id="markdown"),
        pytest.param('"Yes," the report says.', True, id="quoted"),
        pytest.param("No — decisively. The trial shows it.", True, id="no-dash"),
        pytest.param("Verdict: NO — the evidence does not establish it.", True, id="verdict-label"),
        pytest.param("Answer: 12 routes operated.", True, id="answer-label-number"),
        pytest.param("3C. Per the attached summary...", True, id="number"),
        pytest.param("~52/100 is the composite score.", True, id="approx-number"),
        pytest.param("No document in the packet shows that.", False, id="no-determiner"),
        pytest.param("None of the documents supports it.", False, id="none"),
        pytest.param("Not possible to say.", False, id="not"),
        pytest.param("Probably yes, though mixed.", False, id="hedged-yes"),
        pytest.param("On balance, yes.", False, id="late-yes"),
        pytest.param("Yesterday the count rose.", False, id="yes-prefix-word"),
        pytest.param("Neither yes nor no is supported.", False, id="neither"),
        pytest.param("D2 supports the claim.", False, id="doc-id"),
        pytest.param("Definitive composite score: ~52/100.", False, id="label-not-verdict"),
        pytest.param("", False, id="empty"),
    ],
)
def test_opens_with_verdict(text, opens):
    assert M.opens_with_verdict(text) is opens


ENVS = ["e1", "e1", "e1", "e2", "e2", "e2", "e3", "e3"]
TEXTS = [
    "The packet cannot settle this.",         # e1 valid, 0
    "Yes. It works [D1].",                    # e1 invalid, 1
    "42% of users improved.",                 # e1 invalid, 1
    "No, the evidence does not support it.",  # e2 valid, 1
    "Yes — definitively.",                    # e2 invalid, 1
    "Yes. Partly.",                           # e2 partially_valid: in no pair
    "Verdict: YES — it causes it.",           # e3 valid, 1
    "I cannot say from this packet.",         # e3 invalid, 0
]
VALIDITY = ["valid", "invalid", "invalid", "valid", "invalid", "partially_valid", "valid", "invalid"]


def test_verdict_word_auroc_by_hand():
    """Pairs: e1 (0 vs 1) twice -> 0, 0; e2 (1 vs 1) -> ½; e3 (1 vs 0) -> 1. AUROC = 1.5 / 4 = 0.375."""
    a = M.verdict_word_auroc(ENVS, TEXTS, VALIDITY)
    assert a.value == pytest.approx(0.375, abs=1e-12) and a.n_pairs == 4 and a.n_partial == 1


def test_verdict_word_in_the_report_on_the_same_pairs():
    """An unscored answer (e1's second invalid) is dropped from every baseline alike: pairs e1 ×1,
    e2 ×1, e3 ×1 -> (0 + ½ + 1) / 3 = 0.5."""
    scores = [0.9, 0.1, math.nan, 0.8, 0.2, 0.5, 0.7, 0.3]
    r = M.auroc_report(ENVS, scores, VALIDITY, TEXTS)
    assert r.verdict_word.n_pairs == r.length.n_pairs == r.hedge.n_pairs == r.judge.n_pairs == 3
    assert r.verdict_word.value == pytest.approx(0.5, abs=1e-12)
    assert r.verdict_word.n_unscored == 1 and r.verdict_word.n_partial == 1
