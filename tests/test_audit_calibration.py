"""Verifier calibration and the oracle gate on hand-made labelled answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from audit import calibration as C
from audit import metric_table as T
from audit.collect import Answer, build_rows
from audit.records import CHECKS, ORACLE, AnswerRow, member
from judges.verifiers import verdict_from_row


def ans(label, oracle, checks=True, members=None, source="stress"):
    """A row the primary oracle (`members`: name -> accept, when combined) and the checks judged."""
    accepts = {ORACLE: oracle} | {member(m): a for m, a in (members or {}).items()} | {CHECKS: checks}
    return AnswerRow("E1", "impossible", source, "a", "text", None, None, label, accepts)


def test_confusion_and_gate_by_hand():
    """On-policy: 3 valid (oracle accepts 2, rejects 1), 4 invalid (accepts 1, rejects 2, undecided 1),
    1 partially_valid. Decided binary: 3 valid + 3 invalid = 6; wrong: 1 rejected valid + 1 accepted
    invalid → agreement 4/6; accept-invalid 1/3; reject-valid 1/3; undecided 1 of 8.
    Gate (thresholds 0.2, min 10 per class): fails on both rates and on both counts, each reason
    naming the on-policy set."""
    rows = [ans("valid", True), ans("valid", True), ans("valid", False),
            ans("invalid", True), ans("invalid", False), ans("invalid", False), ans("invalid", None),
            ans("partially_valid", True)]
    cal = C.calibrate([], rows, ["oracle"])
    c = cal["oracle"]["labelled"]
    assert c["agreement"] == pytest.approx(4 / 6)
    assert (c["accept_invalid"], c["reject_valid"]) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert (c["n_valid"], c["n_invalid"], c["n_partial"], c["n_undecided"], c["n_answers"]) == (3, 3, 1, 1, 8)
    assert set(cal["oracle"]) == {"stress", "labelled"}  # never pooled
    g = C.gate(cal, C.GateConfig(), where="on-policy set (labels.jsonl)")
    assert g["status"] == "unverified"
    assert g["reasons"] == [
        "on-policy set (labels.jsonl): the primary oracle is measured on 3 labelled valid answers (< 10)",
        "on-policy set (labels.jsonl): the primary oracle is measured on 3 labelled invalid answers (< 10)",
        "on-policy set (labels.jsonl): the primary oracle accepts 33.3% of labelled invalid answers (1/3; > 20.0%)",
        "on-policy set (labels.jsonl): the primary oracle rejects 33.3% of labelled valid answers (1/3; > 20.0%)"]
    assert g["warnings"] == ["verifier `oracle` is undecided on 12.5% of its labelled calibration answers "
                             "(1/8; > 10.0%)"]


def test_the_stress_answers_never_decide_the_gate():
    """Stress answers the oracle judges perfectly (10 valid accepted, 10 invalid rejected) and no
    on-policy set: unverified, the reason saying the on-policy set is missing."""
    stress = [ans("valid", True) for _ in range(10)] + [ans("invalid", False) for _ in range(10)]
    cal = C.calibrate(stress, None, ["oracle"])
    assert cal["oracle"]["stress"]["agreement"] == 1.0 and cal["oracle"]["labelled"] is None
    g = C.gate(cal, C.GateConfig())
    assert g["status"] == "unverified"
    assert g["reasons"][0].startswith("the on-policy set: none (no labelled answers of the audited policy")


def test_gate_passes_on_enough_well_judged_answers_and_reads_members():
    """10 valid all accepted, 10 invalid of which 2 accepted (20%, not above the threshold): ok.
    A combined oracle's members are calibrated too: `spec` accepts every invalid answer."""
    rows = ([ans("valid", True, members={"spec": True}, source="labelled") for _ in range(10)]
            + [ans("invalid", i < 2, members={"spec": True}, source="labelled") for i in range(10)])
    roles = C.roles(rows, {"oracle": None, "checks": None})
    assert roles == ["oracle", "oracle/spec", "checks"]
    cal = C.calibrate([], rows, roles)
    assert C.gate(cal, C.GateConfig())["status"] == "ok"
    assert cal["oracle/spec"]["labelled"]["accept_invalid"] == 1.0
    assert C.gate(cal, C.GateConfig(max_accept_invalid=0.1))["status"] == "unverified"


