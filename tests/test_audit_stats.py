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
    cluster_t_ci,
    cluster_t_diff,
    mcnemar_exact,
    paired_contrast,
    satterthwaite,
    seeds_and_environments,
    share_t_ci,
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


def test_cluster_t_ci_of_a_mean_is_the_textbook_t_interval():
    """Values 1, 2, 3, 6 (one per environment): mean 3, sd √(14/3) = 2.16025, SE 1.08012,
    t(.975, 3) = 3.18245 -> half-width 3.43743, interval (-0.43743, 6.43743)."""
    ci = cluster_t_ci([1, 2, 3, 6], [1, 1, 1, 1], list("abcd"))
    assert (ci.estimate, ci.df, ci.method, ci.B) == (3.0, 3.0, "t", 0)
    assert ci.se == pytest.approx(1.08012, abs=1e-5)
    assert (ci.low, ci.high) == pytest.approx((-0.43743, 6.43743), abs=1e-5)


def test_share_t_ci_stays_in_0_1_and_does_not_collapse_when_no_environment_differs():
    """12 environments all at 0: the t interval would be [0, 0]; the Wilson interval at n = 12,
    z = 1.959964, is [0, z²/(12 + z²)] = [0, 3.841459/15.841459] = [0, 0.242494], and all at 1 its
    mirror. Shares .1, .2, .9: mean .4, sd .435890, SE .251661, t(.975, 2) 4.302653, half 1.082810,
    so (-0.682810, 1.482810), cut to (0, 1). Shares .2, .3, .4, .5 lie inside: the t interval as is."""
    zero = share_t_ci([0.0] * 12, range(12))
    assert (zero.estimate, zero.low, zero.method) == (0.0, 0.0, "wilson")  # exactly 0: it holds its estimate
    assert zero.high == pytest.approx(0.242494, abs=1e-6)
    assert zero.se == pytest.approx(0.242494 / (2 * 1.959964), abs=1e-6)  # its normal-equivalent SE
    tie = share_t_ci([0.5] * 12, range(12))  # π_t = π_0 ties every pair: 0.5 by construction, a point
    assert (tie.low, tie.high, tie.method) == (0.5, 0.5, "t")
    one = share_t_ci([1.0] * 12, range(12))
    assert one.high == 1.0 and one.low == pytest.approx(1 - 0.242494, abs=1e-6)
    cut = share_t_ci([0.1, 0.2, 0.9], list("abc"))
    assert cut.se == pytest.approx(0.251661, abs=1e-6) and (cut.low, cut.high) == (0.0, 1.0)
    inside = share_t_ci([0.2, 0.3, 0.4, 0.5], list("abcd"))
    plain = cluster_t_ci([0.2, 0.3, 0.4, 0.5], [1] * 4, list("abcd"))
    assert (inside.low, inside.high, inside.method) == (plain.low, plain.high, "t")
    assert math.isnan(share_t_ci([0.0], ["a"]).low)  # one environment: no interval, not a Wilson one


def test_cluster_t_ci_of_a_ratio_uses_the_linearisation():
    """N = 1, 2, 3 over D = 1, 1, 2: r = 6/4 = 1.5, D̄ = 4/3, u = -0.375, 0.375, 0;
    SE² = 0.28125 / (3 · 2) = 0.046875, SE 0.216506; t(.975, 2) = 4.302653 -> ± 0.931552."""
    ci = cluster_t_ci([1, 2, 3], [1, 1, 2], list("abc"))
    assert ci.estimate == 1.5 and ci.se == pytest.approx(0.216506, abs=1e-6)
    assert (ci.low, ci.high) == pytest.approx((1.5 - 0.931552, 1.5 + 0.931552), abs=1e-5)
    one = cluster_t_ci([1.0], [1.0], ["a"])
    assert one.estimate == 1.0 and math.isnan(one.low) and math.isnan(one.high)


def test_cluster_t_diff_cancels_what_the_clusters_share():
    """A = B + 1 on every environment: the difference is 1 with zero width, however the
    environments differ; against a constant 0 it is the t interval of A alone."""
    a, b = [3.0, 7.0, 1.0], [2.0, 6.0, 0.0]
    same = cluster_t_diff(a, [1, 1, 1], b, [1, 1, 1], list("xyz"))
    assert (same.estimate, same.low, same.high) == (1.0, 1.0, 1.0)
    vs0 = cluster_t_diff([1, 2, 3, 6], [1] * 4, [0] * 4, [1] * 4, list("abcd"))
    assert (vs0.low, vs0.high) == pytest.approx((-0.43743, 6.43743), abs=1e-5)


def test_t_interval_holds_its_level_where_the_percentile_bootstrap_does_not():
    """k = 6 normal environment means, no effect, 400 data sets: the t interval's one-sided false
    detections stay near 2.5% and under the percentile bootstrap's (6.4% at this k)."""
    rng = np.random.default_rng(5)
    t_hits = boot_hits = 0
    for _ in range(400):
        x = rng.standard_normal(6)
        t_hits += cluster_t_ci(x, np.ones(6), range(6)).high < 0
        boot_hits += bootstrap_ratio_ci(x, np.ones(6), range(6), rng=rng, B=1000).high < 0
    assert t_hits / 400 < 0.045 and t_hits < boot_hits


def test_seeds_and_environments_adds_the_shared_environment_sampling():
    """Seeds .2, .4, .6, each with environment SE .1, 12 environments: var = .1² + .2²/3 =
    .023333, SE .152753; df = .023333² / (.01²/11 + .013333²/2) = 5.5567; t(.975, 5.5567) = 2.4946
    -> .4 ± .38106. The t interval over seeds alone is ± .49683 at df 2 but SE .11547 only."""
    c = seeds_and_environments([0.2, 0.4, 0.6], [0.1, 0.1, 0.1], 12)
    assert c.estimate == pytest.approx(0.4) and c.se == pytest.approx(0.152753, abs=1e-6)
    assert c.df == pytest.approx(5.5567, abs=1e-4)
    assert (c.low, c.high) == pytest.approx((0.01888, 0.78112), abs=1e-5)
    one = seeds_and_environments([0.3, float("nan")], [0.1, 0.1], 12)
    assert one.estimate == 0.3 and math.isnan(one.low) and one.n_seeds == (1,)


def test_paired_contrast_by_hand():
    """A (2 seeds) on 3 environments: means 1.5, 2.5, 3.5; B (1 seed): 0, 0, 2. d = 1.5, 2.5, 1.5,
    mean 1.83333; var_e(d)/3 = .33333/3 = .11111; A's seed means 2, 3: var .5 / 2 = .25; B one seed
    adds nothing. SE √.36111 = .600925; df = .36111² / (.11111²/2 + .25²/1) = 1.89888."""
    c = paired_contrast(np.array([[1.0, 2, 3], [2, 3, 4]]), np.array([[0.0, 0, 2]]))
    assert c.estimate == pytest.approx(1.833333, abs=1e-6) and c.se == pytest.approx(0.600925, abs=1e-6)
    assert c.df == pytest.approx(1.89888, abs=1e-5) and c.n_seeds == (2, 1) and c.n_clusters == 3
    with pytest.raises(ValueError, match="environments"):
        paired_contrast(np.zeros((1, 3)), np.zeros((1, 2)))


def test_satterthwaite():
    """One part: its own df. Two equal parts with df 4 and 4: (2v)² / (2 v²/4) = 8."""
    assert satterthwaite([(2.0, 7)]) == pytest.approx(7)
    assert satterthwaite([(1.0, 4), (1.0, 4)]) == pytest.approx(8)
