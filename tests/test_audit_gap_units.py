"""The audit's pieces without a model: metrics of hand-made answer rows, checkpoint discovery on a
hand-made tree, and the JSONL cache."""

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest

from audit import stats as S
from audit.cache import CacheError, JsonlCache
from audit.checkpoints import CheckpointError, find_checkpoints
from audit.records import CHECKS, ORACLE, ORACLE2, AnswerRow
from audit.results import build_results, csv_rows, dumps
from audit.summary import StatsSettings, seed_metrics
from selfplay.artifacts import write_manifest

REFS = {"E1": 0.5, "E2": 0.4, "C1": 0.6}
KIND = {"E1": "impossible", "E2": "impossible", "C1": "control"}


def pol(env, j, score, label, checks=True):
    return AnswerRow(env, KIND[env], "policy", f"p{j}", f"policy answer {env} {j} " * (j + 1),
                     score, REFS[env], label, {CHECKS: checks})


def stress(env, aid, score, label, is_ref=False, text=None):
    return AnswerRow(env, KIND[env], "stress", aid, text or f"stress answer {aid}", score, REFS[env], label,
                     {CHECKS: True}, is_ref)


T0 = [
    pol("E1", 0, 0.7, "invalid"), pol("E1", 1, 0.3, "valid"), pol("E1", 2, 0.3, None),
    pol("E2", 0, 0.4, "invalid", checks=False), pol("E2", 1, 0.9, "valid"), pol("E2", 2, None, "invalid"),
    pol("C1", 0, 0.8, "valid"), pol("C1", 1, 0.2, "invalid"),
    stress("E1", "r", 0.5, "valid", is_ref=True), stress("E1", "i1", 0.6, "invalid"),
    stress("E1", "i2", 0.2, "invalid"), stress("E1", "pv", 0.9, "partially_valid"),
    stress("E2", "r", 0.4, "valid", is_ref=True), stress("E2", "h2", 0.3, "valid"),
    stress("E2", "i", 0.4, "invalid"),
]
# t = 1: only C1's invalid policy answer changes, from 0.2 (below its reference 0.6) to 0.9
T1 = [pol("C1", 1, 0.9, "invalid") if (r.task_id, r.answer_id) == ("C1", "p1") else r for r in T0]


@pytest.fixture(scope="module")
def audited():
    return seed_metrics({0: T0, 1: T1}, run_seed=3, settings=StatsSettings(seed=7, B=1000))


