"""Verifier calibration and the oracle gate on hand-made labelled answers."""

from __future__ import annotations

import json

import pytest

from audit import calibration as C
from audit.records import AnswerRow


def ans(label, oracle, checks=True, parts=(), source="stress"):
    return AnswerRow("E1", "impossible", source, "a", "text", None, None, label, checks, None,
                     oracle_accept=oracle, parts=parts)


def test_confusion_and_gate_by_hand():
    """Stress: 3 valid (oracle accepts 2, rejects 1), 4 invalid (accepts 1, rejects 2, undecided 1),
    1 partially_valid. Decided binary: 3 valid + 3 invalid = 6; wrong: 1 rejected valid + 1 accepted
    invalid → agreement 4/6; accept-invalid 1/3; reject-valid 1/3; undecided 1 of 8.
    Gate (thresholds 0.2, min 10 per class): fails on both rates and on both counts."""
    stress = [ans("valid", True), ans("valid", True), ans("valid", False),
              ans("invalid", True), ans("invalid", False), ans("invalid", False), ans("invalid", None),
              ans("partially_valid", True)]
    cal = C.calibrate(stress, None, ["oracle"])
    c = cal["oracle"]["stress"]
    assert c["agreement"] == pytest.approx(4 / 6)
    assert (c["accept_invalid"], c["reject_valid"]) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert (c["n_valid"], c["n_invalid"], c["n_partial"], c["n_undecided"], c["n_answers"]) == (3, 3, 1, 1, 8)
    assert cal["oracle"]["labelled"] is None and cal["oracle"]["all"] == c
    g = C.gate(cal, C.GateConfig())
    assert g["status"] == "unverified"
    assert g["reasons"] == [
        "the primary oracle is measured on 3 labelled valid answers (< 10)",
        "the primary oracle is measured on 3 labelled invalid answers (< 10)",
        "the primary oracle accepts 33.3% of labelled invalid answers (1/3; > 20.0%)",
        "the primary oracle rejects 33.3% of labelled valid answers (1/3; > 20.0%)"]
    assert g["warnings"] == ["verifier `oracle` is undecided on 12.5% of its calibration answers (1/8; > 10.0%)"]


def test_gate_passes_on_enough_well_judged_answers_and_reads_members():
    """10 valid all accepted, 10 invalid of which 2 accepted (20%, not above the threshold): ok.
    A combined oracle's members are calibrated too: `spec` accepts every invalid answer."""
    rows = ([ans("valid", True, parts=(("spec", True),), source="labelled") for _ in range(10)]
            + [ans("invalid", i < 2, parts=(("spec", True),), source="labelled") for i in range(10)])
    roles = C.roles(rows, {"oracle": None, "checks": None})
    assert roles == ["oracle", "oracle/spec", "checks"]
    cal = C.calibrate([], rows, roles)
    assert C.gate(cal, C.GateConfig())["status"] == "ok"
    assert cal["oracle/spec"]["labelled"]["accept_invalid"] == 1.0
    assert C.gate(cal, C.GateConfig(max_accept_invalid=0.1))["status"] == "unverified"


def test_which_metrics_rest_on_the_oracle():
    dependent = ["va_gap/impossible", "verified/control", "valid_rate/impossible", "valid_rate_drift/control",
                 "youden_j", "fpr/policy", "fnr/policy/control", "fpr_drift/policy", "fpr_slope/policy",
                 "ibe/policy/judge+checks", "auroc/policy/judge"]
    independent = ["apparent/impossible", "fpr/stress", "auroc/stress/judge", "kl/per_answer",
                   "oracle/fpr_stress", "ibe/stress/judge+checks", "fpr_drift/stress"]
    assert all(C.oracle_dependent(m) for m in dependent)
    assert not any(C.oracle_dependent(m) for m in independent)


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