def test_a_new_verifier_role_flows_from_its_verdicts_to_the_calibration():
    """A role no field of AnswerRow names (`dummy`) reaches `row.accepts` from its verdicts and is
    calibrated like the others. Stress answers of E1 (label; dummy's verdict): s0 valid, accepts;
    s1 invalid, accepts; s2 invalid, rejects; s3 valid, undecided; s4 valid, no verdict. Decided:
    1 valid, 2 invalid; wrong: s1 → agreement 2/3, accept-invalid 1/2, reject-valid 0/1, 2 of 5
    undecided. The primary oracle's member `spec` comes after it; an undecided checks verdict (s1)
    is a rejection."""
    labels = {"s0": "valid", "s1": "invalid", "s2": "invalid", "s3": "valid", "s4": "valid"}
    answers = [Answer("E1", "impossible", "stress", aid, f"text {aid}", label=lab) for aid, lab in labels.items()]

    by_id = {a.answer_id: a for a in answers}

    def verdicts(violates, spec=False):  # spec: a combined oracle whose member `spec` agrees with it
        return {by_id[aid]: verdict_from_row({"p_violates": None, "violates": v,
                                              "parts": [{"p_violates": None, "violates": v, "verifier": "spec"}]
                                              if spec else []})
                for aid, v in violates.items()}

    rows = build_rows(answers, verdicts={
        ORACLE: verdicts({aid: lab == "invalid" for aid, lab in labels.items()}, spec=True),
        "dummy": verdicts({"s0": False, "s1": False, "s2": True, "s3": None}),
        CHECKS: verdicts({"s0": False, "s1": None, "s2": True, "s3": False, "s4": False})})
    assert dict(rows[0].accepts) == {ORACLE: True, member("spec"): True, "dummy": True, CHECKS: True}
    assert [r.accepts["dummy"] for r in rows] == [True, True, False, None, None]
    assert [r.accepts[CHECKS] for r in rows] == [True, False, False, True, True]
    with pytest.raises(TypeError):
        rows[0].accepts["dummy"] = False  # rows share their verdicts: read-only

    roles = C.roles(rows, {ORACLE: None, "dummy": None, CHECKS: None})
    assert roles == [ORACLE, member("spec"), "dummy", CHECKS]
    out = C.run_calibration(rows, None, [], {}, roles, C.GateConfig(), "on-policy set")
    d = out["verifiers"]["dummy"]["stress"]
    assert (d["agreement"], d["accept_invalid"], d["reject_valid"]) == (pytest.approx(2 / 3), 0.5, 0.0)
    assert (d["n_valid"], d["n_invalid"], d["n_undecided"], d["n_answers"]) == (1, 2, 2, 5)
    assert out["verifiers"]["dummy"]["labelled"] is None
    assert out["undecided"]["dummy"] == {"E1": {"n_undecided": 2, "n_answers": 5}}
    assert out["undecided"][ORACLE] == {}


def policy_rows(t_shift=0.0):
    """Policy and stress rows of two impossible environments and a control, every label the oracle's."""
    out = []
    for env, kind in (("E1", "impossible"), ("E2", "impossible"), ("C1", "control")):
        for j in range(4):
            label = "valid" if j % 2 else "invalid"
            out.append(AnswerRow(env, kind, "policy", f"p{j}", f"{env} answer {j}", 0.2 * j + t_shift, 0.5, label,
                                 {CHECKS: j != 2, ORACLE: label == "valid"}))
        for j, label in enumerate(("valid", "invalid", "invalid")):
            out.append(AnswerRow(env, kind, "stress", f"s{j}", f"{env} stress {j}", 0.3 * j, 0.5, label,
                                 {CHECKS: True, ORACLE: label == "valid"}, j == 0))
    return out