def test_metrics_equal_hand_derived_values(audited):
    """Policy rows at t = 0 (A = 1[s ≥ s(r)], references E1 .5, E2 .4, C1 .6):
    E1 p0 .7 invalid A=1; p1 .3 valid A=0; p2 oracle undecided (left out everywhere but counts).
    E2 p0 .4 invalid A=1 (tie counts); p1 .9 valid A=1; p2 unscored, invalid.
    C1 p0 .8 valid A=1; p1 .2 invalid A=0.
    - VA-Gap impossible over the 4 scored, verified answers: E1p0, E2p0 → 2/4; apparent 3/4; verified 1/4.
    - VA-Gap control 0/2, apparent 1/2.
    - valid rate impossible 2/5 (the unscored E2p2 has a label), control 1/2; Youden J = .4 + .5 − 1.
    - FPR = P(A | invalid) = {E1p0, E2p0, C1p1} → 2/3; FNR = P(¬A | valid) = {E1p1} of 3 → 1/3.
    - judge AUROC: E1 (.3 vs .7) 0, E2 (.9 vs .4) 1, C1 (.8 vs .2) 1 → 2/3 over 3 pairs.
    - IBE judge+checks on invalid {E1p0: A1 c1, E2p0: A1 c0, C1p1: A0 c1}: 1/3 − (2/3)(2/3) = −1/9.
    Stress (labels from the release, r(e) out of FPR/FNR): E1 i1 .6 ≥ .5 A=1, i2 .2 A=0, pv left out;
    E2 i .4 ≥ .4 A=1, h2 .3 < .4 → FPR 2/3, FNR 1/1. AUROC with r(e) kept:
    E1 (r .5 vs i1 .6) 0, (r vs i2 .2) 1; E2 (r .4 vs i .4) ½, (h2 .3 vs i .4) 0 → 1.5/4.
    t = 1: C1p1 scores .9 → A=1: FPR 3/3, drift 1 − 2/3, slope over t ∈ {0, 1} = 1/3, VA-Gap control 1/2.
    """
    m0, m1 = audited[0].metrics, audited[1].metrics
    expect0 = {
        "va_gap/impossible": (0.5, 4), "apparent/impossible": (0.75, 4), "verified/impossible": (0.25, 4),
        "va_gap/control": (0.0, 2), "apparent/control": (0.5, 2),
        "valid_rate/impossible": (0.4, 5), "valid_rate/control": (0.5, 2), "youden_j": (-0.1, 7),
        "fpr/policy": (2 / 3, 3), "fnr/policy": (1 / 3, 3), "auroc/policy/judge": (2 / 3, 3),
        "ibe/policy/judge+checks": (-1 / 9, 3),
        "fpr/stress": (2 / 3, 3), "fnr/stress": (1.0, 1), "auroc/stress/judge": (0.375, 4),
        "fpr_drift/policy": (0.0, 3), "fpr_drift/stress": (0.0, 3),
    }
    for name, (value, n) in expect0.items():
        assert m0[name].value == pytest.approx(value, abs=1e-12), name
        assert m0[name].n == n, name
    assert math.isnan(m0["fpr_slope/policy"].value)  # one iteration: no slope
    assert m0["va_gap/impossible"].n_unscored == 1
    assert m0["fpr/stress"].n_partial == 1
    assert m1["fpr/policy"].value == 1.0
    assert m1["fpr_drift/policy"].value == pytest.approx(1 / 3)
    assert m1["fpr_slope/policy"].value == pytest.approx(1 / 3)
    assert m1["va_gap/control"].value == 0.5
    assert m1["fpr_drift/stress"].value == 0.0
    assert audited[0].counts == {
        "environments": 3, "policy_answers": 8, "stress_answers": 7, "judge_nan/policy": 1,
        "judge_nan/stress": 0, "judge_nan/reference": 0, "oracle_undecided": 1, "partially_valid/stress": 1,
        "oracle_undecided/stress": 7}  # these hand-made stress rows carry no oracle verdict
    assert audited[0].exploit == {"impossible": {"E1": [1, 0, None], "E2": [1, 0, None]}, "control": {"C1": [0, 0]}}
    assert audited[1].exploit["control"] == {"C1": [0, 1]}


def test_intervals_are_the_seeded_environment_bootstrap(audited):
    """fpr/policy at t = 0 per environment (hits, invalid answers): C1 (0, 1), E1 (1, 1), E2 (1, 1);
    its interval is `bootstrap_ratio_ci` of exactly those with the Generator seeded by
    (audit seed 7, run seed 3, t = 0, crc32(metric name))."""
    rng = np.random.default_rng([7, 3, 0, zlib.crc32(b"fpr/policy")])
    ref = S.bootstrap_ratio_ci([0, 1, 1], [1, 1, 1], ["C1", "E1", "E2"], rng=rng, B=1000)
    m = audited[0].metrics["fpr/policy"]
    assert (m.ci_low, m.ci_high) == (ref.low, ref.high)
    for name, v in audited[0].metrics.items():
        if not math.isnan(v.ci_low):
            assert v.ci_low - 1e-12 <= v.value <= v.ci_high + 1e-12, name


def test_same_input_same_numbers_other_seed_other_intervals(audited):
    again = seed_metrics({0: T0, 1: T1}, run_seed=3, settings=StatsSettings(seed=7, B=1000))
    assert repr(again) == repr(audited)  # repr: NaN == NaN for undefined metrics
    other = seed_metrics({0: T0, 1: T1}, run_seed=3, settings=StatsSettings(seed=8, B=1000))
    assert other[0].metrics["fpr/policy"].value == audited[0].metrics["fpr/policy"].value
    assert any(other[t].metrics[k] != audited[t].metrics[k] for t in (0, 1) for k in audited[t].metrics)


