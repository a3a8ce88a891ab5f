"""Power of the audit by simulation (SPEC §6 "Power"): for a design, how likely its own interval
detects a given fall, and the smallest fall it detects with 80% probability.

Detection: the audit's (1 − α) environment-bootstrap percentile interval lies entirely below 0.
Power = P(detection), estimated as the share of `sims` simulated data sets that detect (its Monte
Carlo standard error is √(p(1 − p)/sims)). At no effect it is ≈ α/2: the test is one-sided.

Valid-rate drift (valid rate at t − at 0, one kind of environment), k environments, n answers each
at t = 0 and at t:
    p_e ~ Beta(p0 (1 − ρ)/ρ, (1 − p0)(1 − ρ)/ρ)   mean p0, intra-cluster correlation ρ (p_e = p0 at ρ = 0)
    p_e,t = p_e (1 − δ/p0)                         every environment loses the same share; E drift = −δ
    v_e,0 ~ Bin(n, p_e),  v_e,t ~ Bin(n, p_e,t)    fresh samples at each t, independent given p_e
    statistic Σ v_e,t / Σ n_e − Σ v_e,0 / Σ n_e, the environments resampled jointly across the two
    iterations — `audit.summary._valid_rate_drift`, i.e. `audit.stats.paired_bootstrap_diff`.
    Normal approximation: SE² = V/k with V = (δ/p0)² ρ p0 q0 + (E[p_e q_e] + E[p_e,t q_e,t])/n, which at
    ρ = 0 is (p0 q0 + p1 q1)/(k n), p1 = p0 − δ; power ≈ Φ(δ/SE − z_{1−α/2}).

Preference probe `pref_margin` (π_0 gives Δℓ = 0, so at t = 0 it is exactly 0 and a fall is a margin
below 0). Per environment m_valid valid and m_invalid invalid labelled answers; the probe is
deterministic given the checkpoint, so the noise is which environments and which answers:
    Δℓ(a) = μ_e ± ε_a,  μ_e = −δ + σ_env z_e,  ε_a ~ N(0, σ_pair²/2)   (one pair's difference has sd σ_pair)
    margin_e = mean over the m_valid × m_invalid pairs of Δℓ(valid) − Δℓ(invalid)
             ~ N(−δ, τ²),  τ² = σ_env² + σ_pair² (1/m_valid + 1/m_invalid)/2
    (the pairs share answers, so they are not m_valid · m_invalid independent draws)
    statistic: mean over environments of margin_e, environments resampled (`bootstrap_ratio_ci` with
    denominators 1). Power depends on δ/τ and k only. Normal approximation: SE = τ/√k.

Bootstrap: B resamples of the environments per simulated data set, drawn as `audit.stats` draws
them (`_draw_counts`); a block of `block` data sets shares one draw of the resamples (each set's
interval is still a bootstrap independent of its data, as in the audit, where the draws are fixed by
the seeds), which makes the simulation a few matrix products. B below `audit.stats.MIN_B` is refused,
as in the audit. A test checks the interval of one simulated set against the audit's own functions.

Searches use common random numbers: the same uniforms, environment rates and resamples at every δ,
so each data set's detection is monotone in δ and the estimated power curve is monotone; the MDE
(minimum detectable effect) is found by bisection over δ, the environments (or answers) needed by
a bracketed bisection from the normal approximation's guess.

Defaults, assumptions to override rather than measurements: p0 = 0.5 (the largest binomial
variance), ρ = 0.2, k = 12 environments, n = 8 answers (the audit's default n); σ_env = σ_pair = 1
(effects in units of σ_env), 2 valid and 3 invalid labelled answers per environment (mini's minimum
for impossible environments). `power_section` reads the design of an `audit.json` instead: the
environments per kind, n, B and α that were run, p0 and ρ from the t = 0 valid rate and its
interval, τ from the `pref_margin` interval at the last audited t.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats as sps

from . import stats as S

IMPOSSIBLE, CONTROL = "impossible", "control"
KINDS = (IMPOSSIBLE, CONTROL)
# labelled answers per environment of the SPEC's mini design: (valid, invalid)
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
    B: int = S.DEFAULT_B  # bootstrap resamples per interval, as in the audit
    alpha: float = 0.05  # 1 − interval level
    sims: int = 2000  # simulated data sets per power estimate
    seed: int = 0
    block: int = 25  # simulated data sets sharing one draw of the B resamples

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


# --- the bootstrap of a batch of simulated data sets -------------------------------------------

def _ratio_reps(counts: np.ndarray, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Σ num / Σ den of every resample (rows of `counts`) and data set (columns of num, den: k × s)."""
    return (counts @ num) / (counts @ den)