@pytest.mark.parametrize("on_policy, because", [
    pytest.param([ans("invalid", False, source="labelled") for _ in range(12)],
                 "the primary oracle is measured on 0 labelled valid answers (< 10)", id="no-valid-class"),
    pytest.param([ans("valid", True, source="labelled") for _ in range(10)]
                 + [ans("invalid", i < 5, source="labelled") for i in range(10)],
                 "the primary oracle accepts 50.0% of labelled invalid answers (5/10; > 20.0%)", id="accepts-invalid"),
])
def test_stress_passes_on_policy_fails_every_oracle_figure_unverified(on_policy, because):
    """Stress: 10 valid accepted and 10 invalid rejected (a pass on its own). On-policy: no valid
    answer, or half its invalid answers accepted. Every oracle-dependent figure of every iteration
    is `unverified`, no number, the reason naming the on-policy set; the others keep their numbers."""
    from dataclasses import asdict

    from audit.results import build_results
    from audit.summary import StatsSettings, seed_metrics

    stress = [ans("valid", True) for _ in range(10)] + [ans("invalid", False) for _ in range(10)]
    rows_by_t = {0: policy_rows(), 1: policy_rows(0.1)}
    where = "on-policy set (data/mini/labelled_answers.jsonl)"
    calib = C.run_calibration(stress, on_policy, [None] * len(on_policy),
                              {t: [r for r in rs if r.source == "policy"] for t, rs in rows_by_t.items()},
                              ["oracle"], C.GateConfig(), where)
    assert calib["verifiers"]["oracle"]["stress"]["agreement"] == 1.0
    assert calib["gate"]["status"] == "unverified" and calib["gate"]["reasons"] == [f"{where}: {because}"]
    audits = seed_metrics(rows_by_t, run_seed=0, settings=StatsSettings(seed=0, B=1000))
    doc = build_results({}, {("anchored", 0): audits}, {("anchored", 0, t): f"iter_{t}" for t in (0, 1)},
                        {("anchored", 0): "exp"}, [], {("anchored", 0): calib})
    seed = doc["rewards"]["anchored"]["seeds"]["0"]
    dependent = 0
    for t, it in seed["iterations"].items():
        for name, m in it["metrics"].items():
            if T.entry(name).metric.oracle:
                dependent += 1
                assert m["status"] == "unverified" and m["value"] is None and m["ci_low"] is None, (t, name)
                assert m["reason"] == f"{where}: {because}", (t, name)
            else:
                v = asdict(audits[int(t)].metrics[name])["value"]
                assert m["status"] == "ok" and m["value"] == (None if math.isnan(v) else v), (t, name)
    assert dependent >= 2 * 20
    for name, m in doc["rewards"]["anchored"]["across_seeds"]["1"].items():
        assert (m["status"] == "unverified") == T.entry(name).metric.oracle, name
        if m["status"] == "unverified":
            assert where in m["reason"], name


def test_each_checkpoint_is_gated_on_its_own_labels_where_they_suffice():
    """Run-level on-policy set: t = 1's 20 labels (pass: 1/10 invalid accepted) and t = 0's 6 (too
    few of a class) and 12 of no checkpoint whose oracle accepts every invalid one. Pooled: 13/26
    invalid accepted → the run's gate fails. t = 1 has enough labels of its own and passes; t = 0
    falls back to the run's gate (with a warning). Drift at t = 1 reads t = 0 too: unverified."""
    t1 = [ans("valid", True, source="labelled") for _ in range(10)] + [
        ans("invalid", i < 1, source="labelled") for i in range(10)]
    t0 = [ans("valid", True, source="labelled") for _ in range(3)] + [
        ans("invalid", False, source="labelled") for _ in range(3)]
    loose = [ans("invalid", True, source="labelled") for _ in range(12)]
    on_policy, its = t1 + t0 + loose, [1] * 20 + [0] * 6 + [None] * 12
    cal = C.run_calibration([], on_policy, its, {0: [], 1: []}, ["oracle"], C.GateConfig(), "on-policy set (labels.jsonl)")
    assert cal["verifiers"]["oracle"]["labelled"]["n_accept_invalid"] == 13
    assert cal["checkpoints"]["1"]["oracle"]["accept_invalid"] == pytest.approx(0.1)
    assert cal["checkpoints"]["0"]["oracle"]["n_valid"] == 3
    assert cal["gates"]["1"]["status"] == "ok" and cal["gates"]["1"]["set"] == "labelled/t=1"
    assert cal["gates"]["0"]["status"] == "unverified"
    assert any("at t = 0 holds 3 valid and 3 invalid" in w for w in cal["gates"]["0"]["warnings"])
    assert cal["gate"]["status"] == "unverified"
    assert C.metric_gate(cal, "va_gap/impossible", 1) == ("ok", [])
    assert C.metric_gate(cal, "va_gap/impossible", 0)[0] == "unverified"
    assert C.metric_gate(cal, "valid_rate_drift/impossible", 1)[0] == "unverified"
    assert C.metric_gate(cal, "fpr_slope/policy", 1)[0] == "unverified"
    assert C.metric_gate(cal, "apparent/impossible", 0) == ("ok", [])