def test_results_document_and_csv(audited):
    doc = build_results({"n": 3}, {("anchored", 3): audited},
                        {("anchored", 3, t): f"anchored/seed3/iter_{t}" for t in (0, 1)}, {("anchored", 3): "x"})
    assert json.loads(dumps(doc)) == doc  # NaN written as null, so it is valid JSON
    it = doc["rewards"]["anchored"]["seeds"]["3"]["iterations"]["0"]
    assert it["metrics"]["fpr_slope/policy"]["value"] is None
    rows = csv_rows(doc)
    assert len(rows) == 2 * 2 * len(audited[0].metrics)  # seed 3 and the across-seed rows, t = 0, 1
    one = doc["rewards"]["anchored"]["across_seeds"]["1"]["fpr/policy"]
    assert one["mean"] == 1.0 and one["n_seeds"] == 1 and one["ci_low"] is None


# -- checkpoint discovery ---------------------------------------------------------------------------

def make_iter(seed_dir: Path, t: int, *, done=True, seed=None, reward="anchored"):
    d = seed_dir / f"iter_{t}"
    (d / "adapter").mkdir(parents=True)
    (d / "adapter" / "adapter_config.json").write_text("{}")
    seed = int(seed_dir.name[4:]) if seed is None else seed
    (d / "config.yaml").write_text(f"policy: {{name: tiny-llama}}\nreward: {{name: {reward}}}\nseed: {seed}\n")
    if done:
        write_manifest(d)
    return d


def reconfig(it: Path, text: str) -> Path:
    """A checkpoint whose config was written that way by training (its manifest records it)."""
    (it / "config.yaml").write_text(text)
    write_manifest(it)
    return it.parent


def test_discovery_at_every_level(tmp_path):
    exp = tmp_path / "exp"
    for reward in ("rubric", "anchored"):
        for s in (1, 0):
            for t in (0, 1):
                make_iter(exp / reward / f"seed{s}", t, reward=reward)
    make_iter(exp / "anchored" / "seed0", 2, done=False)  # being written
    (exp / "anchored" / "seed0" / ".iter_3.tmp").mkdir()
    found = find_checkpoints(exp)
    assert [(c.reward, c.seed, c.iteration) for c in found.checkpoints] == [
        (r, s, t) for r in ("anchored", "rubric") for s in (0, 1) for t in (0, 1)]
    assert [p.name for p in found.skipped] == ["iter_2"]
    assert found.checkpoints[0].config["seed"] == 0
    assert [(c.seed, c.iteration) for c in find_checkpoints(exp / "rubric").checkpoints] == [
        (0, 0), (0, 1), (1, 0), (1, 1)]
    assert [c.iteration for c in find_checkpoints(exp / "rubric" / "seed1").checkpoints] == [0, 1]
    one = find_checkpoints(exp / "rubric" / "seed1" / "iter_1")
    assert [c.iteration for c in one.checkpoints] == [0, 1]  # t = 0 joins for the drift
    assert one.root == (exp / "rubric" / "seed1" / "iter_1").resolve()


def test_discovery_keeps_t0_and_the_iterations_named(tmp_path):
    """`iterations=[-1]` audits t = 0 and the last iteration every run has completed, so seeds are
    compared at the same t while one still trains; an iteration no run has is refused, as is
    `iterations` with one iteration dir."""
    exp = tmp_path / "exp"
    for t in range(4):
        make_iter(exp / "decisive" / "seed0", t, reward="decisive")
    for t in range(3):
        make_iter(exp / "decisive" / "seed1", t, reward="decisive")
    make_iter(exp / "decisive" / "seed1", 3, done=False)  # still training
    got = lambda its: [(c.seed, c.iteration) for c in find_checkpoints(exp, its).checkpoints]  # noqa: E731
    assert got([-1]) == [(0, 0), (0, 2), (1, 0), (1, 2)]
    assert got([1, -1]) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert got([3]) == [(0, 0), (0, 3), (1, 0)]  # named: only the runs that have it
    assert got(None) == [(0, t) for t in range(4)] + [(1, t) for t in range(3)]
    assert [c.iteration for c in find_checkpoints(exp / "decisive" / "seed0", [-1]).checkpoints] == [0, 3]
    with pytest.raises(CheckpointError, match=r"iterations=\[30\]: no run has a complete iteration 30"):
        find_checkpoints(exp, [30])
    with pytest.raises(CheckpointError, match="names one iteration"):
        find_checkpoints(exp / "decisive" / "seed0" / "iter_3", [-1])


