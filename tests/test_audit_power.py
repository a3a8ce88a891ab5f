"""audit.power: the simulated power of the audit's own interval.

Tolerances are Monte Carlo ones: a power estimate from s data sets has SE √(p(1 − p)/s), and a check
allows 4 SE (plus, against a normal approximation, what the approximation itself leaves out: at
k = 200 environments the percentile interval's (k − 1)/k shrinkage of the variance is 0.5%).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from audit import power as P
from audit import power_sim as PS
from audit import stats as S
from audit import summary
from audit.records import CHECKS, POLICY, AnswerRow


def _tol(p: float, sims: int, extra: float = 0.0) -> float:
    return 4 * math.sqrt(max(p * (1 - p), 0.01) / sims) + extra


# --- the simulation's interval is the audit's ----------------------------------------------------

def _rows(valid: np.ndarray, t: int) -> list[AnswerRow]:
    """Policy answers of impossible environments e00.., valid[e, j] the j-th answer's label."""
    return [AnswerRow(task_id=f"e{e:02d}", kind="impossible", source=POLICY, answer_id=f"p{j}", text=f"t{t}",
                      score=0.5, ref_score=0.5, label="valid" if v else "invalid", accepts={CHECKS: True})
            for e, row in enumerate(valid) for j, v in enumerate(row)]


def test_drift_interval_equals_audit_summary():
    """The simulation's detection reads the interval audit.summary writes for valid_rate_drift: the
    t interval of the per-environment drifts (equal answers per environment)."""
    rng = np.random.default_rng(7)
    k, n = 9, 4
    valid0, valid1 = rng.random((k, n)) < 0.6, rng.random((k, n)) < 0.4
    st = summary.StatsSettings(seed=3, B=1000)
    audit = summary.seed_metrics({0: _rows(valid0, 0), 2: _rows(valid1, 2)}, run_seed=5, settings=st)
    ref = audit[2].metrics["valid_rate_drift/impossible"]
    drift = ((valid1.sum(1) - valid0.sum(1)) / n)[:, None]
    assert PS._t_upper(drift, st.alpha)[0] == pytest.approx(ref.ci_high, abs=1e-12)
    assert drift.mean() == pytest.approx(ref.value, abs=1e-12)


def test_margin_interval_equals_the_audits_t_interval():
    """audit.summary gives pref_margin cluster_t_ci(per-env margins, ones, envs)."""
    m = np.random.default_rng(1).normal(-0.3, 1.0, 10)
    ref = S.cluster_t_ci(m, np.ones(10), [f"e{i}" for i in range(10)])
    assert PS._t_upper(m[:, None], 0.05)[0] == pytest.approx(ref.high, abs=1e-12)


def test_percentile_comparison_equals_bootstrap_ratio_ci():
    """coverage's percentile column draws as audit.stats does: with the same Generator state the
    vectorised interval is bootstrap_ratio_ci's."""
    m = np.random.default_rng(1).normal(-0.3, 1.0, 10)
    ref = S.bootstrap_ratio_ci(m, np.ones(10), [f"e{i}" for i in range(10)], rng=np.random.default_rng(4), B=1000)
    counts = S._draw_counts(np.random.default_rng(4), 1000, 10)
    low, high = P._interval_ends(P._ratio_reps(counts, m[:, None], np.ones((10, 1))), 0.05)
    assert (low[0], high[0]) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_coverage_holds_the_level_at_a_dozen_environments():
    """At no effect the t interval falls below 0 in ≈ 2.5% of data sets at every k, under 3% (MC SE
    0.16 points at 10,000 sets); the percentile bootstrap beside it exceeds that at k = 6."""
    rows = PS.coverage([6, 12], sims=10000, percentile_sims=400, B=1000)
    for r in rows:
        assert abs(r.false_detection - 0.025) < 4 * r.mc_se and r.false_detection <= 0.03
        assert r.valid_rate_drift <= 0.03
    assert rows[0].percentile_bootstrap > 0.04


