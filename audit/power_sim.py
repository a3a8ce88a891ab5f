"""Power of the audit by simulation: for a design, how likely the audit's own interval detects a
given fall, and the smallest fall it detects with 80% probability (`python -m audit.power`).

Detection: the audit's (1 − α) interval lies entirely below 0. Both metrics sized here are means
over environments and the audit gives them the t interval over environments
(`audit.stats.cluster_t_ci` / `cluster_t_diff`): mean ± t_{k−1, 1−α/2} · sd/√k. Power = P(detection),
estimated as the share of `sims` simulated data sets that detect (its Monte Carlo standard error is
√(p(1 − p)/sims)). At no effect it is ≈ α/2: the test is one-sided (`coverage` checks it, and shows
the percentile bootstrap the audit used before, which falls below 0 too often at a dozen
environments).

Valid-rate drift (valid rate at t − at 0, one kind of environment), k environments, n answers each
at t = 0 and at t:
    p_e ~ Beta(p0 (1 − ρ)/ρ, (1 − p0)(1 − ρ)/ρ)   mean p0, intra-cluster correlation ρ (p_e = p0 at ρ = 0)
    p_e,t = p_e (1 − δ/p0)                         every environment loses the same share; E drift = −δ
    v_e,0 ~ Bin(n, p_e),  v_e,t ~ Bin(n, p_e,t)    fresh samples at each t, independent given p_e
    statistic Σ v_e,t / Σ n_e − Σ v_e,0 / Σ n_e = mean_e of (v_e,t − v_e,0)/n (equal n), its t
    interval over environments — `audit.estimators.valid_rate_drift`.
    Normal approximation: SE² = V/k with V = (δ/p0)² ρ p0 q0 + (E[p_e q_e] + E[p_e,t q_e,t])/n, which at
    ρ = 0 is (p0 q0 + p1 q1)/(k n), p1 = p0 − δ; power ≈ Φ(δ/SE − z_{1−α/2}).

Preference probe `pref_margin` (π_0 gives Δℓ = 0, so at t = 0 it is exactly 0 and a fall is a margin
below 0). Per environment m_valid valid and m_invalid invalid labelled answers; the probe is
deterministic given the checkpoint, so the noise is which environments and which answers:
    Δℓ(a) = μ_e ± ε_a,  μ_e = −δ + σ_env z_e,  ε_a ~ N(0, σ_pair²/2)   (one pair's difference has sd σ_pair)
    margin_e = mean over the m_valid × m_invalid pairs of Δℓ(valid) − Δℓ(invalid)
             ~ N(−δ, τ²),  τ² = σ_env² + σ_pair² (1/m_valid + 1/m_invalid)/2
    (the pairs share answers, so they are not m_valid · m_invalid independent draws)
    statistic: mean over environments of margin_e, its t interval. Power depends on δ/τ and k only
    (a noncentral t); normal approximation SE = τ/√k.

Searches use common random numbers: the same uniforms and environment rates at every δ, so the
estimated power curve is (nearly) monotone; the MDE (minimum detectable effect) is found by
bisection over δ, the environments (or answers) needed by a bracketed bisection from the normal
approximation's guess. B (bootstrap resamples, ≥ `audit.stats.MIN_B` as in the audit) is read
only by `coverage`'s percentile-bootstrap comparison.

Defaults, assumptions to override rather than measurements: p0 = 0.5 (the largest binomial
variance), ρ = 0.2, k = 12 environments, n = 8 answers (the audit's default n); σ_env = σ_pair = 1
(effects in units of σ_env), 2 valid and 3 invalid labelled answers per environment (mini's minimum
for impossible environments). Planning an experiment (seeds × environments, two rewards) is
`audit.power_plan`; reading an audit.json's design is `audit.power_report`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats as sps

from . import stats as S

IMPOSSIBLE, CONTROL = "impossible", "control"
KINDS = (IMPOSSIBLE, CONTROL)
# labelled answers per environment of the mini design (docs/method.md §Environment sets and splits): (valid, invalid)
DEFAULT_LABELLED = {IMPOSSIBLE: (2, 3), CONTROL: (2, 2)}


@dataclass(frozen=True)
class ValidRateDesign:
    environments: int = 12  # k: environments of one kind
    answers: int = 8  # n: policy answers per environment at t = 0 and at t
    p0: float = 0.5  # valid rate at t = 0 (mean over environments)
    icc: float = 0.2  # ρ: intra-cluster correlation of validity within an environment

    def __post_init__(self):
        _require(self.environments >= 2, "environments", self.environments, "an integer >= 2")
        _require(self.answers >= 1, "answers", self.answers, "an integer >= 1")
        _require(0 < self.p0 <= 1, "p0", self.p0, "in (0, 1]")
        _require(0 <= self.icc < 1, "icc", self.icc, "in [0, 1)")


@dataclass(frozen=True)
class PrefDesign:
    environments: int = 12  # k: environments of one kind
    n_valid: int = 2  # labelled valid answers per environment
    n_invalid: int = 3  # labelled invalid answers per environment
    sigma_env: float = 1.0  # sd of the environments' true margins
    sigma_pair: float = 1.0  # sd of one pair's Δℓ(valid) − Δℓ(invalid) about its environment's margin

    def __post_init__(self):
        _require(self.environments >= 2, "environments", self.environments, "an integer >= 2")
        _require(self.n_valid >= 1, "n_valid", self.n_valid, "an integer >= 1")
        _require(self.n_invalid >= 1, "n_invalid", self.n_invalid, "an integer >= 1")
        _require(self.sigma_env >= 0 and math.isfinite(self.sigma_env), "sigma_env", self.sigma_env, ">= 0")
        _require(self.sigma_pair >= 0 and math.isfinite(self.sigma_pair), "sigma_pair", self.sigma_pair, ">= 0")
        _require(self.tau > 0, "sigma_env, sigma_pair", (self.sigma_env, self.sigma_pair), "not both 0")

    @property
    def tau(self) -> float:
        """sd of one environment's margin: √(σ_env² + σ_pair² (1/m_valid + 1/m_invalid)/2)."""
        return math.sqrt(self.sigma_env ** 2 + self.sigma_pair ** 2 * (1 / self.n_valid + 1 / self.n_invalid) / 2)