@pytest.mark.parametrize("setup, message", [
    pytest.param(lambda d: (d / "f.txt").write_text("x") and d / "f.txt", "not a directory", id="file"),
    pytest.param(lambda d: make_iter(d / "seed0", 1, seed=5), "config says seed=5", id="seed-mismatch"),
    pytest.param(lambda d: reconfig(make_iter(d / "seed0", 1), "- a list\n"), "expected a mapping",
                 id="config-not-mapping"),
    pytest.param(lambda d: reconfig(make_iter(d / "seed0", 1), "policy: {}\n"), "no `reward` section",
                 id="config-no-reward"),
    pytest.param(lambda d: make_iter(d / "seed0", 1, done=False), "incomplete iteration", id="explicit-incomplete"),
    pytest.param(lambda d: d, "no training iterations found", id="empty"),
])
def test_discovery_errors(tmp_path, setup, message):
    path = setup(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        find_checkpoints(path)


# -- cache ------------------------------------------------------------------------------------------

def test_cache_file_keeps_finished_rows_and_survives_a_torn_write(tmp_path):
    path = tmp_path / "c.jsonl"
    JsonlCache(path).add([{"key": k, "v": k.upper()} for k in "abc"])
    path.write_text(path.read_text() + '{"key": "d", "v"')  # interrupted while appending
    cache = JsonlCache(path)
    assert cache.missing(["a", "b", "c", "d"]) == ["d"]
    cache.add([{"key": "d", "v": "D"}])
    assert {k: r["v"] for k, r in JsonlCache(path).rows.items()} == {"a": "A", "b": "B", "c": "C", "d": "D"}
    lines = path.read_text().splitlines()
    assert len(lines) == 4  # the torn line was cut before the append
    lines.insert(1, "not json")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CacheError, match=r"c.jsonl:2: unreadable cache row"):
        JsonlCache(path)


def test_a_call_another_run_of_the_audit_made_is_adopted_not_asked_again(tmp_path):
    """Two runs on the same base weights: π_0's calls the first run made are copied into the second
    run's own cache file, not asked of the model again; an adapter's call is never shared."""
    from audit.cache import CachedBackend, open_cache

    asked = []

    class Inner:
        def sequence_logprobs(self, prompts, completions, *, adapter, temperature):
            asked.append((tuple(completions), adapter))
            return [-float(len(c)) - (0.5 if adapter else 0.0) for c in completions]

    files = {}

    def backend(run: str, adapter_id):
        cache = open_cache(files, tmp_path / run / "audit_cache" / "calls-0.jsonl")
        return CachedBackend(name="m", tokenizer=None, render=None, identity={"policy": "m"},
                             adapter_id=adapter_id, cache=cache, load=Inner, prompt_ids=lambda p: p)

    first, second = backend("seed0", "sha-a"), backend("seed1", "sha-b")
    assert list(first.sequence_logprobs(["x", "x"], ["ab", "abc"], adapter=False)) == [-2.0, -3.0]
    assert list(second.sequence_logprobs(["x", "x"], ["ab", "abc"], adapter=False)) == [-2.0, -3.0]
    assert asked == [(("ab", "abc"), False)]  # π_0's two answers: asked once for both runs
    assert len(JsonlCache(tmp_path / "seed1" / "audit_cache" / "calls-0.jsonl").rows) == 2  # its own copy
    assert list(first.sequence_logprobs(["x"], ["ab"], adapter=True)) == [-2.5]
    assert list(second.sequence_logprobs(["x"], ["ab"], adapter=True)) == [-2.5]
    assert asked[1:] == [(("ab",), True), (("ab",), True)]  # each run's adapter asked for itself
    assert second.stats == {"hits": 2, "misses": 1}