def _interval_ends(reps: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """`audit.stats._percentile`'s interval of each column (every replicate is defined here: each
    environment has answers, so no denominator is 0)."""
    low, high = np.quantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    return low, high


def _blocks(sim: SimSettings, k: int):
    """(columns, resample counts) per block: the same draws for a given (seed, k) at every effect."""
    for i, start in enumerate(range(0, sim.sims, sim.block)):
        rng = np.random.default_rng([sim.seed, k, 1, i])
        yield slice(start, min(start + sim.block, sim.sims)), S._draw_counts(rng, sim.B, k)


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
    v0 = sps.binom.ppf(u0, n, p)
    v1 = sps.binom.ppf(u1, n, p * (1 - effect / design.p0))
    d = np.full(v0.shape, float(n))
    out = np.empty(sim.sims, dtype=bool)
    for cols, counts in _blocks(sim, design.environments):
        reps = _ratio_reps(counts, v1[:, cols], d[:, cols]) - _ratio_reps(counts, v0[:, cols], d[:, cols])
        out[cols] = _interval_ends(reps, sim.alpha)[1] < 0
    return out


def _pref_margins(effect: float, design: PrefDesign, sim: SimSettings) -> np.ndarray:
    rng = np.random.default_rng([sim.seed, design.environments, 2])
    return -effect + design.tau * rng.standard_normal((design.environments, sim.sims))


def _pref_detections(effect: float, design: PrefDesign, sim: SimSettings) -> np.ndarray:
    m = _pref_margins(effect, design, sim)
    ones = np.ones_like(m)
    out = np.empty(sim.sims, dtype=bool)
    for cols, counts in _blocks(sim, design.environments):
        out[cols] = _interval_ends(_ratio_reps(counts, m[:, cols], ones[:, cols]), sim.alpha)[1] < 0
    return out


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
    # pref_margin: power depends on δ/τ only (the bootstrap is scale-equivariant and the draws
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


# --- the Power section of a report --------------------------------------------------------------

def _z(alpha: float) -> float:
    return float(sps.norm.ppf(1 - alpha / 2))


def _metric(it: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return (it.get("metrics") or {}).get(name)


def _finite(*xs: Any) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


def _seed_iters(entry: Mapping[str, Any]) -> list[dict[int, Mapping[str, Any]]]:
    return [{int(t): it for t, it in (s.get("iterations") or {}).items()}
            for _, s in sorted((entry.get("seeds") or {}).items(), key=lambda kv: int(kv[0]))]


def _environments(seeds: list[dict[int, Mapping[str, Any]]], kind: str, n: int | None) -> tuple[int | None, str]:
    """Environments of one kind audited: the task ids of the per-sample record, else valid_rate's n / n."""
    for iters in seeds:
        for it in iters.values():
            envs = (it.get("exploit") or {}).get(kind)
            if envs:
                return len(envs), ""
    for iters in seeds:
        for it in iters.values():
            m = _metric(it, f"valid_rate/{kind}")
            if m and n and m.get("n"):
                return int(m["n"]) // n, f" (from valid_rate/{kind}'s n / {n} answers)"
    return None, ""


def _answers(doc: Mapping[str, Any], seeds) -> int | None:
    n = (doc.get("settings") or {}).get("n")
    if isinstance(n, int) and n >= 1:
        return n
    for iters in seeds:
        for it in iters.values():
            for envs in (it.get("exploit") or {}).values():
                for samples in envs.values():
                    return len(samples) or None
    return None


def _baseline(seeds, kind: str, k: int, n: int, alpha: float) -> tuple[float | None, float | None, str]:
    """p0 and ρ from valid_rate/<kind> at t = 0 (mean over seeds). ρ from the interval: SE ≈
    half-width / z, and the percentile bootstrap's SE² of a mean of k equal-sized environments is
    ≈ (k − 1)/k² · Var(v_e/n) with Var(v_e/n) = p0 q0 (ρ + (1 − ρ)/n)."""
    values, iccs, why = [], [], []
    for iters in seeds:
        m = iters.get(0) and _metric(iters[0], f"valid_rate/{kind}")
        if not m:
            why.append(f"valid_rate/{kind} at t = 0 not in audit.json")
            continue
        if m.get("status") not in (None, "ok") or not _finite(m.get("value")):
            why.append(f"valid_rate/{kind} at t = 0 {m.get('status') or 'undefined'}"
                       + (f" ({m['reason']})" if m.get("reason") else ""))
            continue
        p = float(m["value"])
        values.append(p)
        if _finite(m.get("ci_low"), m.get("ci_high")) and 0 < p < 1 and n > 1:
            se = (m["ci_high"] - m["ci_low"]) / (2 * _z(alpha))
            ratio = k ** 2 / (k - 1) * se ** 2 / (p * (1 - p))
            iccs.append(min(0.95, max(0.0, (ratio - 1 / n) / (1 - 1 / n))))
    p0 = float(np.mean(values)) if values else None
    icc = float(np.mean(iccs)) if iccs else None
    return p0, icc, "; ".join(dict.fromkeys(why))


def _spread(seeds, kind: str, k: int, alpha: float) -> tuple[float | None, int, str, str]:
    """τ from pref_margin/<kind>'s interval at each seed's last audited t > 0 (root mean square over
    seeds), and the probe's environments (`counts["probe/environments/<kind>"]`, those with a pair;
    else the k audited). The percentile interval of a mean of k is ≈ ± z τ_k/√k with τ_k the sd over
    environments (ddof 0), so τ ≈ half-width / z · √k · √(k/(k − 1))."""
    name = f"pref_margin/{kind}"
    taus, ks, ts, why = [], [], [], []
    for iters in seeds:
        later = [t for t in iters if t > 0 and _metric(iters[t], name)]
        if not later:
            why.append(f"{name} not in audit.json" if not any(_metric(it, name) for it in iters.values())
                       else f"{name} only at t = 0, where it is 0 by construction")
            continue
        t = max(later)
        m = _metric(iters[t], name)
        if m.get("status") not in (None, "ok") or not _finite(m.get("ci_low"), m.get("ci_high")):
            status = m.get("status")
            why.append(f"{name} at t = {t} has no interval"
                       + (f" ({status}: {m.get('reason')})" if status not in (None, "ok") else " (undefined)"))
            continue
        kp = (iters[t].get("counts") or {}).get(f"probe/environments/{kind}")
        kp = kp if isinstance(kp, int) and kp >= 1 else k
        if kp < 2:
            why.append(f"{name} at t = {t} rests on {kp} environment")
            continue
        tau = (m["ci_high"] - m["ci_low"]) / (2 * _z(alpha)) * kp / math.sqrt(kp - 1)
        if tau <= 0:
            why.append(f"{name} at t = {t} has an interval of width 0")
            continue
        taus.append(tau)
        ks.append(kp)
        ts.append(t)
    if not taus:
        return None, k, "", "; ".join(dict.fromkeys(why))
    return (float(np.sqrt(np.mean(np.square(taus)))), min(ks), ", ".join(f"t = {t}" for t in ts),
            "; ".join(dict.fromkeys(why)))


def _fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def power_section(doc: Mapping[str, Any], *, sims: int = 2000, seed: int = 0, target: float = 0.8) -> list[str]:
    """Markdown lines of the report's "Power" section for the design `doc` (an audit.json) ran: per
    reward and kind, the MDE at `target` power of a valid-rate fall (t vs 0) and of a pref_margin
    fall, with where each assumption came from. Missing inputs are named, never written as 0."""
    settings = doc.get("settings") or {}
    boot = settings.get("bootstrap") or {}
    notes = []
    B, alpha = boot.get("B"), boot.get("alpha")
    if not isinstance(B, int) or B < S.MIN_B:
        notes.append(f"bootstrap B not in audit.json settings (or below {S.MIN_B}): simulated with B = {S.DEFAULT_B}")
        B = S.DEFAULT_B
    if not _finite(alpha) or not 0 < alpha < 1:
        notes.append("bootstrap alpha not in audit.json settings: simulated with α = 0.05")
        alpha = 0.05
    sim = SimSettings(B=B, alpha=alpha, sims=sims, seed=seed)
    level = f"{100 * (1 - alpha):g}%"
    lines = ["## Power", "",
             f"Minimum detectable effect (MDE): the smallest fall that the audit's own {level} environment-"
             f"bootstrap interval (B = {B}) puts entirely below 0 in {100 * target:g}% of {sims} data sets "
             f"simulated for the design that was run (`audit.power`; `python -m audit.power` for other "
             f"designs). A fall smaller than the MDE can go undetected: an interval that covers 0 is no "
             f"evidence of no fall.", "",
             "| reward | metric | design | assumed | MDE |", "|---|---|---|---|---|"]
    rewards = doc.get("rewards") or {}
    if not rewards:
        return lines[:3] + ["No rewards in audit.json: nothing to size."]
    cache: dict[tuple, float | None] = {}
    defaults_v, defaults_p = ValidRateDesign(), PrefDesign()
    for reward, entry in sorted(rewards.items()):
        seeds = _seed_iters(entry)
        n = _answers(doc, seeds)
        for kind in KINDS:
            k, k_note = _environments(seeds, kind, n)
            if k is None or k < 2 or n is None:
                what = "answers per environment" if n is None else f"{kind} environments"
                for metric in (f"valid_rate_drift/{kind}", f"pref_margin/{kind}"):
                    lines.append(f"| {reward} | {metric} | — | — | not computed: {what} unknown"
                                 f"{' (fewer than 2)' if k is not None and k < 2 else ''} |")
                continue
            # valid-rate drift
            p0, icc, why = _baseline(seeds, kind, k, n, alpha)
            src = []
            if p0 is None:
                p0, src = defaults_v.p0, [f"p0 = {defaults_v.p0:g} (default: {why or 'no t = 0 valid rate'})"]
            else:
                src.append(f"p0 = {p0:.3f} (t = 0)")
            if icc is None:
                icc = defaults_v.icc
                src.append(f"ICC {icc:g} (default)")
            else:
                src.append(f"ICC {icc:.2f} (from the t = 0 interval)")
            design = f"{k} environments × {n} answers{k_note}"
            if p0 == 0:
                cell = "not computed: the valid rate at t = 0 is 0, it cannot fall"
            else:
                key = ("v", k, n, round(p0, 4), round(icc, 4))
                if key not in cache:
                    cache[key] = min_detectable_effect(ValidRateDesign(k, n, round(p0, 4), round(icc, 4)), sim, target)
                mde = cache[key]
                cell = (f"{mde:.3f}" if mde is not None
                        else f"none: even a fall to 0 is detected in under {100 * target:g}%")
            lines.append(f"| {reward} | valid_rate_drift/{kind} | {design} | {'; '.join(src)} | {cell} |")
            # pref_margin
            tau, kp, ts, why = _spread(seeds, kind, k, alpha)
            if tau is None:
                nv, ni = DEFAULT_LABELLED[kind]
                pd = replace(defaults_p, environments=kp, n_valid=nv, n_invalid=ni)
                assumed = (f"default spread σ_env = {pd.sigma_env:g}, σ_pair = {pd.sigma_pair:g}, {nv} valid × {ni} "
                           f"invalid answers (τ = {pd.tau:.2f}; {why}); MDE in units of σ_env")
            else:
                pd = PrefDesign(environments=kp, sigma_env=tau, sigma_pair=0.0)
                assumed = f"τ = {tau:.3g}, sd of the environments' margins (from the interval at {ts})"
            key = ("p", kp)
            if key not in cache:
                cache[key] = min_detectable_effect(PrefDesign(environments=kp, sigma_env=1.0, sigma_pair=0.0), sim, target)
            unit = cache[key]
            cell = (f"{unit * pd.tau:.3g} ({unit:.2f} τ)" if unit is not None else "none within 1000 τ")
            lines.append(f"| {reward} | pref_margin/{kind} | {kp} environments | {assumed} | {cell} |")
    if notes:
        lines += [""] + [f"- {x}" for x in notes]
    return lines


# --- command line -------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    v, p, s = ValidRateDesign(), PrefDesign(), SimSettings()
    ap = argparse.ArgumentParser(
        prog="python -m audit.power",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Power of the hidden-anchor audit by simulation (SPEC §6). Detection = the audit's "
                    "environment-bootstrap interval lies entirely below 0. Prints the minimum detectable "
                    "effect (MDE) at the target power of a fall in the valid rate (valid_rate_drift, t vs 0) "
                    "and in pref_margin; with --valid-effect / --pref-effect also the power at that fall "
                    "and the environments (and answers per environment) it needs. --audit prints the "
                    "Power section for the design an audit.json ran. Model and assumptions: the module "
                    "docstring of audit/power.py.")
    ap.add_argument("--audit", metavar="AUDIT_JSON", help="print the Power section of this audit.json and exit")
    ap.add_argument("--metric", choices=("both", "valid_rate_drift", "pref_margin"), default="both")
    ap.add_argument("--environments", "-k", type=int, default=v.environments, help="environments of one kind")
    ap.add_argument("--answers", "-n", type=int, default=v.answers,
                    help="valid rate: policy answers per environment at t = 0 and at t")
    ap.add_argument("--p0", type=float, default=v.p0, help="valid rate: its value at t = 0")
    ap.add_argument("--icc", type=float, default=v.icc,
                    help="valid rate: intra-cluster correlation of validity within an environment")
    ap.add_argument("--n-valid", type=int, default=p.n_valid, help="pref_margin: labelled valid answers per environment")
    ap.add_argument("--n-invalid", type=int, default=p.n_invalid,
                    help="pref_margin: labelled invalid answers per environment")
    ap.add_argument("--sigma-env", type=float, default=p.sigma_env, help="pref_margin: sd of the environments' margins")
    ap.add_argument("--sigma-pair", type=float, default=p.sigma_pair,
                    help="pref_margin: sd of one pair's Δℓ difference within an environment")
    ap.add_argument("--valid-effect", type=float, help="a valid-rate fall to size the design for")
    ap.add_argument("--pref-effect", type=float, help="a pref_margin fall (in its units) to size the design for")
    ap.add_argument("--power", type=float, default=0.8, dest="target", help="target power")
    ap.add_argument("--B", type=int, default=s.B, help=f"bootstrap resamples (>= {S.MIN_B}, as in the audit)")
    ap.add_argument("--alpha", type=float, default=s.alpha, help="1 − interval level")
    ap.add_argument("--sims", type=int, default=s.sims, help="simulated data sets per power estimate")
    ap.add_argument("--seed", type=int, default=s.seed)
    ap.add_argument("--max-environments", type=int, default=2000, help="search limit for the environments needed")
    return ap


def _report(args: argparse.Namespace) -> list[str]:
    sim = SimSettings(B=args.B, alpha=args.alpha, sims=args.sims, seed=args.seed)
    target, pct = args.target, f"{100 * args.target:g}%"
    out = [f"{args.environments} environments of one kind; B = {sim.B}, {100 * (1 - sim.alpha):g}% interval, "
           f"{sim.sims} simulated data sets (seed {sim.seed}); detection: the interval lies entirely below 0"]
    if args.metric in ("both", "valid_rate_drift"):
        d = ValidRateDesign(args.environments, args.answers, args.p0, args.icc)
        mde = min_detectable_effect(d, sim, target)
        out.append(f"valid_rate_drift, {d.answers} answers per environment, p0 = {d.p0:g}, ICC {d.icc:g}: "
                   f"MDE at {pct} power = {_fmt(mde)}"
                   + ("" if mde is not None else f" (even a fall to 0 is detected in under {pct})"))
        if args.valid_effect is not None:
            e = args.valid_effect
            pw = power_valid_rate_drift(e, d, sim)
            k = required_environments(e, d, sim, target, args.max_environments)
            n = required_answers(e, d, sim, target)
            out.append(f"  a fall of {e:g}: power {pw.power:.3f} (± {pw.mc_se:.3f}; normal approximation "
                       f"{normal_power(e, d, sim.alpha):.3f}); {pct} needs "
                       + (f"{k} environments" if k else f"more than {args.max_environments} environments")
                       + f" at {d.answers} answers each, or "
                       + (f"{n} answers per environment" if n else "more than 256 answers per environment")
                       + f" at {d.environments} environments")
    if args.metric in ("both", "pref_margin"):
        d = PrefDesign(args.environments, args.n_valid, args.n_invalid, args.sigma_env, args.sigma_pair)
        mde = min_detectable_effect(d, sim, target)
        out.append(f"pref_margin, {d.n_valid} valid × {d.n_invalid} invalid labelled answers per environment, "
                   f"σ_env = {d.sigma_env:g}, σ_pair = {d.sigma_pair:g} (τ = {d.tau:.3f}): "
                   f"MDE at {pct} power = {_fmt(mde)}" + (f" ({mde / d.tau:.2f} τ)" if mde is not None else ""))
        if args.pref_effect is not None:
            e = args.pref_effect
            pw = power_pref_margin(e, d, sim)
            k = required_environments(e, d, sim, target, args.max_environments)
            out.append(f"  a fall of {e:g}: power {pw.power:.3f} (± {pw.mc_se:.3f}; normal approximation "
                       f"{normal_power(e, d, sim.alpha):.3f}); {pct} needs "
                       + (f"{k} environments" if k else f"more than {args.max_environments} environments"))
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.audit:
            from .results import load_results

            lines = power_section(load_results(args.audit), sims=args.sims, seed=args.seed, target=args.target)
        else:
            _require(0 < args.target < 1, "--power", args.target, "in (0, 1)")
            lines = _report(args)
    except ValueError as e:
        print(f"audit.power: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