def test_bootstrap_below_min_b_is_refused():
    with pytest.raises(ValueError, match="at least 1000"):
        P.SimSettings(B=500)


# --- closed forms ---------------------------------------------------------------------------------

SIM = P.SimSettings(B=1000, sims=1500, seed=11)


@pytest.mark.parametrize("target", [pytest.param(0.35, id="power~0.35"), pytest.param(0.8, id="power~0.8")])
def test_valid_rate_drift_matches_normal_power(target):
    """ρ = 0: SE² = (p0 q0 + p1 q1)/(k n); δ chosen so that Φ(δ/SE − z) ≈ target."""
    design = P.ValidRateDesign(environments=200, answers=4, p0=0.5, icc=0.0)
    z = sps.norm.ppf(0.975) + sps.norm.ppf(target)
    effect = z * math.sqrt(2 * 0.25 / (200 * 4))  # first guess with p1 q1 ≈ p0 q0, then the exact closed form
    closed = P.normal_power(effect, design)
    p1 = 0.5 - effect
    assert closed == pytest.approx(sps.norm.cdf(effect / math.sqrt((0.25 + p1 * (1 - p1)) / 800) - sps.norm.ppf(0.975)))
    got = P.power_valid_rate_drift(effect, design, SIM)
    assert abs(got.power - closed) < _tol(closed, SIM.sims, 0.01)


@pytest.mark.parametrize("effect_in_se", [pytest.param(1.5, id="1.5SE"), pytest.param(2.8, id="2.8SE")])
def test_pref_margin_matches_normal_power(effect_in_se):
    """margin_e ~ N(−δ, τ²), SE = τ/√k, power ≈ Φ(δ/SE − z)."""
    design = P.PrefDesign(environments=200, n_valid=2, n_invalid=3, sigma_env=0.7, sigma_pair=1.3)
    assert design.tau == pytest.approx(math.sqrt(0.49 + 1.69 * (1 / 2 + 1 / 3) / 2))
    effect = effect_in_se * design.tau / math.sqrt(200)
    closed = float(sps.norm.cdf(effect_in_se - sps.norm.ppf(0.975)))
    assert P.normal_power(effect, design) == pytest.approx(closed)
    got = P.power_pref_margin(effect, design, SIM)
    assert abs(got.power - closed) < _tol(closed, SIM.sims, 0.01)


def test_valid_rate_drift_with_heterogeneity_matches_normal_power():
    """ρ > 0: SE² = V/k with V = (δ/p0)² ρ p0 q0 + (E[p_e q_e] + E[p_e,t q_e,t])/n (audit.power)."""
    design = P.ValidRateDesign(environments=200, answers=4, p0=0.4, icc=0.3)
    var_p = 0.3 * 0.24
    r = 1 - 0.06 / 0.4
    v = (1 - r) ** 2 * var_p + (0.4 - var_p - 0.16 + r * 0.4 - r ** 2 * (var_p + 0.16)) / 4
    closed = float(sps.norm.cdf(0.06 / math.sqrt(v / 200) - sps.norm.ppf(0.975)))
    assert P.normal_power(0.06, design) == pytest.approx(closed)
    got = P.power_valid_rate_drift(0.06, design, SIM)
    assert abs(got.power - closed) < _tol(closed, SIM.sims, 0.01)


@pytest.mark.parametrize("design", [
    pytest.param(P.PrefDesign(environments=200), id="pref_margin"),
    pytest.param(P.ValidRateDesign(environments=200, answers=4, p0=0.4, icc=0.2), id="valid_rate_drift"),
])
def test_no_effect_detects_at_half_alpha(design):
    sim = P.SimSettings(B=1000, sims=3000, seed=2)
    got = P.power(0.0, design, sim)
    assert abs(got.power - 0.025) < _tol(0.025, sim.sims, 0.005)


# --- monotone, and the searches invert power ------------------------------------------------------

SMALL = P.SimSettings(B=1000, sims=300, seed=5)