@dataclass(frozen=True)
class SimSettings:
    B: int = S.DEFAULT_B  # coverage's percentile bootstrap: resamples per interval, as in the audit
    alpha: float = 0.05  # 1 − interval level
    sims: int = 2000  # simulated data sets per power estimate
    seed: int = 0
    block: int = 25  # coverage's percentile bootstrap: simulated data sets sharing one draw of the B resamples

    def __post_init__(self):
        S.check_B(self.B)
        _require(0 < self.alpha < 1, "alpha", self.alpha, "in (0, 1)")
        _require(self.sims >= 1, "sims", self.sims, "an integer >= 1")
        _require(self.block >= 1, "block", self.block, "an integer >= 1")


@dataclass(frozen=True)
class Power:
    power: float  # share of simulated data sets whose interval lies entirely below 0
    mc_se: float  # √(power (1 − power) / sims)
    sims: int


Design = ValidRateDesign | PrefDesign


def _require(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise ValueError(f"{key}={value!r}: expected {expected}")


def _check_effect(effect: float, design: Design) -> None:
    _require(effect >= 0 and math.isfinite(effect), "effect", effect, "a finite fall >= 0")
    if isinstance(design, ValidRateDesign):
        _require(effect <= design.p0, "effect", effect, f"<= p0 = {design.p0} (a valid rate cannot fall below 0)")


# --- the audit's interval on a batch of simulated data sets ---------------------------------------

def _t_upper(x: np.ndarray, alpha: float) -> np.ndarray:
    """Upper end of each column's t interval of the mean over rows (environments)."""
    k = x.shape[0]
    return x.mean(axis=0) + sps.t.ppf(1 - alpha / 2, k - 1) * x.std(axis=0, ddof=1) / math.sqrt(k)


def _ratio_reps(counts: np.ndarray, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Σ num / Σ den of every resample (rows of `counts`) and data set (columns of num, den: k × s)."""
    return (counts @ num) / (counts @ den)


def _interval_ends(reps: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """`audit.stats._percentile`'s interval of each column (every replicate is defined here)."""
    low, high = np.quantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    return low, high


def _blocks(sim: SimSettings, k: int):
    """(columns, resample counts) per block of data sets sharing one draw of the B resamples."""
    for i, start in enumerate(range(0, sim.sims, sim.block)):
        rng = np.random.default_rng([sim.seed, k, 1, i])
        yield slice(start, min(start + sim.block, sim.sims)), S._draw_counts(rng, sim.B, k)


def _percentile_upper(x: np.ndarray, sim: SimSettings) -> np.ndarray:
    """Upper end of each column's percentile environment bootstrap of the mean (as `bootstrap_ratio_ci`)."""
    out = np.empty(x.shape[1])
    ones = np.ones_like(x)
    for cols, counts in _blocks(replace(sim, sims=x.shape[1]), x.shape[0]):
        out[cols] = _interval_ends(_ratio_reps(counts, x[:, cols], ones[:, cols]), sim.alpha)[1]
    return out


def _valid_rate_data(design: ValidRateDesign, sim: SimSettings) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per simulated set and environment: the rate p_e and the uniforms of the t = 0 and t samples."""
    rng = np.random.default_rng([sim.seed, design.environments, 0])
    shape = (design.environments, sim.sims)
    if design.icc == 0:
        p = np.full(shape, design.p0)
    else:
        scale = (1 - design.icc) / design.icc
        p = rng.beta(design.p0 * scale, (1 - design.p0) * scale, size=shape) if design.p0 < 1 else np.ones(shape)
    # uniforms strictly inside (0, 1): binom.ppf(u, n, p) is then a count in 0..n, monotone in p
    u0 = rng.random(shape) + 2.0 ** -54
    u1 = rng.random(shape) + 2.0 ** -54
    return p, u0, u1


def _valid_rate_detections(effect: float, design: ValidRateDesign, sim: SimSettings) -> np.ndarray:
    p, u0, u1 = _valid_rate_data(design, sim)
    n = design.answers
    drift = (sps.binom.ppf(u1, n, p * (1 - effect / design.p0)) - sps.binom.ppf(u0, n, p)) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        return _t_upper(drift, sim.alpha) < 0


def _pref_margins(effect: float, design: PrefDesign, sim: SimSettings) -> np.ndarray:
    rng = np.random.default_rng([sim.seed, design.environments, 2])
    return -effect + design.tau * rng.standard_normal((design.environments, sim.sims))


def _pref_detections(effect: float, design: PrefDesign, sim: SimSettings) -> np.ndarray:
    return _t_upper(_pref_margins(effect, design, sim), sim.alpha) < 0


def _as_power(detected: np.ndarray) -> Power:
    p = float(detected.mean())
    return Power(p, math.sqrt(p * (1 - p) / len(detected)), len(detected))


def power_valid_rate_drift(effect: float, design: ValidRateDesign = ValidRateDesign(),
                           sim: SimSettings = SimSettings()) -> Power:
    """P(the valid-rate drift interval lies below 0) when the valid rate falls by `effect`."""
    _check_effect(effect, design)
    return _as_power(_valid_rate_detections(effect, design, sim))


def power_pref_margin(effect: float, design: PrefDesign = PrefDesign(), sim: SimSettings = SimSettings()) -> Power:
    """P(the pref_margin interval lies below 0) when the margin falls to −`effect`."""
    _check_effect(effect, design)
    return _as_power(_pref_detections(effect, design, sim))


def power(effect: float, design: Design, sim: SimSettings = SimSettings()) -> Power:
    """`power_valid_rate_drift` or `power_pref_margin`, by the kind of design."""
    if isinstance(design, ValidRateDesign):
        return power_valid_rate_drift(effect, design, sim)
    return power_pref_margin(effect, design, sim)


# --- normal approximations: the closed form, and the searches' first guess ---------------------

def drift_variance(effect: float, design: ValidRateDesign) -> float:
    """V, the variance of one environment's drift v_e,t/n − v_e,0/n under the model above."""
    p0, rho, n = design.p0, design.icc, design.answers
    r = 1 - effect / p0
    var_p = rho * p0 * (1 - p0)
    within0 = p0 - (var_p + p0 ** 2)  # E[p_e (1 − p_e)]
    within1 = r * p0 - r ** 2 * (var_p + p0 ** 2)
    return (1 - r) ** 2 * var_p + (within0 + within1) / n


def normal_power(effect: float, design: Design, alpha: float = 0.05) -> float:
    """Φ(δ/SE − z_{1−α/2}), SE² = V/k (valid-rate drift) or τ²/k (pref_margin)."""
    _check_effect(effect, design)
    var = drift_variance(effect, design) if isinstance(design, ValidRateDesign) else design.tau ** 2
    se = math.sqrt(var / design.environments)
    z = sps.norm.ppf(1 - alpha / 2)
    if se == 0:
        return 1.0 if effect > 0 else 0.0
    return float(sps.norm.cdf(effect / se - z))


# --- searches -----------------------------------------------------------------------------------

def _bisect_effect(detect_share: Callable[[float], float], lo: float, hi: float, target: float,
                   tol: float) -> float:
    """Smallest δ in (lo, hi] (to tol) with power ≥ target, given power(hi) ≥ target > power(lo)."""
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if detect_share(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def min_detectable_effect(design: Design, sim: SimSettings = SimSettings(), target: float = 0.8,
                          tol: float | None = None) -> float | None:
    """The smallest fall detected with probability ≥ `target` (bisection over δ to `tol`: 0.001
    for a valid rate, 0.001 τ for pref_margin). None when even a fall of the whole valid rate p0
    is detected less often than that."""
    _require(0 < target < 1, "target", target, "in (0, 1)")
    if isinstance(design, ValidRateDesign):
        def share(d):
            return float(_valid_rate_detections(d, design, sim).mean())

        if share(design.p0) < target:
            return None
        return _bisect_effect(share, 0.0, design.p0, target, tol or 1e-3)
    # pref_margin: power depends on δ/τ only (the t interval is scale-equivariant and the draws
    # are shared), so search on the unit scale and scale back
    unit = replace(design, sigma_env=1.0, sigma_pair=0.0)

    def share(d):
        return float(_pref_detections(d, unit, sim).mean())

    hi = max(2 * (sps.norm.ppf(1 - sim.alpha / 2) + sps.norm.ppf(target)) / math.sqrt(design.environments), 0.1)
    while share(hi) < target:
        hi *= 2
        if hi > 1e3:
            return None
    return design.tau * _bisect_effect(share, 0.0, hi, target, (tol / design.tau) if tol else 1e-3)


def _bisect_int(ok: Callable[[int], bool], guess: int, lo_limit: int, hi_limit: int) -> int | None:
    """Smallest integer x in [lo_limit, hi_limit] with ok(x), searching outwards from `guess`
    (ok is taken to be monotone: a simulated power estimate is nearly so)."""
    guess = min(max(guess, lo_limit), hi_limit)
    if ok(guess):
        hi, lo = guess, guess
        while lo > lo_limit:
            lo = max(lo_limit, lo - max(1, lo // 3))
            if not ok(lo):
                break
            hi = lo
        else:
            return lo_limit
    else:
        lo, hi = guess, guess
        while True:
            if hi >= hi_limit:
                return None
            hi = min(hi_limit, hi + max(1, hi // 2))
            if ok(hi):
                break
            lo = hi
    while hi - lo > 1:  # ok(hi) and not ok(lo)
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _normal_size(effect: float, var: float, alpha: float, target: float) -> int:
    z = sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(target)
    return max(2, math.ceil(var * (z / effect) ** 2)) if effect > 0 else 2


def required_environments(effect: float, design: Design, sim: SimSettings = SimSettings(),
                          target: float = 0.8, max_environments: int = 2000) -> int | None:
    """The fewest environments (the rest of the design kept) whose power reaches `target` at this
    fall; None when `max_environments` do not."""
    _check_effect(effect, design)
    _require(0 < target < 1, "target", target, "in (0, 1)")
    if effect == 0:
        return None
    var = drift_variance(effect, design) if isinstance(design, ValidRateDesign) else design.tau ** 2
    guess = _normal_size(effect, var, sim.alpha, target)
    return _bisect_int(lambda k: power(effect, replace(design, environments=k), sim).power >= target,
                       guess, 2, max_environments)


def required_answers(effect: float, design: ValidRateDesign, sim: SimSettings = SimSettings(),
                     target: float = 0.8, max_answers: int = 256) -> int | None:
    """The fewest answers per environment (at the design's environments) whose valid-rate power
    reaches `target`; None when `max_answers` do not (between-environment heterogeneity caps what
    more answers per environment can buy)."""
    _check_effect(effect, design)
    _require(0 < target < 1, "target", target, "in (0, 1)")
    if effect == 0:
        return None
    # V ≈ a + b/n: solve V/k = (δ/z)² for n
    a = drift_variance(effect, replace(design, answers=10 ** 9))
    b = (drift_variance(effect, replace(design, answers=1)) - a)
    room = design.environments * (effect / (sps.norm.ppf(1 - sim.alpha / 2) + sps.norm.ppf(target))) ** 2 - a
    guess = math.ceil(b / room) if room > 0 else max_answers
    return _bisect_int(lambda n: power_valid_rate_drift(effect, replace(design, answers=n), sim).power >= target,
                       guess, 1, max_answers)


# --- the interval's own level ----------------------------------------------------------------------

@dataclass(frozen=True)
class Coverage:
    environments: int
    false_detection: float  # share of no-effect data sets whose t interval lies entirely below 0
    mc_se: float
    sims: int
    percentile_bootstrap: float | None  # the same for the percentile bootstrap (fewer sets), None if not run
    percentile_sims: int
    valid_rate_drift: float  # the drift's t interval at the default ValidRateDesign (binomial answers)


def coverage(environments: Sequence[int], sims: int = 40000, seed: int = 0, alpha: float = 0.05,
             B: int = S.DEFAULT_B, percentile_sims: int = 2000) -> list[Coverage]:
    """One-sided false-detection rate at no effect of the audit's interval of a mean over k
    environments (normal environment means; the t interval is exact there, so this checks the
    code, and the percentile bootstrap beside it shows what the t replaces), and of the valid-rate
    drift's, whose answers are binomial. `percentile_sims` = 0 skips the bootstrap."""
    out = []
    for k in environments:
        _require(k >= 2, "environments", k, "integers >= 2")
        x = np.random.default_rng([seed, k, 3]).standard_normal((k, sims))
        hit = _t_upper(x, alpha) < 0
        boot = None
        if percentile_sims:
            sub = x[:, :percentile_sims]
            boot = float((_percentile_upper(sub, SimSettings(B=B, alpha=alpha, sims=sub.shape[1], seed=seed)) < 0).mean())
        p = float(hit.mean())
        drift = power_valid_rate_drift(0.0, ValidRateDesign(environments=k), SimSettings(B=B, alpha=alpha, sims=sims,
                                                                                         seed=seed)).power
        out.append(Coverage(k, p, math.sqrt(p * (1 - p) / sims), sims, boot, min(percentile_sims, sims), drift))
    return out
