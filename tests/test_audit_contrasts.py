"""audit.contrasts and audit.power_plan: rewards against a baseline across seeds, and planning seeds ×
environments for a difference between two rewards."""

from __future__ import annotations

import math

import pytest

from audit import contrasts as K
from audit import power as P
from audit import stats as S
from audit.power_plan import ExperimentDesign, contrast_power, plan
from audit.results import across_seeds, csv_rows


def _seed(per_env: dict[str, float], t: str = "1") -> dict:
    vals = list(per_env.values())
    m = {"value": sum(vals) / len(vals), "ci_low": None, "ci_high": None, "n": len(vals), "status": "ok"}
    return {"iterations": {t: {"metrics": {"pref_margin/impossible": m}, "counts": {},
                               "per_env": {"pref_margin/impossible": per_env}}}}


REWARDS = {
    "anchored": {"seeds": {"0": _seed({"a": 1.0, "b": 2.0, "c": 3.0}), "1": _seed({"a": 2.0, "b": 3.0, "c": 4.0})}},
    "random": {"seeds": {"0": _seed({"a": 0.0, "b": 0.0, "c": 2.0, "d": 9.0})}},
}


def test_contrast_against_random_by_hand():
    """The environments both have: a, b, c (d only in random). As test_paired_contrast_by_hand:
    1.83333, SE 0.600925, df 1.89888; named `pref_margin_diff/impossible` with the baseline."""
    c = K.reward_contrasts(REWARDS)
    m = c["rewards"]["anchored"]["1"]["pref_margin_diff/impossible"]
    assert c["baseline"] == "random" and m["baseline"] == "random" and m["n"] == 3
    assert (m["value"], m["se"], m["df"]) == pytest.approx((1.833333, 0.600925, 1.89888), abs=1e-5)
    assert m["n_seeds"] == [2, 1] and "random" not in c["rewards"]


def test_no_baseline_no_contrast_and_csv_rows_name_it():
    none = K.reward_contrasts({"anchored": REWARDS["anchored"]})
    assert none["baseline"] is None and "not audited" in none["reason"]
    doc = {"rewards": {r: {**e, "across_seeds": {}} for r, e in REWARDS.items()}, "contrasts": K.reward_contrasts(REWARDS)}
    rows = [r for r in csv_rows(doc) if r["metric"] == "pref_margin_diff/impossible"]
    assert len(rows) == 1 and rows[0]["baseline"] == "random" and rows[0]["seed"] == "all"
    assert K.diff_name("pref_margin/impossible@release") == "pref_margin_diff/impossible@release"


def test_seed_interval_reads_the_per_environment_spread():
    """anchored seeds: 2 and 3, each with per-environment sd 1 over 3 environments, SE 1/√3;
    var = 1/3 + 0.5/2 = 0.58333, SE 0.763763."""
    got = K.seed_interval(REWARDS["anchored"]["seeds"], "1", "pref_margin/impossible")
    assert got["se"] == pytest.approx(0.763763, abs=1e-6) and got["interval"] == "seeds+environments"


def test_plan_power_holds_its_level_and_grows():
    """No difference: the contrast interval excludes 0 on δ's side in ≈ 2.5% of experiments (4 SE
    at 8,000: ± 0.7 points); more seeds or environments raise the power to detect one."""
    d = ExperimentDesign(seeds=3, environments=12, tau=1.0, sigma_seed=0.5)
    assert contrast_power(0.0, d, sims=8000) < 0.035
    low = contrast_power(1.0, d, sims=2000)
    assert contrast_power(1.0, ExperimentDesign(seeds=6, environments=24, tau=1.0, sigma_seed=0.5), sims=2000) > low
    assert d.se == pytest.approx(math.sqrt(2 / 12 + 2 * 0.25 / 3))


def test_plan_lists_environments_per_seed_count():
    rows = plan(1.5, ExperimentDesign(tau=1.0, sigma_seed=0.2), max_seeds=3, sims=1000, max_environments=200)
    assert [r.seeds for r in rows] == [2, 3]
    assert all(r.environments is None or 2 <= r.environments <= 200 for r in rows)
    assert rows[-1].environments is not None and rows[-1].environments <= (rows[0].environments or 10 ** 9)


