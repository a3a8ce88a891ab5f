"""Intervals and tests for the audit (SPEC §6): pure functions, randomness only from the caller.

- `bootstrap_ci` resamples environments (clusters) with replacement, B = `DEFAULT_B` by default, and
  returns a percentile interval. Answers of one environment share its difficulty, so resampling
  answers independently would understate the uncertainty; the cluster is the unit.
  Percentile rather than normal or BCa: the audit's statistics are rates and AUROCs bounded in
  [0, 1] and often near an edge, where a normal interval leaves the range; the percentile interval
  stays inside it and is invariant to monotone transforms, and BCa's jackknife over a few dozen
  clusters is itself noisy. (The calibration test checks its coverage on a known rate.)
- `bootstrap_ratio_ci` is the same bootstrap for statistics that are a ratio of per-cluster sums
  (every rate of `audit.metrics` and the within-environment AUROC): with the same Generator state
  it draws the same clusters as `bootstrap_ci` and gives the same interval, vectorised.
- `across_seeds` summarises one number per seed with a Student-t interval: seeds are few (3–5),
  so the normal quantile would be too narrow.
- `paired_bootstrap_diff` compares two rewards on the same environments: the difference of two
  rates, each a ratio of per-environment sums, with both rewards resampled by the same draw of
  environments (the environment is the cluster, so (environment, sample) pairs are never treated
  as independent); `mcnemar_exact` is the exact test for paired binary outcomes (one per cluster)
  and `bonferroni` corrects for several comparisons.
- B below `MIN_B` is refused: with a few hundred resamples the 2.5% and 97.5% ends move visibly
  from one seed to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

MIN_B = 1000
DEFAULT_B = 2000  # the audit's resamples per interval (SPEC §6); conf/audit.yaml repeats it


def check_B(B: int) -> None:
    if B < MIN_B:
        raise ValueError(f"bootstrap B={B}: at least {MIN_B} resamples are needed ({DEFAULT_B} by default)")


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float  # the statistic on the data as given
    low: float
    high: float
    B: int
    n_clusters: int
    n_undefined: int  # replicates whose statistic was NaN (e.g. no invalid answer drawn), left out


@dataclass(frozen=True)
class SeedSummary:
    mean: float
    low: float  # NaN with fewer than two seeds: one seed says nothing about seed variance
    high: float
    sd: float
    n: int  # finite values used
    n_missing: int  # NaN values left out


@dataclass(frozen=True)
class McNemar:
    a_only: int  # pairs where A succeeds and B fails
    b_only: int
    n: int
    pvalue: float  # exact two-sided: binomial test of a_only out of a_only + b_only at ½


def _cluster_codes(clusters: Sequence) -> tuple[np.ndarray, int]:
    _, codes = np.unique(np.asarray(clusters).astype(str), return_inverse=True)
    return codes.ravel(), int(codes.max()) + 1 if len(codes) else 0


def _draws(rng: np.random.Generator, B: int, k: int) -> np.ndarray:
    return rng.integers(0, k, size=(B, k))


def _percentile(reps: np.ndarray, estimate: float, B: int, k: int, alpha: float) -> BootstrapCI:
    finite = reps[np.isfinite(reps)]
    if not np.isfinite(estimate) or len(finite) == 0:
        return BootstrapCI(estimate, float("nan"), float("nan"), B, k, B - len(finite))
    low, high = np.quantile(finite, [alpha / 2, 1 - alpha / 2])
    return BootstrapCI(float(estimate), float(low), float(high), B, k, B - len(finite))


def bootstrap_ci(statistic: Callable[..., float], clusters: Sequence, *data: Sequence,
                 rng: np.random.Generator, B: int = DEFAULT_B, alpha: float = 0.05) -> BootstrapCI:
    """Percentile interval of `statistic` from B resamples of the clusters with replacement.

    `statistic(cluster_labels, *data)` gets the rows of the drawn clusters. In a replicate the
    labels are the draw positions 0..k−1, so a cluster drawn twice counts as two clusters (a
    within-environment AUROC then pairs answers within each copy, never across copies); on the
    original data they are the clusters' codes. A mean, for instance: `lambda _, x: np.mean(x)`.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError("bootstrap_ci needs an explicit numpy.random.Generator")
    check_B(B)
    codes, k = _cluster_codes(clusters)
    arrays = [np.asarray(d) for d in data]
    if any(len(a) != len(codes) for a in arrays):
        raise ValueError(f"data lengths {[len(a) for a in arrays]} differ from {len(codes)} clusters labels")
    if k == 0:
        raise ValueError("bootstrap_ci needs at least one cluster")
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=k)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    estimate = float(statistic(codes, *arrays))
    reps = np.empty(B)
    for b, draw in enumerate(_draws(rng, B, k)):
        n = sizes[draw]
        # rows of the drawn clusters, laid end to end without a Python loop over clusters
        offsets = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
        rows = order[np.repeat(starts[draw], n) + offsets]
        labels = np.repeat(np.arange(k), n)
        reps[b] = statistic(labels, *(a[rows] for a in arrays))
    return _percentile(reps, estimate, B, k, alpha)


