"""Valid-rate drift and the per-kind on-policy FPR/FNR on hand-made answer rows."""

from __future__ import annotations

import math

import pytest

from audit.records import CHECKS, AnswerRow
from audit.summary import StatsSettings, seed_metrics

KIND = {"E1": "impossible", "E2": "impossible", "C1": "control"}


def pol(env, j, score, label):
    return AnswerRow(env, KIND[env], "policy", f"p{j}", f"answer {env} {j}", score, 0.5, label, {CHECKS: True})


T0 = [pol("E1", 0, 0.9, "invalid"), pol("E1", 1, 0.2, "valid"), pol("E2", 0, 0.6, "valid"),
      pol("E2", 1, 0.7, "invalid"), pol("C1", 0, 0.8, "valid"), pol("C1", 1, 0.1, "invalid")]
# t = 1: E1's valid answer turns invalid, C1's invalid one valid
T1 = [pol("E1", 0, 0.9, "invalid"), pol("E1", 1, 0.2, "invalid"), pol("E2", 0, 0.6, "valid"),
      pol("E2", 1, 0.7, "invalid"), pol("C1", 0, 0.8, "valid"), pol("C1", 1, 0.1, "valid")]


def test_valid_rate_drift_and_per_kind_rates_by_hand():
    """Valid rate impossible: t = 0 2/4, t = 1 1/4 → drift −1/4; control 1/2 → 2/2, drift +1/2.
    The interval is a t interval over environments paired across t: E1 drifts −1/2, E2 0, so the SE
    is 1/4 and with 1 degree of freedom −1/4 ± 12.706 × 1/4 reaches past [−1, 1], where a drift of
    two rates lies, and is cut there; the control has one environment, so it has no interval (NaN).
    t = 0, A = 1[s ≥ .5]: impossible invalid {E1p0 A, E2p1 A} → FPR 2/2; valid {E1p1 ¬A, E2p0 A}
    → FNR 1/2; control invalid {C1p1 ¬A} → FPR 0/1, valid {C1p0 A} → FNR 0/1."""
    m = seed_metrics({0: T0, 1: T1}, run_seed=0, settings=StatsSettings(B=1000))
    d_imp, d_ctl = m[1].metrics["valid_rate_drift/impossible"], m[1].metrics["valid_rate_drift/control"]
    assert d_imp.value == pytest.approx(-0.25) and d_ctl.value == pytest.approx(0.5)
    assert (d_imp.ci_low, d_imp.ci_high) == (-1.0, 1.0)
    assert math.isnan(d_ctl.ci_low) and math.isnan(d_ctl.ci_high)
    assert m[0].metrics["valid_rate_drift/impossible"].value == 0.0
    m0 = m[0].metrics
    assert (m0["fpr/policy/impossible"].value, m0["fpr/policy/impossible"].n) == (1.0, 2)
    assert (m0["fnr/policy/impossible"].value, m0["fnr/policy/impossible"].n) == (0.5, 2)
    assert (m0["fpr/policy/control"].value, m0["fnr/policy/control"].value) == (0.0, 0.0)
    assert m0["fpr/policy"].value == pytest.approx(2 / 3)  # pooled: 2 of the 3 invalid answers


def test_fewer_than_1000_resamples_are_refused():
    with pytest.raises(ValueError, match="at least 1000 resamples"):
        StatsSettings(B=999)