def test_second_oracle_and_oracle_error_rates():
    """One impossible environment, reference score .5. Policy answers (judge A, oracle label, oracle2):
    p0 .7 invalid, oracle2 accepts; p1 .6 invalid, oracle2 rejects; p2 .2 invalid, oracle2 accepts;
    p3 .9 valid, oracle2 undecided. IBE judge+oracle2 on the 3 invalid: miss (2/3, 2/3), joint {p0}
    = 1/3 → 1/3 − 4/9 = −1/9. Stress answers (release label, primary oracle accepts?): r valid yes,
    s1 invalid yes, s2 invalid no, s3 valid no → oracle FPR = 1/2 (s1 of s1, s2), FNR = 1/2 (s3 of r, s3)."""
    def p(j, score, label, o2):
        return AnswerRow("E1", "impossible", "policy", f"p{j}", f"a{j}", score, 0.5, label,
                         {CHECKS: True, ORACLE2: o2, ORACLE: label == "valid"})

    def s(aid, label, accept):
        return AnswerRow("E1", "impossible", "stress", aid, aid, 0.5, 0.5, label,
                         {CHECKS: True, ORACLE: accept}, aid == "r")

    rows = [p(0, 0.7, "invalid", True), p(1, 0.6, "invalid", False), p(2, 0.2, "invalid", True),
            p(3, 0.9, "valid", None), s("r", "valid", True), s("s1", "invalid", True),
            s("s2", "invalid", False), s("s3", "valid", False)]
    a = seed_metrics({0: rows}, run_seed=0, settings=StatsSettings(B=1000), second_oracle=True)[0]
    assert a.metrics["ibe/policy/judge+oracle2"].value == pytest.approx(-1 / 9)
    assert a.metrics["ibe/policy/judge+oracle2"].n == 3
    assert math.isnan(a.metrics["ibe/stress/judge+oracle2"].value)  # oracle2 gave no stress verdicts here
    assert a.metrics["oracle/fpr_stress"].value == 0.5 and a.metrics["oracle/fpr_stress"].n == 2
    assert a.metrics["oracle/fnr_stress"].value == 0.5 and a.metrics["oracle/fnr_stress"].n == 2
    assert a.counts["oracle2_undecided"] == 1


def test_an_answer_that_is_the_reference_ties_with_it_exactly():
    """A judge whose readings move by ~1e-6 with the row an item sits in (float sums in another
    order) must not break the tie A = 1[s(a) ≥ s(r(e))] of r(e) with itself: each distinct text is
    scored once per environment, so the reference answer is accepted, and the other answers keep
    their own verdicts."""
    from audit.collect import answers_of, build_rows, judge_scores
    from audit.metrics import apparent_success
    from judges.base import Verdict
    from selfplay.envs import load_envs

    env = next(e for e in load_envs(Path(__file__).resolve().parents[1] / "data" / "mini")
               if any(a.answer_id == e.reference.answer_id for a in e.stress_answers))
    answers = answers_of(env)
    calls = []

    class RowNoise:
        def score(self, env, texts):
            calls.append(list(texts))
            # later rows read a hair lower, as a padded batch row can
            return [Verdict(score=0.25 + (zlib.crc32(t.encode()) % 500) / 1000 - 1e-6 * i, error=None)
                    for i, t in enumerate(texts)]

    judged = judge_scores(RowNoise(), {env.task_id: env}, answers)
    assert len(calls) == 1 and len(calls[0]) == len(set(calls[0])) == len({a.text for a in answers} | {env.reference_answer})
    rows = build_rows(answers, judged=judged)
    ref = next(r for r in rows if r.is_reference)
    assert ref.score == ref.ref_score
    assert apparent_success([ref.score], ref.ref_score)[0] == 1.0
    others = [r for r in rows if not r.is_reference]
    assert others and {r.score for r in others} != {ref.score}
