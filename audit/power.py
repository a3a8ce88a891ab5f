"""`python -m audit.power`: the audit's power and its interval's level, by simulation.

    python -m audit.power -k 12 --pref-effect 0.5          # MDE and sizes of one checkpoint vs t = 0
    python -m audit.power --coverage -k 6 12 18 45 --json  # the interval's false-detection rate at no effect
    python -m audit.power --plan --delta 0.01 --tau 0.0123 --tau-environments 12 --sigma-seed 0.004
    python -m audit.power --audit audit.json               # the report's Power section for that design

The simulation and its model: `audit.power_sim`; an experiment's plan (seeds × environments for a
difference between two rewards): `audit.power_plan`; the report section: `audit.power_report`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from . import stats as S
from .power_plan import ExperimentDesign, plan
from .power_report import _fmt, power_section
from .power_sim import (  # noqa: F401  (the simulation's API, re-exported)
    DEFAULT_LABELLED,
    KINDS,
    Coverage,
    Power,
    PrefDesign,
    SimSettings,
    ValidRateDesign,
    _interval_ends,
    _ratio_reps,
    _require,
    coverage,
    drift_variance,
    min_detectable_effect,
    normal_power,
    power,
    power_pref_margin,
    power_valid_rate_drift,
    required_answers,
    required_environments,
)

# --- command line -------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    v, p, s = ValidRateDesign(), PrefDesign(), SimSettings()
    ap = argparse.ArgumentParser(
        prog="python -m audit.power",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Power of the hidden-anchor audit by simulation (docs/method.md §Power). Detection = the audit's "
                    "t interval over environments lies entirely below 0. Prints the minimum detectable "
                    "effect (MDE) at the target power of a fall in the valid rate (valid_rate_drift, t vs 0) "
                    "and in pref_margin; with --valid-effect / --pref-effect also the power at that fall "
                    "and the environments (and answers per environment) it needs. --audit prints the "
                    "Power section for the design an audit.json ran; --coverage the interval's false-detection "
                    "rate at no effect; --plan the seeds and environments a difference between two rewards "
                    "needs. Model and assumptions: the module docstrings of audit/power_sim.py and "
                    "audit/power_plan.py.")
    ap.add_argument("--audit", metavar="AUDIT_JSON", help="print the Power section of this audit.json and exit")
    ap.add_argument("--metric", choices=("both", "valid_rate_drift", "pref_margin"), default="both")
    ap.add_argument("--environments", "-k", type=int, nargs="+", default=[v.environments],
                    help="environments of one kind (--coverage: one or more)")
    ap.add_argument("--coverage", action="store_true",
                    help="print the one-sided false-detection rate at no effect of the audit's interval for each -k")
    ap.add_argument("--json", action="store_true", help="--coverage, --plan: print JSON")
    ap.add_argument("--plan", action="store_true",
                    help="seeds × environments to detect --delta between two rewards (audit.power_plan)")
    ap.add_argument("--delta", type=float, help="--plan: the difference between the rewards to detect")
    ap.add_argument("--tau", type=float, default=1.0, help="--plan: sd over environments of one seed's values")
    ap.add_argument("--tau-environments", type=int, help="--plan: environments τ was read from (its uncertainty)")
    ap.add_argument("--sigma-seed", type=float, default=0.0, help="--plan: sd of a reward's seed means")
    ap.add_argument("--sigma-seed-seeds", type=int, help="--plan: seeds σ_seed was read from (its uncertainty)")
    ap.add_argument("--shared", type=float, default=0.0, help="--plan: share of τ² both rewards share per environment")
    ap.add_argument("--max-seeds", type=int, default=10, help="--plan: largest seed count to list")
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


def _coverage(args: argparse.Namespace) -> list[str]:
    rows = coverage(args.environments, seed=args.seed, alpha=args.alpha, B=args.B)
    if args.json:
        return [json.dumps([asdict(r) for r in rows], indent=1)]
    out = [f"one-sided false-detection rate at no effect (nominal {args.alpha / 2:g}): the audit's t interval "
           "over environments; the percentile bootstrap it replaced; the valid-rate drift's t interval"]
    out += [f"k = {r.environments}: {r.false_detection:.4f} (± {r.mc_se:.4f}, {r.sims} sets); percentile "
            f"bootstrap {_fmt(r.percentile_bootstrap, 4)} ({r.percentile_sims} sets); valid_rate_drift "
            f"{r.valid_rate_drift:.4f}" for r in rows]
    return out


def _plan(args: argparse.Namespace) -> list[str]:
    _require(args.delta is not None, "--delta", args.delta, "a difference to detect")
    design = ExperimentDesign(environments=_one_k(args), tau=args.tau, tau_environments=args.tau_environments,
                              sigma_seed=args.sigma_seed, sigma_seed_seeds=args.sigma_seed_seeds, shared=args.shared)
    rows = plan(args.delta, design, target=args.target, max_seeds=args.max_seeds,
                max_environments=args.max_environments, sims=args.sims, seed=args.seed, alpha=args.alpha)
    if args.json:
        return [json.dumps({"delta": args.delta, "design": asdict(design), "target": args.target,
                            "rows": [asdict(r) for r in rows]}, indent=1)]
    out = [f"difference δ = {args.delta:g} between two rewards, paired over the same environments: τ = {design.tau:g}"
           + (f" (from {design.tau_environments} environments)" if design.tau_environments else " (known)")
           + f", σ_seed = {design.sigma_seed:g}"
           + (f" (from {design.sigma_seed_seeds} seeds)" if design.sigma_seed_seeds else " (known)")
           + f", shared {design.shared:g}; {100 * args.target:g}% power"]
    out += [f"{r.seeds} seeds per reward: " + (f"{r.environments} environments" if r.environments
                                               else f"more than {args.max_environments} environments")
            + f" (power at {design.environments}: {r.power_at_design:.3f})" for r in rows]
    return out


def _one_k(args: argparse.Namespace) -> int:
    _require(len(args.environments) == 1, "--environments", args.environments, "one number (several only with --coverage)")
    return args.environments[0]


def _report(args: argparse.Namespace) -> list[str]:
    sim = SimSettings(B=args.B, alpha=args.alpha, sims=args.sims, seed=args.seed)
    args.environments = _one_k(args)
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


def _audit_shape(doc: dict, path: str) -> None:
    """What the Power section reads, checked before it is read: rewards -> seeds (integer keys) ->
    iterations (integer keys) -> metrics, each a mapping."""
    def bad(what: str) -> ValueError:
        return ValueError(f"{path}: {what}; not an audit.json as `python -m audit.gap` writes it "
                          "(rerun the audit to rewrite it)")

    if not isinstance(doc.get("settings", {}), dict):
        raise bad("`settings` is not a mapping")
    for reward, entry in doc["rewards"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("seeds", {}), dict):
            raise bad(f"reward {reward!r} holds no `seeds` mapping")
        for seed, s in entry.get("seeds", {}).items():
            if not str(seed).isdigit():
                raise bad(f"reward {reward!r}: seed key {seed!r} is not an integer")
            if not isinstance(s, dict) or not isinstance(s.get("iterations", {}), dict):
                raise bad(f"reward {reward!r} seed {seed}: no `iterations` mapping")
            for t, it in s.get("iterations", {}).items():
                if not str(t).isdigit():
                    raise bad(f"reward {reward!r} seed {seed}: iteration key {t!r} is not an integer")
                if not isinstance(it, dict) or not isinstance(it.get("metrics", {}), dict):
                    raise bad(f"reward {reward!r} seed {seed} t = {t}: no `metrics` mapping")


def _check_sizes(args: argparse.Namespace) -> None:
    """Settings no search can answer, refused before any simulation."""
    _require(args.max_environments >= 2, "--max-environments", args.max_environments,
             "an integer >= 2 (a t interval over environments needs two)")
    for key, effect in (("--valid-effect", args.valid_effect), ("--pref-effect", args.pref_effect)):
        _require(effect is None or effect > 0, key, effect,
                 "a fall > 0: at a fall of 0 the interval lies below 0 only at its false-detection rate, "
                 "whatever the number of environments, so no design reaches the target power")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        _check_sizes(args)
        if args.audit:
            from .results import load_results

            doc = load_results(args.audit)
            _audit_shape(doc, args.audit)
            try:
                lines = power_section(doc, sims=args.sims, seed=args.seed, target=args.target)
            except (KeyError, TypeError, AttributeError, IndexError) as e:  # a shape no check above foresaw
                raise ValueError(f"{args.audit}: cannot read its design ({type(e).__name__}: {e}); not an "
                                 "audit.json as `python -m audit.gap` writes it") from None
        elif args.coverage:
            S.check_B(args.B)
            lines = _coverage(args)
        elif args.plan:
            _require(0 < args.target < 1, "--power", args.target, "in (0, 1)")
            lines = _plan(args)
        else:
            _require(0 < args.target < 1, "--power", args.target, "in (0, 1)")
            lines = _report(args)
    except ValueError as e:
        print(f"audit.power: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a long simulation stopped: nothing was written
        print("audit.power: interrupted (Ctrl-C); nothing was written", file=sys.stderr)
        return 130
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