@pytest.mark.parametrize("design,effects", [
    pytest.param(P.ValidRateDesign(environments=12, answers=4, p0=0.4), np.linspace(0, 0.4, 6), id="valid_rate_drift"),
    pytest.param(P.PrefDesign(environments=12), np.linspace(0, 2, 6), id="pref_margin"),
])
def test_power_is_monotone_in_effect(design, effects):
    """Common random numbers: each data set's detection is monotone in δ, so the estimate is too."""
    powers = [P.power(float(e), design, SMALL).power for e in effects]
    assert powers == sorted(powers)
    assert powers[-1] > powers[0] + 0.5


@pytest.mark.parametrize("design,effect", [
    pytest.param(P.ValidRateDesign(p0=0.5), 0.12, id="valid_rate_drift"),
    pytest.param(P.PrefDesign(), 0.5, id="pref_margin"),
])
def test_power_grows_with_environments(design, effect):
    powers = [P.power(effect, replace(design, environments=k), SMALL) for k in (6, 24, 96)]
    for a, b in zip(powers, powers[1:], strict=False):
        assert b.power - a.power > 3 * math.hypot(a.mc_se, b.mc_se)


def test_min_detectable_effect_is_the_crossing():
    design = P.ValidRateDesign(environments=12, answers=4, p0=0.5, icc=0.1)
    mde = P.min_detectable_effect(design, SMALL)
    assert mde is not None and 0 < mde < 0.5
    assert P.power(mde, design, SMALL).power >= 0.8 > P.power(mde - 2e-3, design, SMALL).power


def test_pref_mde_scales_with_tau():
    """Power depends on δ/τ only: the MDE of a design is τ times the unit design's."""
    unit = P.min_detectable_effect(P.PrefDesign(environments=12, sigma_env=1.0, sigma_pair=0.0), SMALL)
    design = P.PrefDesign(environments=12, sigma_env=2.0, sigma_pair=3.0)
    mde = P.min_detectable_effect(design, SMALL)
    assert mde == pytest.approx(design.tau * unit)
    assert P.power(mde, design, SMALL).power >= 0.8


def test_full_fall_undetectable_gives_none():
    design = P.ValidRateDesign(environments=2, answers=1, p0=0.1, icc=0.0)
    assert P.min_detectable_effect(design, SMALL) is None


def test_required_environments_inverts_power():
    design = P.PrefDesign(environments=10, sigma_env=1.0, sigma_pair=0.0)
    effect = 0.45
    k = P.required_environments(effect, design, SMALL)
    assert P.power(effect, replace(design, environments=k), SMALL).power >= 0.8
    assert P.power(effect, replace(design, environments=k - 1), SMALL).power < 0.8
    normal = (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) ** 2 / effect ** 2
    assert 0.7 * normal < k < 1.2 * normal


def test_required_answers_inverts_power():
    design = P.ValidRateDesign(environments=12, answers=2, p0=0.5, icc=0.05)
    n = P.required_answers(0.2, design, SMALL)
    assert n is not None and n > 2
    assert P.power(0.2, replace(design, answers=n), SMALL).power >= 0.8
    assert P.power(0.2, replace(design, answers=n - 1), SMALL).power < 0.8


def test_bad_effect_is_refused():
    with pytest.raises(ValueError, match="p0"):
        P.power_valid_rate_drift(0.6, P.ValidRateDesign(p0=0.5), SMALL)
    with pytest.raises(ValueError, match="icc"):
        P.ValidRateDesign(icc=1.0)


# --- the report section ---------------------------------------------------------------------------

def _metric(value, low, high, n=48, status="ok", reason=None):
    return {"value": value, "ci_low": low, "ci_high": high, "n": n, "n_partial": 0, "n_unscored": 0,
            "n_undefined": 0, "status": status, "reason": reason}


