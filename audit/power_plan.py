"""Planning an experiment: how many seeds and environments detect a difference δ between two
rewards (`python -m audit.power --plan`), with training (seed-to-seed) variation and the
uncertainty of the spread τ read from an earlier audit.

Model of one metric that is a mean over environments (e.g. `pref_margin/impossible`), reward r,
seed s, environment e, the same k environments audited for every run:
    value_rse = μ_r + a_e + b_re + v_rs
    a_e ~ N(0, ρ τ²)        what an environment does to every reward alike; cancels in the pair
    b_re ~ N(0, (1 − ρ) τ²)  the rest of the environment's effect, the same for every seed of r
    v_rs ~ N(0, σ_seed²)     training randomness: the seed's shift of its whole run
τ is the sd over environments of one seed's values (what the audit's interval of one checkpoint
reads), σ_seed the sd of a reward's seed means. b is held the same across seeds, so more seeds do
not average environment noise away: the conservative reading (a fully seed-specific b would
shrink that term by S). The contrast is `audit.stats.paired_contrast` (mean over seeds per
environment, paired over environments, seed spread added, Satterthwaite t); detection: its
(1 − α) interval lies entirely on the side of δ. Its variance is 2(1 − ρ)τ²/k + 2σ_seed²/S.

τ's uncertainty: τ̂ read from k0 environments has τ̂² (k0 − 1)/τ² ~ χ²(k0 − 1); each simulated
experiment draws its own τ = τ̂ √((k0 − 1)/χ²), so the power printed is averaged over what τ could
be given τ̂ (its relative SE at k0 = 12 is ≈ 21%), and σ_seed likewise from S0 seeds. With no k0
(or S0) the value is taken as known. One seed per reward cannot see σ_seed: with σ_seed > 0 plans
start at 2 seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class ExperimentDesign:
    seeds: int = 3  # S: seeds per reward
    environments: int = 12  # k: environments, the same for both rewards
    tau: float = 1.0  # sd over environments of one seed's per-environment values
    tau_environments: int | None = None  # k0 the τ estimate rests on; None: τ known
    sigma_seed: float = 0.0  # sd of a reward's seed means
    sigma_seed_seeds: int | None = None  # S0 the σ_seed estimate rests on; None: known
    shared: float = 0.0  # ρ: share of τ² common to both rewards on an environment

    def __post_init__(self):
        ok = (self.seeds >= 1 and self.environments >= 2 and self.tau > 0 and math.isfinite(self.tau)
              and self.sigma_seed >= 0 and 0 <= self.shared < 1
              and (self.tau_environments is None or self.tau_environments >= 2)
              and (self.sigma_seed_seeds is None or self.sigma_seed_seeds >= 2))
        if not ok:
            raise ValueError(f"{self}: expected seeds >= 1, environments >= 2, tau > 0, sigma_seed >= 0, "
                             "shared in [0, 1), tau_environments and sigma_seed_seeds >= 2 when given")

    @property
    def se(self) -> float:
        """SE of the contrast at the design's τ and σ_seed: √(2(1 − ρ)τ²/k + 2σ_seed²/S)."""
        return math.sqrt(2 * (1 - self.shared) * self.tau ** 2 / self.environments + 2 * self.sigma_seed ** 2 / self.seeds)


def _scale_draws(rng: np.random.Generator, value: float, df_from: int | None, sims: int) -> np.ndarray:
    if df_from is None:
        return np.full(sims, value)
    return value * np.sqrt((df_from - 1) / rng.chisquare(df_from - 1, sims))


def contrast_power(delta: float, design: ExperimentDesign, *, sims: int = 4000, seed: int = 0,
                   alpha: float = 0.05) -> float:
    """Share of simulated experiments whose paired contrast interval lies entirely beyond 0 on δ's
    side (δ > 0: reward A above B); vectorised `audit.stats.paired_contrast`."""
    if not math.isfinite(delta):
        raise ValueError(f"delta={delta!r}: expected a finite difference")
    d = design
    rng = np.random.default_rng([seed, d.seeds, d.environments, 7])
    tau = _scale_draws(rng, d.tau, d.tau_environments, sims)[:, None]
    sig = _scale_draws(rng, d.sigma_seed, d.sigma_seed_seeds, sims)[:, None]
    k, S = d.environments, d.seeds
    # the shared a_e cancels in every d_e, so only b and v are drawn
    b = math.sqrt(2 * (1 - d.shared)) * tau * rng.standard_normal((sims, k))  # b_Ae − b_Be
    vbar = sig[:, :, None] * rng.standard_normal((sims, 2, S))  # v_rs, both rewards
    d_e = abs(delta) + b + (vbar[:, 0].mean(axis=1) - vbar[:, 1].mean(axis=1))[:, None]
    var = d_e.var(axis=1, ddof=1) / k
    parts = [(var, k - 1)]
    if S > 1:
        for r in (0, 1):
            parts.append((vbar[:, r].var(axis=1, ddof=1) / S, S - 1))
    total = sum(v for v, _ in parts)
    with np.errstate(invalid="ignore", divide="ignore"):
        df = total ** 2 / sum(v ** 2 / f for v, f in parts)
    low = d_e.mean(axis=1) - sps.t.ppf(1 - alpha / 2, df) * np.sqrt(total)
    return float((low > 0).mean())


@dataclass(frozen=True)
class PlanRow:
    seeds: int
    environments: int | None  # fewest environments reaching the target; None: more than max_environments
    power_at_design: float  # power with the design's environments at these seeds


def plan(delta: float, design: ExperimentDesign, *, target: float = 0.8, max_seeds: int = 10,
         max_environments: int = 500, sims: int = 4000, seed: int = 0, alpha: float = 0.05) -> list[PlanRow]:
    """For each seed count (1 or 2 up to max_seeds) the fewest environments whose power to detect δ
    reaches `target` (bisection; power rises with k at fixed seeds, up to the ceiling the seed term
    sets, so a large σ_seed can leave no k enough)."""
    if not 0 < target < 1:
        raise ValueError(f"target={target!r}: expected a power in (0, 1)")
    rows = []
    first = 2 if design.sigma_seed > 0 else 1
    for S in range(first, max_seeds + 1):
        def ok(k: int, S=S) -> bool:
            return contrast_power(delta, replace(design, seeds=S, environments=k), sims=sims, seed=seed,
                                  alpha=alpha) >= target
        at = contrast_power(delta, replace(design, seeds=S), sims=sims, seed=seed, alpha=alpha)
        if not ok(max_environments):
            rows.append(PlanRow(S, None, at))
            continue
        lo, hi = 2, max_environments
        if ok(lo):
            hi = lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        rows.append(PlanRow(S, hi, at))
    return rows


def min_detectable_difference(design: ExperimentDesign, *, target: float = 0.8, sims: int = 4000, seed: int = 0,
                              alpha: float = 0.05) -> float | None:
    """The smallest δ the design detects with probability ≥ target (bisection on the shared draws;
    None beyond 1000 SE)."""
    hi = 3 * design.se

    def share(x: float) -> float:
        return contrast_power(x, design, sims=sims, seed=seed, alpha=alpha)

    while share(hi) < target:
        hi *= 2
        if hi > 1000 * design.se:
            return None
    lo = 0.0
    while hi - lo > 1e-3 * design.se:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if share(mid) >= target else (mid, hi)
    return hi