def bootstrap_ratio_ci(numerators: Sequence[float], denominators: Sequence[float],
                       clusters: Sequence, *, rng: np.random.Generator, B: int = DEFAULT_B,
                       alpha: float = 0.05) -> BootstrapCI:
    """`bootstrap_ci` for statistic = Σ numerators / Σ denominators, per row (or per pair).

    A rate is (hits, 1) per answer; a within-environment AUROC is (wins + ½ ties, pairs) per
    environment. Each replicate's sums are the draw counts times the per-cluster sums.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError("bootstrap_ratio_ci needs an explicit numpy.random.Generator")
    check_B(B)
    codes, k = _cluster_codes(clusters)
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    if not len(num) == len(den) == len(codes):
        raise ValueError(f"lengths differ: {len(num)} numerators, {len(den)} denominators, "
                         f"{len(codes)} cluster labels")
    if k == 0:
        raise ValueError("bootstrap_ratio_ci needs at least one cluster")
    cnum = np.bincount(codes, weights=num, minlength=k)
    cden = np.bincount(codes, weights=den, minlength=k)
    draws = _draws(rng, B, k)
    counts = np.bincount((draws + k * np.arange(B)[:, None]).ravel(), minlength=B * k)
    counts = counts.reshape(B, k).astype(float)
    rep_den = counts @ cden
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = np.where(rep_den > 0, (counts @ cnum) / rep_den, np.nan)
    total = cden.sum()
    estimate = float(cnum.sum() / total) if total > 0 else float("nan")
    return _percentile(reps, estimate, B, k, alpha)


def _draw_counts(rng: np.random.Generator, B: int, k: int) -> np.ndarray:
    draws = _draws(rng, B, k)
    counts = np.bincount((draws + k * np.arange(B)[:, None]).ravel(), minlength=B * k)
    return counts.reshape(B, k).astype(float)


@dataclass(frozen=True)
class PairedDiff:
    estimate: float  # rate of A − rate of B on the data as given
    low: float
    high: float
    pvalue: float  # two-sided: 2 · min(P*(d ≤ 0), P*(d ≥ 0)) over the defined replicates, capped at 1
    B: int
    n_clusters: int
    n_undefined: int


def paired_bootstrap_diff(a_num: Sequence[float], a_den: Sequence[float], b_num: Sequence[float],
                          b_den: Sequence[float], clusters: Sequence, *, rng: np.random.Generator,
                          B: int = DEFAULT_B, alpha: float = 0.05) -> PairedDiff:
    """Σa_num/Σa_den − Σb_num/Σb_den with one draw of clusters shared by A and B per replicate."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError("paired_bootstrap_diff needs an explicit numpy.random.Generator")
    check_B(B)
    codes, k = _cluster_codes(clusters)
    cols = [np.asarray(x, dtype=float) for x in (a_num, a_den, b_num, b_den)]
    if any(len(c) != len(codes) for c in cols):
        raise ValueError(f"lengths differ: {[len(c) for c in cols]} and {len(codes)} cluster labels")
    if k == 0:
        raise ValueError("paired_bootstrap_diff needs at least one cluster")
    per = [np.bincount(codes, weights=c, minlength=k) for c in cols]
    counts = _draw_counts(rng, B, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        ra = np.where(counts @ per[1] > 0, (counts @ per[0]) / (counts @ per[1]), np.nan)
        rb = np.where(counts @ per[3] > 0, (counts @ per[2]) / (counts @ per[3]), np.nan)
    reps = ra - rb
    est = (per[0].sum() / per[1].sum() - per[2].sum() / per[3].sum()
           if per[1].sum() > 0 and per[3].sum() > 0 else float("nan"))
    ci = _percentile(reps, float(est), B, k, alpha)
    finite = reps[np.isfinite(reps)]
    p = (min(1.0, 2 * min((finite <= 0).mean(), (finite >= 0).mean()))
         if len(finite) and np.isfinite(est) else float("nan"))
    return PairedDiff(ci.estimate, ci.low, ci.high, float(p), B, k, ci.n_undefined)


def across_seeds(values: Sequence[float], confidence: float = 0.95) -> SeedSummary:
    """Mean over seeds and the t interval mean ± t_{(1+c)/2, n−1} · sd / √n (sd with ddof = 1)."""
    v = np.asarray(values, dtype=float)
    finite = v[np.isfinite(v)]
    n, missing = len(finite), len(v) - len(finite)
    if n == 0:
        nan = float("nan")
        return SeedSummary(nan, nan, nan, nan, 0, missing)
    mean = float(finite.mean())
    if n == 1:
        return SeedSummary(mean, float("nan"), float("nan"), float("nan"), 1, missing)
    sd = float(finite.std(ddof=1))
    half = float(sps.t.ppf((1 + confidence) / 2, n - 1)) * sd / np.sqrt(n)
    return SeedSummary(mean, mean - half, mean + half, sd, n, missing)


def mcnemar_exact(a_success: Sequence[bool], b_success: Sequence[bool]) -> McNemar:
    """Exact McNemar test on paired outcomes: under H0 a discordant pair favours A with
    probability ½, so p = two-sided binomial test of a_only successes in a_only + b_only trials
    (p = 1 with no discordant pair)."""
    a = np.asarray(a_success, dtype=bool)
    b = np.asarray(b_success, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes differ in length: {len(a)} and {len(b)}")
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    discordant = a_only + b_only
    p = sps.binomtest(a_only, discordant, 0.5).pvalue if discordant else 1.0
    return McNemar(a_only, b_only, len(a), float(p))


def bonferroni(pvalues: Sequence[float]) -> np.ndarray:
    """Bonferroni-adjusted p-values: min(1, m · p_i) for m tests."""
    p = np.asarray(pvalues, dtype=float)
    if ((p < 0) | (p > 1)).any():
        raise ValueError(f"p-values must lie in [0, 1]; got {p.tolist()}")
    return np.minimum(1.0, p * len(p))
