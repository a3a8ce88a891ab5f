"""Intervals and tests for the audit (docs/method.md §Statistics): pure functions, randomness only from the caller.

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
- `cluster_t_ci` is the interval of a mean over environments (and of any ratio of per-environment
  sums, by its linearisation): estimate ± t_{k−1} · SE, SE² = Σ_e u_e² / (k (k − 1)) with
  u_e = (N_e − r D_e) / D̄. With D_e = 1 it is the textbook t interval of the environments' mean.
  Used for the unbounded means over environments (the preference probe, the valid-rate drift):
  at k = 6–45 environments the percentile bootstrap's one-sided false-detection rate at no effect is
  6.4% to 2.9% against 2.5% nominal (its spread is the plug-in sd, ddof 0, and its quantiles are
  z's, not t's); the t interval holds 2.5% (`python -m audit.power --coverage`). `cluster_t_diff`
  is the same for the difference of two such ratios on the same environments.
- `share_t_ci` is that t interval for a mean of per-environment shares (the probe's accuracy), cut to
  [0, 1]. When every environment's share is 0 (or every one is 1, as a trained policy often gives)
  the environments' spread is 0 and the t interval collapses to a point, claiming certainty from a
  dozen environments; there the Wilson interval at n = the number of environments stands in (each
  environment one observation: the pairs inside one are not independent, and with no spread their
  correlation cannot be estimated).
  The percentile bootstrap stays for bounded rates and AUROCs, often at 0 or 1 here, where a
  symmetric interval leaves [0, 1], and for statistics with no closed-form SE (Youden J, IBE).
- `cluster_wilson` is the calibration gate's interval for a rate of answers clustered by
  environment (an oracle's accept-invalid and reject-valid rates): a Wilson interval at the
  effective sample size n / deff, deff = the cluster-robust variance of the ratio (the
  linearisation above) over the binomial variance, floored at 1 (Korn & Graubard 1998). Neither the
  t interval nor the percentile bootstrap suits these rates: they sit at or near 0 (3 of 180 fresh
  invalid answers accepted), where every cluster's influence is 0 and both collapse to [0, 0],
  while ~10 answers of one environment are not 10 independent answers, which a plain Wilson
  interval assumes.
- `across_seeds` summarises one number per seed with a Student-t interval: seeds are few (3–5),
  so the normal quantile would be too narrow. `seeds_and_environments` adds the environment
  sampling that every seed shares (the audited environments are the same for every seed, so the
  spread over seeds cannot see it); `paired_contrast` compares two rewards on the same environments
  with both sources of variation.
- `paired_bootstrap_diff` compares two rewards on the same environments: the difference of two
  rates, each a ratio of per-environment sums, with both rewards resampled by the same draw of
  environments (the environment is the cluster, so (environment, sample) pairs are never treated
  as independent); `mcnemar_exact` is the exact test for paired binary outcomes (one per cluster)
  and `bonferroni` corrects for several comparisons.
- B below `MIN_B` is refused: with a few hundred resamples the 2.5% and 97.5% ends move visibly
  from one seed to the next.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps

MIN_B = 1000
DEFAULT_B = 2000  # the audit's resamples per interval (docs/method.md §Intervals over environments); conf/audit.yaml repeats it


def check_B(B: int) -> None:
    if B < MIN_B:
        raise ValueError(f"bootstrap B={B}: at least {MIN_B} resamples are needed ({DEFAULT_B} by default)")


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float  # the statistic on the data as given
    low: float
    high: float
    B: int  # 0 for a t interval
    n_clusters: int
    n_undefined: int  # replicates whose statistic was NaN (e.g. no invalid answer drawn), left out
    se: float = float("nan")  # the standard error: sd of the defined replicates, or the t interval's
    df: float = float("nan")  # the t interval's degrees of freedom (NaN for a bootstrap)
    method: str = "percentile"  # percentile | t


Interval = BootstrapCI


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
    se = float(finite.std(ddof=1)) if len(finite) > 1 else float("nan")
    return BootstrapCI(float(estimate), float(low), float(high), B, k, B - len(finite), se)


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


def _t_quantile(alpha: float, df: float) -> float:
    return float(sps.t.ppf(1 - alpha / 2, df))


def _per_cluster(clusters: Sequence, *columns: Sequence[float]) -> tuple[list[np.ndarray], int]:
    codes, k = _cluster_codes(clusters)
    cols = [np.asarray(c, dtype=float) for c in columns]
    if any(len(c) != len(codes) for c in cols):
        raise ValueError(f"lengths differ: {[len(c) for c in cols]} and {len(codes)} cluster labels")
    return [np.bincount(codes, weights=c, minlength=k) for c in cols], k


def _linearised(num: np.ndarray, den: np.ndarray) -> tuple[float, np.ndarray]:
    """r = ΣN/ΣD and each cluster's influence u_e = (N_e − r D_e)/D̄ (NaN, [] when ΣD = 0)."""
    total = den.sum()
    if total <= 0:
        return float("nan"), np.full(len(num), np.nan)
    r = num.sum() / total
    return float(r), (num - r * den) / (total / len(den))


