"""audit.stats: bootstrap calibration, the two bootstrap paths agreeing, and hand-derived tests."""

import math

import numpy as np
import pytest

from audit import metrics
from audit.stats import (
    BootstrapCI,
    McNemar,
    across_seeds,
    bonferroni,
    bootstrap_ci,
    bootstrap_ratio_ci,
    mcnemar_exact,
)


def _clustered_rate(rng, k, m, rate):
    """k environments of m answers; each environment's own rate ~ Beta(3, 7) (mean `rate` = .3),
    so answers of one environment are correlated and only a cluster bootstrap covers."""
    p_env = rng.beta(3, 7, size=k)
    clusters = np.repeat(np.arange(k), m)
    return clusters, (rng.random(k * m) < p_env[clusters]).astype(float)


def test_bootstrap_covers_known_rate_95_percent():
    """1,500 simulated audits of 120 environments x 5 answers with true rate 0.3: the 95% cluster
    bootstrap interval (B = 2000) must contain 0.3 in 93-97% of them (binomial SD of the coverage
    at 1,500 repetitions is 0.56 points, so the band is about +-3.5 SD)."""
    rng = np.random.default_rng(20240611)
    reps, covered = 1500, 0
    for _ in range(reps):
        clusters, x = _clustered_rate(rng, k=120, m=5, rate=0.3)
        ci = bootstrap_ratio_ci(x, np.ones_like(x), clusters, rng=rng, B=2000)
        covered += ci.low <= 0.3 <= ci.high
    assert 0.93 <= covered / reps <= 0.97


def test_generic_and_ratio_bootstrap_agree_on_a_rate():
    """Same Generator state -> same cluster draws -> same percentile interval for a mean."""
    clusters, x = _clustered_rate(np.random.default_rng(1), k=30, m=4, rate=0.3)
    clusters = np.array([f"env{c}" for c in clusters])  # labels need not be integers
    generic = bootstrap_ci(lambda _, v: v.mean(), clusters, x, rng=np.random.default_rng(7), B=1000)
    fast = bootstrap_ratio_ci(x, np.ones_like(x), clusters, rng=np.random.default_rng(7), B=1000)
    assert generic.estimate == pytest.approx(fast.estimate)
    assert (generic.low, generic.high) == pytest.approx((fast.low, fast.high))


def test_auroc_bootstrap_keeps_pairs_inside_each_drawn_copy():
    """A within-environment AUROC is Σ wins / Σ pairs over environments. If a cluster drawn twice
    were merged into one, its copies would pair with each other and the replicate would differ from
    the ratio of per-environment sums; equal intervals show each copy stays its own environment."""
    rng = np.random.default_rng(3)
    env = np.repeat(np.arange(12), 4)
    valid = np.tile([True, True, False, False], 12)
    scores = rng.integers(0, 4, size=len(env)).astype(float)
    generic = bootstrap_ci(lambda e, s, v: metrics.within_env_auroc(e, s, v).value,
                           env, scores, valid, rng=np.random.default_rng(5), B=1000)
    wins = np.zeros(len(env))
    pairs = np.zeros(len(env))
    for e in range(12):
        s = scores[env == e]
        d = s[:2, None] - s[None, 2:]  # 2 valid x 2 invalid
        wins[e * 4] = (d > 0).sum() + 0.5 * (d == 0).sum()
        pairs[e * 4] = 4
    fast = bootstrap_ratio_ci(wins, pairs, env, rng=np.random.default_rng(5), B=1000)
    assert generic.estimate == pytest.approx(fast.estimate)
    assert (generic.low, generic.high) == pytest.approx((fast.low, fast.high))


def test_bootstrap_is_seeded_and_needs_a_generator():
    clusters, x = _clustered_rate(np.random.default_rng(2), k=10, m=3, rate=0.3)
    a = bootstrap_ratio_ci(x, np.ones_like(x), clusters, rng=np.random.default_rng(11))
    b = bootstrap_ratio_ci(x, np.ones_like(x), clusters, rng=np.random.default_rng(11))
    assert a == b and a.B == 2000 and a.n_clusters == 10
    with pytest.raises(TypeError, match="Generator"):
        bootstrap_ci(lambda _, v: v.mean(), clusters, x, rng=None)
    with pytest.raises(TypeError, match="Generator"):
        bootstrap_ratio_ci(x, np.ones_like(x), clusters, rng=11)