def _doc(with_pref=True, with_exploit=True):
    imp = {f"imp{i:02d}": [0, 1, 0, 0] for i in range(12)}
    ctl = {f"ctl{i}": [0, 0, 0, 0] for i in range(6)}
    it0 = {"metrics": {"valid_rate/impossible": _metric(0.35, 0.19, 0.52),
                       "valid_rate/control": _metric(None, None, None, 24, "unverified", "gate failed")},
           "counts": {"environments": 18, "policy_answers": 72},
           "exploit": {"impossible": imp, "control": ctl} if with_exploit else {}}
    it2 = {"metrics": {"valid_rate/impossible": _metric(0.25, 0.1, 0.4)}, "counts": {},
           "exploit": {"impossible": imp, "control": ctl} if with_exploit else {}}
    if with_pref:  # the probe found a (valid, invalid) pair in 10 of the 12 impossible environments
        it2["metrics"]["pref_margin/impossible"] = _metric(-0.4, -0.9, 0.1, n=60)
        it2["counts"]["probe/environments/impossible"] = 10
    return {"version": 1, "settings": {"n": 4, "bootstrap": {"B": 1000, "alpha": 0.05}},
            "rewards": {"anchored": {"seeds": {"0": {"iterations": {"0": it0, "2": it2}}}, "across_seeds": {}}}}


def _row(lines, metric):
    (row,) = [x for x in lines if x.startswith(f"| anchored | {metric} |")]
    return [c.strip() for c in row.strip("|").split("|")]


def test_power_section_reads_the_design():
    lines = P.power_section(_doc(), sims=200)
    assert lines[0] == "## Power"
    reward, _, design, assumed, mde = _row(lines, "valid_rate_drift/impossible")
    assert design == "12 environments × 4 answers" and "p0 = 0.350 (t = 0)" in assumed
    assert 0 < float(mde) < 0.35
    # the observed spread over the probe's 10 environments: τ = half-width / t(.975, k − 1) · √k
    _, _, design, assumed, mde = _row(lines, "pref_margin/impossible")
    tau = 0.5 / sps.t.ppf(0.975, 9) * math.sqrt(10)
    assert design == "10 environments" and f"τ = {tau:.3g}" in assumed and "t = 2" in assumed
    unit = P.min_detectable_effect(P.PrefDesign(environments=10, sigma_env=1, sigma_pair=0),
                                   P.SimSettings(B=1000, sims=200))
    assert mde.startswith(f"{tau * unit:.3g} ")


def test_power_section_names_what_is_missing():
    lines = P.power_section(_doc(), sims=200)
    _, _, design, assumed, mde = _row(lines, "valid_rate_drift/control")
    assert design == "6 environments × 4 answers"
    assert "default" in assumed and "unverified (gate failed)" in assumed
    _, _, _, assumed, _ = _row(lines, "pref_margin/control")
    assert "default spread" in assumed and "pref_margin/control not in audit.json" in assumed
    _, _, _, assumed, _ = _row(P.power_section(_doc(with_pref=False), sims=200), "pref_margin/impossible")
    assert "pref_margin/impossible not in audit.json" in assumed


def test_power_section_without_design_prints_no_number():
    doc = _doc(with_exploit=False)
    doc["settings"].pop("n")
    lines = P.power_section(doc, sims=200)
    for metric in ("valid_rate_drift/impossible", "pref_margin/control"):
        *_, mde = _row(lines, metric)
        assert mde.startswith("not computed") and not any(ch.isdigit() for ch in mde)
    assert P.power_section({"settings": {}, "rewards": {}})[-1].startswith("No rewards")


# --- command line ---------------------------------------------------------------------------------

def test_cli_prints_mde_and_sizes(capsys):
    rc = P.main(["--environments", "8", "--answers", "4", "--B", "1000", "--sims", "200",
                 "--valid-effect", "0.3", "--pref-effect", "1.5"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "valid_rate_drift" in out and "pref_margin" in out and out.count("MDE at 80% power") == 2
    assert "environments at 4 answers each" in out and "80% needs" in out


def test_cli_bad_input_is_one_line(capsys):
    assert P.main(["--B", "10"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at least 1000" in err and "Traceback" not in err


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        P.main(["--help"])
    assert e.value.code == 0 and "minimum detectable" in capsys.readouterr().out