def _t_from_influence(estimate: float, u: np.ndarray, k: int, alpha: float) -> BootstrapCI:
    if not np.isfinite(estimate) or k < 2 or not np.isfinite(u).all():
        nan = float("nan")
        return BootstrapCI(estimate, nan, nan, 0, k, 0, nan, nan, "t")
    se = float(np.sqrt((u ** 2).sum() / (k * (k - 1))))
    half = _t_quantile(alpha, k - 1) * se
    return BootstrapCI(estimate, estimate - half, estimate + half, 0, k, 0, se, float(k - 1), "t")


def cluster_t_ci(numerators: Sequence[float], denominators: Sequence[float], clusters: Sequence,
                 *, alpha: float = 0.05) -> BootstrapCI:
    """t interval of Σ numerators / Σ denominators over k clusters (module docstring); no interval
    (NaN ends) with fewer than 2 clusters or no denominator."""
    (num, den), k = _per_cluster(clusters, numerators, denominators)
    if k == 0:
        raise ValueError("cluster_t_ci needs at least one cluster")
    r, u = _linearised(num, den)
    return _t_from_influence(r, u, k, alpha)


@dataclass(frozen=True)
class RateCI:
    rate: float  # Σk / Σn; NaN without answers
    low: float
    high: float
    n: int  # answers
    clusters: int
    deff: float  # design effect: cluster-robust over binomial variance, >= 1


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at p = 0 (1) the lower (upper) end is exactly p; rounding would leave it a hair inside and the
    # interval would exclude its own estimate
    return (0.0 if p == 0 else max(0.0, centre - half)), (1.0 if p == 1 else min(1.0, centre + half))


def cluster_wilson(successes: Sequence[float], clusters: Sequence, *, alpha: float = 0.05) -> RateCI:
    """Wilson interval of the share of 1s in `successes` (0/1 per answer) at the effective sample size
    n / deff over the clusters (module docstring)."""
    (num, den), k = _per_cluster(clusters, successes, np.ones(len(successes)))
    n = int(den.sum())
    nan = float("nan")
    if n == 0:
        return RateCI(nan, nan, nan, 0, k, nan)
    p, u = _linearised(num, den)
    deff = 1.0
    if k >= 2 and 0 < p < 1:
        robust = float((u ** 2).sum() / (k * (k - 1)))
        deff = max(1.0, robust / (p * (1 - p) / n))
    low, high = _wilson(p, n / deff, float(sps.norm.ppf(1 - alpha / 2)))
    return RateCI(float(p), low, high, n, k, deff)


def within(low: float, high: float, range_: tuple[float, float] | None) -> tuple[float, float]:
    """An interval cut to a metric's range (`audit.metric_table` bounds): a t interval on a few
    environments or seeds of a share or a difference of shares can reach past its range, and the cut
    changes no coverage (the true value is inside). NaN ends stay NaN."""
    if range_ is None or not (math.isfinite(low) and math.isfinite(high)):
        return low, high
    lo, hi = range_
    # both ends into the range: an interval wholly outside it becomes its nearest edge, never low > high
    return min(max(lo, low), hi), max(min(hi, high), lo)


def share_t_ci(shares: Sequence[float], clusters: Sequence, *, alpha: float = 0.05) -> BootstrapCI:
    """t interval of the mean of one share in [0, 1] per cluster, cut to [0, 1]; the Wilson interval
    at n = clusters when every share is 0 or every one is 1 (module docstring); NaN ends below 2
    clusters. Equal shares inside (0, 1) keep the point: they come from construction, not chance
    (π_t = π_0 ties every pair, so the accuracy at t = 0 is 0.5 for any environments drawn)."""
    ci = cluster_t_ci(shares, np.ones(len(shares)), clusters, alpha=alpha)
    if not (math.isfinite(ci.low) and math.isfinite(ci.high)):
        return ci
    if np.ptp(np.asarray(shares, float)) == 0 and ci.estimate in (0.0, 1.0):
        z = float(sps.norm.ppf(1 - alpha / 2))
        low, high = _wilson(ci.estimate, ci.n_clusters, z)
        # its SE, for what combines seeds (audit.contrasts), is the Wilson interval's normal equivalent
        return replace(ci, low=low, high=high, se=(high - low) / (2 * z), method="wilson")
    return replace(ci, low=max(0.0, ci.low), high=min(1.0, ci.high))


