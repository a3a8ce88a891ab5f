"""The report's Power section: the design an `audit.json` ran, sized with `audit.power_sim` (one
checkpoint against t = 0) and `audit.power_plan` (two rewards, seeds × environments).

Read from the audit.json: the environments per kind, n, B and α that were run; p0 and ρ from the
t = 0 valid rate and its interval; τ from the `pref_margin` interval at the last audited t (each
seed's; k0 its environments); σ_seed from the spread of the seeds' `pref_margin` at that t (with ≥ 2
seeds). What is missing is named and replaced by a stated default, never by 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from scipy import stats as sps

from . import stats as S
from .power_plan import ExperimentDesign, min_detectable_difference
from .power_sim import (
    DEFAULT_LABELLED,
    KINDS,
    PrefDesign,
    SimSettings,
    ValidRateDesign,
    min_detectable_effect,
)


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
    else the k audited). The audit's t interval of a mean of k is ± t_{k−1} τ/√k with τ the sd over
    environments (ddof 1), so τ = half-width / t_{k−1} · √k."""
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
        tau = (m["ci_high"] - m["ci_low"]) / (2 * float(sps.t.ppf(1 - alpha / 2, kp - 1))) * math.sqrt(kp)
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
             f"Minimum detectable effect (MDE): the smallest fall that the audit's own {level} interval "
             f"(the t interval over environments) puts entirely below 0 in {100 * target:g}% of {sims} data "
             f"sets simulated for the design that was run (`audit.power_sim`); `pref_margin_diff` is the "
             f"smallest difference between this reward and another, each run with the same seeds and "
             f"environments, that the paired contrast across seeds detects, averaged over the uncertainty "
             f"of τ and σ_seed (`audit.power_plan`; `python -m audit.power --plan` for other designs). A "
             f"fall smaller than the MDE can go undetected: an interval that covers 0 is no evidence of no "
             f"fall.", "",
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
            lines.append(_contrast_row(reward, kind, seeds, pd.tau, kp, tau is not None, sim, target, cache))
    if notes:
        lines += [""] + [f"- {x}" for x in notes]
    return lines




def _seed_spread(seeds, kind: str) -> tuple[float | None, int]:
    """sd over seeds of pref_margin/<kind> at each seed's last audited t (None with < 2 seeds)."""
    name, values = f"pref_margin/{kind}", []
    for iters in seeds:
        later = [t for t in iters if t > 0 and _metric(iters[t], name) and _finite(_metric(iters[t], name).get("value"))]
        if later:
            values.append(float(_metric(iters[max(later)], name)["value"]))
    return (float(np.std(values, ddof=1)), len(values)) if len(values) >= 2 else (None, len(values))


def _contrast_row(reward: str, kind: str, seeds, tau: float, k: int, measured: bool, sim: SimSettings,
                  target: float, cache: dict) -> str:
    """The MDE of a difference between two rewards at this design (seeds × environments)."""
    sd, n = _seed_spread(seeds, kind)
    S_ = max(len(seeds), 1)
    design = ExperimentDesign(seeds=S_, environments=k, tau=tau, tau_environments=k if measured else None,
                              sigma_seed=sd or 0.0, sigma_seed_seeds=n if sd else None)
    key = ("c", design)
    if key not in cache:
        cache[key] = min_detectable_difference(design, target=target, sims=sim.sims, seed=sim.seed, alpha=sim.alpha)
    mde = cache[key]
    seed_note = (f"σ_seed = {sd:.3g} (sd of {n} seeds' values)" if sd else
                 "σ_seed unknown with one seed: taken as 0, so this MDE is a lower bound")
    cell = f"{mde:.3g}" if mde is not None else "none within 1000 SE"
    tau_note = f"τ = {tau:.3g}" + (f" uncertain (from {k} environments)" if measured else " (default)")
    return f"| {reward} | pref_margin_diff/{kind} | {S_} seeds × {k} environments | {tau_note}; {seed_note} | {cell} |"