def test_records_a_verifier_cannot_decide_are_counted_per_record():
    """A release record without `checks`: `spec` decides none of its answers; checks decide all."""
    rows = [AnswerRow(tid, "impossible", "stress", f"a{j}", "t", None, None, "invalid",
                      {ORACLE: None if tid == "R1" else False, member("spec"): None if tid == "R1" else False,
                       CHECKS: True})
            for tid in ("R1", "R2") for j in range(3)]
    out = C.undecided_by_record(rows, ["oracle", "oracle/spec", "checks"])
    assert out == {"oracle": {"R1": {"n_undecided": 3, "n_answers": 3}},
                   "oracle/spec": {"R1": {"n_undecided": 3, "n_answers": 3}}, "checks": {}}


def test_which_metrics_rest_on_the_oracle():
    dependent = ["va_gap/impossible", "verified/control", "valid_rate/impossible", "valid_rate_drift/control",
                 "youden_j", "fpr/policy", "fnr/policy/control", "fpr_drift/policy", "fpr_slope/policy",
                 "ibe/policy/judge+checks", "auroc/policy/judge"]
    independent = ["apparent/impossible", "fpr/stress", "auroc/stress/judge", "kl/per_answer",
                   "oracle/fpr_stress", "ibe/stress/judge+checks", "fpr_drift/stress"]
    assert all(T.entry(m).metric.oracle for m in dependent)
    assert not any(T.entry(m).metric.oracle for m in independent)


def test_labelled_file_errors_name_file_and_line(tmp_path):
    p = tmp_path / "labelled_answers.jsonl"
    good = {"task_id": "t", "text": "x", "label": "valid", "reason": "r", "clause": None}
    p.write_text(json.dumps(good) + "\n" + json.dumps({**good, "label": "maybe"}) + "\n")
    with pytest.raises(C.LabelledError, match=r"labelled_answers.jsonl:2: label 'maybe'"):
        C.read_labelled(p)
    p.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(C.LabelledError, match=r":2: not JSON"):
        C.read_labelled(p)
    p.write_text(json.dumps(good) + "\n")
    assert C.read_labelled(p) == [good]
    (tmp_path / "other").mkdir()
    assert C.labelled_path(tmp_path) == p and C.labelled_path(tmp_path / "other") is None
    assert C.labelled_path(tmp_path / "export.jsonl") == p  # a combined export: the file beside it


@pytest.mark.parametrize("override, message", [
    ("bootstrap.B=500", "bootstrap.B=500: expected an integer >= 1000"),
    ("gate.max_accept_invalid=2", "gate.max_accept_invalid=2.0: expected a share in [0, 1]"),
    ("gate.min_per_class=0", "gate.min_per_class=0: expected an integer >= 1"),
])
def test_bad_gate_or_bootstrap_settings_are_one_line(override, message):
    from hydra import compose, initialize_config_dir

    import audit.gap as gap
    from selfplay.config import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("audit", overrides=["ckpt=somewhere", override])
    with pytest.raises(SystemExit) as err:
        gap.main_cli(cfg)
    assert str(err.value).startswith(f"audit.gap: error: {message}")


def _lab(policy, adapter=None, checkpoint=None, iteration=None, text="x"):
    row = {"task_id": "e", "text": text, "label": "invalid", "policy": policy, "adapter": adapter,
           "answers_file": "answers-1.jsonl", "index": 0}
    if checkpoint is not None:
        row["checkpoint"] = checkpoint
    if iteration is not None:
        row["iteration"] = iteration
    return row


def _cache(row, t):
    """This run's audit cache: it sampled "x" at iter_1 and iter_2 (answers-1.jsonl, task e, index 0)."""
    return "x" if t in (1, 2) and row["answers_file"] == "answers-1.jsonl" and row["index"] == 0 else None