def cluster_t_diff(a_num: Sequence[float], a_den: Sequence[float], b_num: Sequence[float],
                   b_den: Sequence[float], clusters: Sequence, *, alpha: float = 0.05) -> BootstrapCI:
    """t interval of ΣA_num/ΣA_den − ΣB_num/ΣB_den on the same clusters: the influence of a
    cluster is its influence on A minus that on B, so what the clusters share cancels."""
    (an, ad, bn, bd), k = _per_cluster(clusters, a_num, a_den, b_num, b_den)
    if k == 0:
        raise ValueError("cluster_t_diff needs at least one cluster")
    ra, ua = _linearised(an, ad)
    rb, ub = _linearised(bn, bd)
    return _t_from_influence(ra - rb, ua - ub, k, alpha)


def satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """Degrees of freedom of a sum of variance estimates v_i with df_i: (Σ v_i)² / Σ v_i²/df_i."""
    num = sum(v for v, _ in parts) ** 2
    den = sum(v ** 2 / d for v, d in parts if v > 0 and math.isfinite(d))
    return float(num / den) if den > 0 else float("inf")


@dataclass(frozen=True)
class Combined:
    estimate: float
    low: float
    high: float
    se: float
    df: float
    pvalue: float  # two-sided, of estimate = 0
    n_clusters: int  # environments
    n_seeds: tuple[int, ...]  # seeds of each side read (one entry for a single reward)


def _combined(estimate: float, parts: Sequence[tuple[float, float]], k: int, seeds: tuple[int, ...],
              alpha: float) -> Combined:
    var = sum(v for v, _ in parts)
    if not np.isfinite(estimate) or not np.isfinite(var):
        nan = float("nan")
        return Combined(estimate, nan, nan, nan, nan, nan, k, seeds)
    df = satterthwaite(parts)
    se = float(np.sqrt(var))
    half = _t_quantile(alpha, df) * se
    p = float(2 * sps.t.sf(abs(estimate) / se, df)) if se > 0 else (1.0 if estimate == 0 else 0.0)
    return Combined(float(estimate), estimate - half, estimate + half, se, df, p, k, seeds)


def seeds_and_environments(values: Sequence[float], ses: Sequence[float], environments: int | None,
                           *, alpha: float = 0.05) -> Combined:
    """Mean over seeds of one reward, with an interval for both seeds and environments.

    The audited environments are the same for every seed, so the spread of the seeds' values
    sd²/S holds seed-to-seed (training) variation but none of the environment sampling they share;
    the mean of the seeds' own environment-level SE² holds that. Var = mean(SE_s²) + sd²/S, a t
    interval with Satterthwaite's df from (k − 1, S − 1). Under the crossed model value_se = μ +
    a_e + v_s + w_se it overstates the variance by σ_w²/k, so it errs wide; a bootstrap over 3–5
    seeds would have only 10–126 distinct resamples. Seeds whose value or SE is NaN are left out;
    fewer than 2 seeds: no interval (the seed's own interval says what one seed can). Environments
    None: not known, the SE part taken as exact (df ∞)."""
    v, s = np.asarray(values, dtype=float), np.asarray(ses, dtype=float)
    keep = np.isfinite(v) & np.isfinite(s)
    v, s = v[keep], s[keep]
    n = len(v)
    k = 0 if environments is None else environments
    if n < 2 or (environments is not None and environments < 2):
        nan = float("nan")
        return Combined(float(v.mean()) if n else nan, nan, nan, nan, nan, nan, k, (n,))
    env_df = float("inf") if environments is None else environments - 1
    parts = [(float((s ** 2).mean()), env_df), (float(v.var(ddof=1)) / n, n - 1)]
    return _combined(float(v.mean()), parts, k, (n,), alpha)


def paired_contrast(a: np.ndarray, b: np.ndarray, *, alpha: float = 0.05) -> Combined:
    """Reward A minus reward B on the same k environments: `a` is seeds_A × k, `b` seeds_B × k
    (per-environment values, environments in the same column order, no NaN).

    d_e = mean over A's seeds − mean over B's seeds on environment e; the estimate is mean_e d_e.
    What the environments share (their difficulty) cancels in d_e; its variance over environments
    var_e(d_e)/k (df k − 1) holds the rest of the environment sampling; the seeds' own main effects
    are constant over environments, so they are added from the spread of each side's seed means,
    var_s/S_A + var_s/S_B (df S − 1; a side with one seed adds nothing and is named in `n_seeds`)."""
    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"paired_contrast: {a.shape[1]} and {b.shape[1]} environments")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired_contrast: NaN among the per-environment values; leave those environments out")
    k = a.shape[1]
    d = a.mean(axis=0) - b.mean(axis=0)
    if k < 2:
        nan = float("nan")
        return Combined(float(d.mean()) if k else nan, nan, nan, nan, nan, nan, k, (len(a), len(b)))
    parts = [(float(d.var(ddof=1)) / k, k - 1)]
    for side in (a, b):
        if len(side) > 1:
            parts.append((float(side.mean(axis=1).var(ddof=1)) / len(side), len(side) - 1))
    return _combined(float(d.mean()), parts, k, (len(a), len(b)), alpha)


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