def test_bootstrap_constant_clusters_and_undefined_replicates():
    """Every environment at rate 1/2 -> every replicate is 1/2: interval [1/2, 1/2].
    FPR with invalid answers in env a only: a replicate drawing b twice (probability 1/4) has no
    invalid answer, so its FPR is NaN and is left out and counted; every other replicate holds one
    or two copies of a, whose FPR is 1/2, so the interval is [1/2, 1/2]."""
    ci = bootstrap_ratio_ci([1, 0, 1, 0], [1, 1, 1, 1], ["a", "a", "b", "b"], rng=np.random.default_rng(0))
    assert (ci.estimate, ci.low, ci.high, ci.n_undefined) == (0.5, 0.5, 0.5, 0)
    fpr = bootstrap_ci(lambda _, a, v: metrics.fpr(a, v).value, ["a", "a", "b"], [1.0, 0.0, 1.0],
                       ["invalid", "invalid", "valid"], rng=np.random.default_rng(0), B=2000)
    assert fpr.estimate == 0.5
    assert 400 < fpr.n_undefined < 600  # about B/4 = 500
    assert (fpr.low, fpr.high) == (0.5, 0.5)


def test_across_seeds_t_interval():
    """Values .2, .4, .6: mean .4, sd .2, se = .2/sqrt(3) = .11547; t(.975, 2) = 4.30265
    -> half-width .49683, interval (-.09683, .89683)."""
    s = across_seeds([0.2, 0.4, 0.6])
    assert (s.mean, s.sd, s.n) == (pytest.approx(0.4), pytest.approx(0.2), 3)
    assert (s.low, s.high) == pytest.approx((-0.09683, 0.89683), abs=1e-5)


def test_across_seeds_edge_cases():
    """One finite seed: a mean, no interval. A NaN seed is left out and counted. Equal seeds:
    zero-width interval."""
    one = across_seeds([0.3, float("nan")])
    assert one.mean == 0.3 and math.isnan(one.low) and math.isnan(one.high)
    assert (one.n, one.n_missing) == (1, 1)
    same = across_seeds([0.5, 0.5, 0.5])
    assert (same.low, same.high) == (0.5, 0.5)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        # 5 discordant pairs, all favouring A: p = 2 * (1/2)^5 = 1/16
        pytest.param([1, 1, 1, 1, 1, 0, 1], [0, 0, 0, 0, 0, 0, 1], McNemar(5, 0, 7, 0.0625), id="one-sided-5"),
        # a_only 1, b_only 3: p = 2 * P(X <= 1 | n=4) = 2 * (1 + 4)/16 = 10/16
        pytest.param([1, 0, 0, 0, 1], [0, 1, 1, 1, 1], McNemar(1, 3, 5, 0.625), id="1-vs-3"),
        # no discordant pair: no evidence of a difference
        pytest.param([1, 0, 1], [1, 0, 1], McNemar(0, 0, 3, 1.0), id="concordant"),
    ],
)
def test_mcnemar_exact(a, b, expected):
    assert mcnemar_exact(a, b) == expected


def test_mcnemar_needs_pairs():
    with pytest.raises(ValueError, match="differ in length"):
        mcnemar_exact([True, False], [True])


def test_bonferroni():
    """m = 3: .01 -> .03, .02 -> .06, .5 -> 1.5 capped at 1."""
    np.testing.assert_allclose(bonferroni([0.01, 0.02, 0.5]), [0.03, 0.06, 1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bonferroni([0.5, 1.2])


def test_bootstrap_ci_returns_dataclass_with_estimate_on_original_clusters():
    """The estimate is the statistic on the data as given: mean of 1, 0, 1 = 2/3."""
    ci = bootstrap_ci(lambda _, v: v.mean(), ["a", "b", "c"], [1.0, 0.0, 1.0],
                      rng=np.random.default_rng(0), B=1000)
    assert isinstance(ci, BootstrapCI) and ci.estimate == pytest.approx(2 / 3)
    assert 0.0 <= ci.low <= ci.estimate <= ci.high <= 1.0