def test_cli_coverage_json(capsys):
    """The checked command's shape: one entry per k with a false-detection rate (small sims here)."""
    import json

    assert P.main(["--coverage", "-k", "6", "12", "--json", "--sims", "200"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["environments"] for r in out] == [6, 12] and all(r["false_detection"] <= 0.03 for r in out)


def test_cli_plan(capsys):
    assert P.main(["--plan", "--delta", "1.5", "--tau", "1", "--sigma-seed", "0.2", "--max-seeds", "2",
                   "--sims", "500", "--max-environments", "100"]) == 0
    out = capsys.readouterr().out
    assert "2 seeds per reward:" in out and "δ = 1.5" in out


def test_seed_all_interval_is_cut_to_the_metric_range():
    """Two seeds of a share, environments 0, .1, .2 and .8, .9, 1: mean 0.5, the seeds' sd 0.565685, so
    Var ≥ 0.32 / 2 and even a normal quantile puts the ends past −0.28 and 1.28: a share's interval is
    cut to [0, 1]; the same numbers as a margin (unbounded) are not cut."""
    def seed(per: dict[str, float]) -> dict:
        v = sum(per.values()) / len(per)
        metrics = {n: {"value": v, "ci_low": None, "ci_high": None, "n": 3, "status": "ok"}
                   for n in ("pref_accuracy/impossible@release", "pref_margin/impossible")}
        return {"iterations": {"3": {"metrics": metrics, "counts": {},
                                     "per_env": {n: per for n in metrics}}}}
    out = across_seeds({"0": seed({"a": 0.0, "b": 0.1, "c": 0.2}), "1": seed({"a": 0.8, "b": 0.9, "c": 1.0})})["3"]
    share, margin = out["pref_accuracy/impossible@release"], out["pref_margin/impossible"]
    assert (share["mean"], share["ci_low"], share["ci_high"]) == (pytest.approx(0.5), 0.0, 1.0)
    assert margin["ci_low"] < -0.28 and margin["ci_high"] > 1.28


def _share_seed(per_env: dict[str, float], low: float, high: float) -> dict:
    name = "pref_accuracy/impossible"
    m = {"value": sum(per_env.values()) / len(per_env), "ci_low": low, "ci_high": high, "n": 12, "status": "ok"}
    return {"iterations": {"3": {"metrics": {name: m}, "counts": {}, "per_env": {name: per_env}}}}


def test_seeds_whose_environments_all_agree_keep_their_own_interval():
    """Three seeds with every environment's share at 0: the per-environment spread is 0, so each seed's
    SE is its (Wilson) interval's, 0.242494 / (2 · 1.959964) = 0.061862; no environments recorded, so
    df ∞ and the seed = all interval is 0 ± 1.959964 · 0.061862, cut to [0, 0.121247] — not [0, 0]."""
    seeds = {s: _share_seed(dict.fromkeys("abcdefghijkl", 0.0), 0.0, 0.242494) for s in "012"}
    got = K.seed_interval(seeds, "3", "pref_accuracy/impossible")
    assert got["ci_low"] == 0.0 and got["ci_high"] == pytest.approx(0.121247, abs=1e-6)


def test_a_contrast_of_shares_is_cut_to_minus_1_1():
    """Per environment −1, +1, −1 (one seed each): mean −1/3, SE 0.666667 on ~2 df, so its t interval
    reaches about ±3; a difference of two shares lies in [−1, 1]."""
    rewards = {"decisive": {"seeds": {"0": _share_seed({"a": 0.0, "b": 1.0, "c": 0.0}, 0.0, 1.0)}},
               "random": {"seeds": {"0": _share_seed({"a": 1.0, "b": 0.0, "c": 1.0}, 0.0, 1.0)}}}
    m = K.reward_contrasts(rewards)["rewards"]["decisive"]["3"]["pref_accuracy_diff/impossible"]
    assert m["value"] == pytest.approx(-1 / 3) and (m["ci_low"], m["ci_high"]) == (-1.0, 1.0)
    assert S.within(-3.0, 2.0, None) == (-3.0, 2.0)  # an unbounded metric (a margin) is not cut
    assert S.within(-0.3, -0.1, (0.0, 1.0)) == (0.0, 0.0)  # wholly outside: its nearest edge, never low > high
    assert S.within(1.2, 1.5, (0.0, 1.0)) == (1.0, 1.0)


def test_pairwise_lines_read_each_reward_against_each_named_one():
    """`--against`: anchored − random is the baseline contrast above (+1.833), random − anchored its
    negative, each at the last iteration both ran; one named twice is read once; nothing named, no section."""
    lines = K.pairwise_lines(REWARDS, ["random", "anchored"])
    rows = [line for line in lines if line.startswith("| anchored |") or line.startswith("| random |")]
    assert rows[0].startswith("| anchored | random | `pref_margin_diff/impossible` | 1 | +1.833 [")
    assert rows[1].startswith("| random | anchored | `pref_margin_diff/impossible` | 1 | -1.833 [")
    assert rows[0].endswith("| 3 | 2 vs 1 |") and len(rows) == 2
    assert len(K.pairwise_lines(REWARDS, ["random", "random"])) == len(K.pairwise_lines(REWARDS, ["random"])) == 8
    assert K.pairwise_lines(REWARDS, []) == []