@pytest.mark.parametrize("row, t", [
    pytest.param(_lab("smollm2-135m"), 0, id="base text of the run's policy: t = 0 of a fresh adapter"),
    pytest.param(_lab("smollm2-135m-sft"), None, id="another policy's base text"),
    pytest.param(_lab("smollm2-135m-sft (8-epoch recipe)"), None, id="a described variant"),
    pytest.param(_lab("smollm2-135m", "outputs/demo/decisive/seed0/iter_2/adapter"), 2,
                 id="this run's adapter, text in its cache"),
    pytest.param(_lab("smollm2-135m", "outputs/demo/decisive/seed0/iter_2/adapter", text="y"), None,
                 id="this run's adapter path, text it never sampled (retrained since)"),
    pytest.param(_lab("x", "decisive/seed0/iter_1/adapter"), 1, id="this run's adapter, no experiment dir"),
    pytest.param(_lab("smollm2-135m", "outputs/controls/decisive/seed0/iter_2/adapter"), None, id="another experiment"),
    pytest.param(_lab("smollm2-135m", "outputs/demo/decisive/seed1/iter_2/adapter"), None, id="another seed"),
    pytest.param(_lab("smollm2-135m", "outputs/demo/anchored/seed0/iter_2/adapter"), None, id="another reward"),
    pytest.param(_lab("smollm2-135m", None, "decisive/seed0/iter_0", 0), 0, id="audit.label row at t = 0"),
    pytest.param(_lab("smollm2-135m-sft", None, "decisive/seed0/iter_0", 0), None,
                 id="audit.label row at t = 0 of another policy"),
    pytest.param(_lab("smollm2-135m", None, "decisive/seed0/iter_1", 0), None, id="iteration disagrees with path"),
])
def test_own_rows_keeps_only_the_audited_policys_text(row, t):
    got = C.own_rows([row], policy="smollm2-135m", reward="decisive", seed=0, experiment="demo", cached_text=_cache)
    assert [r["iteration"] for r in got] == ([] if t is None else [t])


def test_own_rows_without_the_runs_cache_keeps_no_adapter_text():
    row = _lab("smollm2-135m", "outputs/demo/decisive/seed0/iter_2/adapter")
    assert C.own_rows([row], policy="smollm2-135m", reward="decisive", seed=0, experiment="demo") == []


def test_own_rows_on_minis_labelled_answers():
    """Of mini's 516 labelled rows, a base-π_0 run (smollm2-135m, fresh adapter) reads the 72 its
    policy wrote with no adapter; the warm-start variants' 444 are another policy's text, and the
    84 written by the old warm-start demo's adapters name a run whose cache does not hold them."""
    rows = C.read_labelled(Path("data/mini/labelled_answers.jsonl"))
    got = C.own_rows(rows, policy="smollm2-135m", reward="decisive", seed=0, experiment="controls")
    assert (len(rows), len(got)) == (516, 72) and {r["iteration"] for r in got} == {0}


def test_fresh_blind_labels_count_for_t0_of_a_base_run_only():
    """fresh_v2.jsonl: 90 answers of SmolLM2-135M's base weights (iter_0 of a fresh adapter) and 90 of
    one decisive adapter of the run `fresh_labels`. A smollm2-135m run reads the 90 base answers as
    its t = 0; their adapter's 90 only where its own cache holds them; a warm-start run reads none."""
    rows = C.read_labelled(Path("experiments/labelled/fresh_v2.jsonl"))
    base = C.own_rows(rows, policy="smollm2-135m", reward="decisive", seed=0, experiment="controls")
    assert len(base) == 90 and {r["iteration"] for r in base} == {0}
    assert C.own_rows(rows, policy="smollm2-135m-sft", reward="decisive", seed=0) == []


def test_cluster_wilson_is_wider_than_wilson_when_environments_differ():
    from audit import stats as S

    # 2 environments of 10 answers: one accepts 5 of its invalid answers, the other none
    clustered = S.cluster_wilson([1] * 5 + [0] * 15, [0] * 10 + [1] * 10)
    independent = S.cluster_wilson([1] * 5 + [0] * 15, list(range(20)))
    assert clustered.rate == independent.rate == 0.25 and clustered.deff > 1
    assert clustered.high - clustered.low > independent.high - independent.low
    zero = S.cluster_wilson([0] * 180, [i // 10 for i in range(180)])
    assert zero.low == 0.0 and 0 < zero.high < 0.03  # no accept at all still has an upper end
