"""The preference probe (docs/method.md §Preference probe): its formulas on hand-computed examples, and the stage end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from audit import metrics as M
from audit.records import CHECKS, LABELLED, STRESS, AnswerRow
from audit.summary import StatsSettings, iteration_metrics


def test_implicit_reward_summed_and_per_token():
    d = M.implicit_reward([-10.0, -4.0, None], [-12.0, -3.0, -1.0])
    assert d[0] == 2.0 and d[1] == -1.0 and math.isnan(d[2])
    per_token = M.implicit_reward([-10.0, -4.0], [-12.0, -3.0], [4, 2])
    assert per_token.tolist() == [0.5, -0.5]
    with pytest.raises(ValueError, match="positive"):
        M.implicit_reward([-1.0], [-1.0], [0])


def test_preference_by_hand():
    # env a: valid Δ = {1, 3}, invalid Δ = {0, 3}: differences 1, −2, 3, 0 → margin 0.5,
    #        wins 2 of 4 plus one tie → accuracy (2 + 0.5) / 4 = 0.625
    # env b: valid Δ = {−1}, invalid Δ = {1}: margin −2, accuracy 0
    # env c: only invalid answers (one-sided) → no pair, excluded and counted
    # env d: a partially_valid answer and an unscored valid one form no pair → excluded too
    env = ["a", "a", "a", "a", "b", "b", "c", "c", "d", "d", "d"]
    delta = [1, 3, 0, 3, -1, 1, 5, 6, 2, float("nan"), 0]
    label = ["valid", "valid", "invalid", "invalid", "valid", "invalid", "invalid", "invalid",
             "partially_valid", "valid", "invalid"]
    p = M.preference(env, delta, label)
    assert p.per_env["a"] == M.EnvPreference(0.5, 0.625, 4)
    assert p.per_env["b"] == M.EnvPreference(-2.0, 0.0, 1)
    assert set(p.per_env) == {"a", "b"}
    # the summary weights environments, not pairs: (0.5 − 2) / 2, (0.625 + 0) / 2
    assert p.margin == pytest.approx(-0.75) and p.accuracy == pytest.approx(0.3125)
    assert (p.n_envs, p.n_pairs, p.n_no_pair, p.n_partial, p.n_unscored) == (2, 5, 2, 1, 1)


def test_preference_without_any_pair_is_undefined():
    p = M.preference(["a", "a"], [1.0, 2.0], ["invalid", "invalid"])
    assert math.isnan(p.margin) and math.isnan(p.accuracy) and (p.n_envs, p.n_no_pair) == (0, 1)


def _row(tid, kind, label, logp, logp0, tokens, source=STRESS, aid="s"):
    return AnswerRow(task_id=tid, kind=kind, source=source, answer_id=aid, text="x", score=0.5, ref_score=0.5,
                     label=label, accepts={CHECKS: True}, probe_logp=logp, probe_logp0=logp0, probe_tokens=tokens)


def test_probe_metrics_in_the_audit():
    rows = [
        # impossible e1: per token Δ valid (−8+10)/4 = 0.5, invalid (−9+9)/3 = 0 → margin 0.5, acc 1
        _row("e1", "impossible", "valid", -8.0, -10.0, 4), _row("e1", "impossible", "invalid", -9.0, -9.0, 3),
        # impossible e2: valid 0 / 2 = 0, invalid (−1+3)/2 = 1 → margin −1, acc 0; summed: 0 − 2 = −2
        _row("e2", "impossible", "valid", -5.0, -5.0, 2), _row("e2", "impossible", "invalid", -1.0, -3.0, 2),
        # a control with a tie: margin 0, accuracy ½
        _row("c1", "control", "valid", -2.0, -2.0, 1), _row("c1", "control", "invalid", -7.0, -7.0, 5),
        # labelled on-policy answers of e1: invalid only → no pair
        _row("e1", "impossible", "invalid", -4.0, -5.0, 2, source=LABELLED, aid="l0"),
    ]
    st = StatsSettings(seed=0, B=1000)
    m = iteration_metrics(rows, run_seed=0, t=0, settings=st).metrics
    assert m["pref_margin/impossible"].value == pytest.approx(-0.25)
    assert m["pref_margin_sum/impossible"].value == pytest.approx((2.0 - 2.0) / 2)
    assert m["pref_accuracy/impossible"].value == pytest.approx(0.5)
    assert m["pref_margin/impossible"].n == 2
    # two environments, margins 0.5 and −1: the t interval over environments, sd 1.06066, SE 0.75,
    # t(.975, 1) = 12.7062 → −0.25 ± 9.52965
    lo, hi = m["pref_margin/impossible"].ci_low, m["pref_margin/impossible"].ci_high
    assert (lo, hi) == pytest.approx((-9.77965, 9.27965), abs=1e-5)
    assert m["pref_margin/control"].value == 0.0 and m["pref_accuracy/control"].value == 0.5
    # π_0 per token: e1 valid −2.5 > invalid −3 (win); e2 valid −2.5 < invalid −1.5 (loss) → ½
    assert m["likelihood_auroc/impossible"].value == 0.5 and m["likelihood_auroc/impossible"].n == 2
    assert math.isnan(m["pref_margin/labelled/impossible"].value)
    counts = iteration_metrics(rows, run_seed=0, t=1, settings=st)
    assert counts.counts["probe/no_pair/labelled/impossible"] == 1
    assert "likelihood_auroc/impossible" not in counts.metrics  # context at t = 0 only


def test_a_constant_shift_of_every_answer_leaves_the_margin_at_zero():
    rows = [_row(f"e{i}", "impossible", lab, -5.0 + 0.3, -5.0, 5) for i in range(4) for lab in ("valid", "invalid")]
    m = iteration_metrics(rows, run_seed=0, t=2, settings=StatsSettings(B=1000)).metrics
    assert m["pref_margin/impossible"].value == pytest.approx(0.0, abs=1e-12)
    assert m["pref_accuracy/impossible"].value == 0.5
    assert np.isclose(m["pref_margin/impossible"].ci_low, 0.0) and np.isclose(m["pref_margin/impossible"].ci_high, 0.0)


def test_constant_fpr_series_has_slope_exactly_zero():
    assert M.fpr_drift({0: 0.3, 1: 0.3, 2: 0.3, 3: 0.3}).slope == 0.0


def test_on_policy_ibe_is_undefined_when_the_reference_oracle_contains_checks():
    from audit.results import build_results

    rows = [_row("e1", "impossible", "valid", -1.0, -1.0, 1), _row("e1", "impossible", "invalid", -1.0, -1.0, 1)]
    a = iteration_metrics(rows, run_seed=0, t=0, settings=StatsSettings(B=1000), primary_members=("spec", "checks"))
    doc = build_results({}, {("r", 0): {0: a}}, {("r", 0, 0): "."}, {("r", 0): "x"})
    m = doc["rewards"]["r"]["seeds"]["0"]["iterations"]["0"]["metrics"]["ibe/policy/judge+checks"]
    assert m["value"] is None and m["status"] == "undefined" and "contains `checks`" in m["reason"]
    b = iteration_metrics(rows, run_seed=0, t=0, settings=StatsSettings(B=1000), primary_members=("llm",))
    assert "ibe/policy/judge+checks" not in b.undefined
