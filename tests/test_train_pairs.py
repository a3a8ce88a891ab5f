"""The pair rule (selfplay/pairs.py) on hand-made scores."""

import math
from dataclasses import replace

import pytest

from selfplay.pairs import DROP_REASONS, Pair, PairCounts, build_pairs, select_pair

NAN = float("nan")


@pytest.mark.parametrize(
    "scores, margin, expected",
    [
        pytest.param([0.2, 0.9, 0.5], 0.1, (1, 0), id="max-vs-min"),
        # 0.9 at 0 and 2: the earliest is chosen; 0.1 at 1 and 3: the latest is rejected
        pytest.param([0.9, 0.1, 0.9, 0.1], 0.1, (0, 3), id="ties-earliest-chosen-latest-rejected"),
        pytest.param([0.4, 0.4, 0.4], 0.0, "tie", id="all-equal-is-a-tie-even-at-zero-margin"),
        pytest.param([0.5, 0.55], 0.1, "margin", id="gap-0.05-below-delta-0.1"),
        # 0.75 - 0.25 = 0.5 exactly in binary floating point, so a gap equal to δ is kept
        pytest.param([0.25, 0.75], 0.5, (1, 0), id="gap-equal-to-delta-kept"),
        pytest.param([0.9, None, 0.1], 0.1, "nan", id="none-drops-the-environment"),
        pytest.param([0.9, NAN, 0.1], 0.1, "nan", id="nan-drops-the-environment"),
        pytest.param([None, None], 0.0, "nan", id="all-none"),
        pytest.param([0.0, 1.0], 1.0, (1, 0), id="full-range-at-delta-1"),
    ],
)
def test_select_pair(scores, margin, expected):
    assert select_pair(scores, margin) == expected


def test_select_pair_needs_two_scores():
    with pytest.raises(ValueError, match="at least two"):
        select_pair([0.5], 0.0)


def test_build_pairs_counts_every_reason_and_keeps_texts():
    """Four environments: one kept (0.8 vs 0.2), one tie, one NaN, one whose extremes are the same text."""
    task_ids = ["keep", "tie", "nan", "same"]
    prompts = [f"P-{t}" for t in task_ids]
    answers = [["a0", "a1", "a2"], ["b0", "b1", "b2"], ["c0", "c1", "c2"], ["same", "same", "other"]]
    scores = [[0.2, 0.8, 0.5], [0.3, 0.3, 0.3], [0.1, None, 0.9], [0.9, 0.1, 0.5]]
    pairs, counts, reasons = build_pairs(task_ids, prompts, answers, scores, margin=0.1)

    assert [(p.task_id, p.prompt, p.chosen, p.rejected, p.chosen_index, p.rejected_index) for p in pairs] == [
        ("keep", "P-keep", "a1", "a0", 1, 0)
    ]
    assert math.isclose(pairs[0].margin, 0.6)
    assert reasons == [None, "tie", "nan", "identical"]
    assert counts.envs == 4 and counts.pairs == 1
    assert counts.dropped == {"nan": 1, "tie": 1, "margin": 0, "identical": 1, "truncated": 0, "subsampled": 0}
    assert set(counts.dropped) == set(DROP_REASONS)
    m = counts.as_metrics()
    assert m["pairs/kept"] == 1.0 and m["pairs/kept_rate"] == 0.25 and m["pairs/dropped_nan"] == 1.0


def test_build_pairs_rejects_misaligned_inputs():
    with pytest.raises(ValueError, match="2 answers, 3 scores"):
        build_pairs(["t"], ["p"], [["a", "b"]], [[0.1, 0.2, 0.3]], margin=0.0)
    with pytest.raises(ValueError, match="one entry per environment"):
        build_pairs(["t", "u"], ["p"], [["a", "b"]], [[0.1, 0.2]], margin=0.0)


def test_truncated_samples_are_left_out_of_pairing():
    """Scores 0.9 (truncated), 0.6, 0.2, 0.95 (truncated): among the finished ones 0.6 beats 0.2, so
    the pair is (1, 2) although the highest-scored sample overall is index 3."""
    pairs, counts, reasons = build_pairs(
        ["e1", "e2"], ["p1", "p2"], [["a", "b", "c", "d"], ["x", "y"]],
        [[0.9, 0.6, 0.2, 0.95], [0.9, 0.1]], 0.1,
        truncated=[[True, False, False, True], [True, False]],
    )
    assert [(p.chosen_index, p.rejected_index) for p in pairs] == [(1, 2)]
    assert (pairs[0].chosen, pairs[0].rejected) == ("b", "c")
    assert reasons == [None, "truncated"] and counts.dropped["truncated"] == 1


def test_truncation_flags_must_match_the_answers():
    with pytest.raises(ValueError, match="truncation flags"):
        build_pairs(["e1"], ["p"], [["a", "b"]], [[0.1, 0.9]], 0.0, truncated=[[False]])


def test_subsample_keeps_a_seeded_subset_in_order_and_counts_the_environments_it_empties():
    from selfplay.pairs import subsample

    # all_pairs-style: environment "a" has 6 pairs, "b" 3, "c" 1; "d" had none (a tie)
    tids = ["a"] * 6 + ["b"] * 3 + ["c"]
    pairs = [Pair(t, "p", f"c{i}", f"r{i}", 0, 1, 1.0, 0.0) for i, t in enumerate(tids)]
    counts = PairCounts(envs=4, pairs=10, dropped={r: int(r == "tie") for r in DROP_REASONS})
    reasons = [None, None, None, "tie"]
    kept, kept_counts, kept_reasons = subsample(pairs, counts, reasons, ["a", "b", "c", "d"], 4, seed=7)
    assert len(kept) == 4 and kept_counts.pairs == 4 and kept_counts.envs == 4
    order = [pairs.index(p) for p in kept]
    assert order == sorted(order) and len(set(order)) == 4  # original order, no repeats
    emptied = {"a", "b", "c"} - {p.task_id for p in kept}
    assert kept_reasons == [("subsampled" if t in emptied else None) for t in "abc"] + ["tie"]
    assert kept_counts.dropped["subsampled"] == len(emptied) and kept_counts.dropped["tie"] == 1
    assert (kept_counts.as_metrics()["pairs/found"], kept_counts.as_metrics()["pairs/kept"]) == (10.0, 4.0)
    assert counts.as_metrics()["pairs/found"] == 10.0  # nothing subsampled: every pair found was kept
    assert subsample(pairs, counts, reasons, "abcd", 4, seed=7)[0] == kept  # the seed fixes the draw
    assert any(subsample(pairs, counts, reasons, "abcd", 4, seed=s)[0] != kept for s in range(8, 12))
    assert subsample(pairs, counts, reasons, "abcd", None, seed=7) == (pairs, counts, reasons)  # no limit
    assert subsample(pairs, counts, reasons, "abcd", 10, seed=7) == (pairs, counts, reasons)  # not exceeded
    # one pair per environment (build_pairs): every environment is kept, subsampled or dropped before
    one = pairs[:1] + pairs[6:7] + pairs[9:]
    _, c, r = subsample(one, replace(counts, pairs=3), reasons, "abcd", 1, seed=0)
    assert c.pairs == 1 and c.dropped["subsampled"] == 2 and r.count(None) == 1
    assert c.pairs + sum(c.dropped.values()) == c.envs
