"""The preference probe on a second held-out set (`probe_data=DIR`, audit.probe_sets).

End to end on the tiny random Llama of tests/test_audit_gap_cli.py: a temporary mini-shaped copy of
four mini records — two audit-split impossible environments and one control (read), one train-split
environment (left out: the run trained on it) — plus a copy whose stress answer is longer than the
policy's 2048-token context (left out and counted). The `@` rows must be written to audit.json,
audit.csv and the report, apart from the audit split's own. The release records are checked to load
and fit where ../shared holds them (skipped elsewhere).
"""

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_audit_gap_cli import audit_cfg, experiment, patched  # noqa: F401  (module fixtures)

import audit.gap as gap
from audit import probe_sets as P
from audit import report

MINI = Path(__file__).resolve().parents[1] / "data" / "mini"
READ = ["mini_counterevidence_02", "mini_false_premise_02"]
CONTROL = "mini_ctrl_hp_02"
TRAINED = "mini_counterevidence_01"


def probe_dir(root: Path) -> Path:
    d = root / "heldout"
    (d / "data").mkdir(parents=True)
    (d / "data_control").mkdir()
    shutil.copytree(MINI / "schema", d / "schema")
    for tid in [*READ, TRAINED]:
        shutil.copy(MINI / "data" / f"{tid}.json", d / "data")
    shutil.copy(MINI / "data_control" / f"{CONTROL}.json", d / "data_control")
    long = json.loads((MINI / "data" / "mini_false_premise_04.json").read_text())
    long["task_id"] = "long_answer_01"
    long["fixed_stress_answers"][1]["text"] = "The figure is not shown. " * 600
    (d / "data" / "long_answer_01.json").write_text(json.dumps(long))
    return d


@pytest.fixture(scope="module")
def audited_with_set(experiment, patched, tmp_path_factory):  # noqa: F811
    d = probe_dir(tmp_path_factory.mktemp("sets"))
    gap.main_cli(audit_cfg(experiment, f"probe_data={d}", "probe_data_name=heldout", "n=0", "kl=false"))
    return experiment


def test_probe_set_rows_are_written_apart_from_the_audit_split(audited_with_set):
    root = audited_with_set
    doc = json.loads((root / "audit.json").read_text())
    assert doc["settings"]["probe_data_name"] == "heldout"
    for t, it in doc["rewards"]["anchored"]["seeds"]["0"]["iterations"].items():
        m, c = it["metrics"], it["counts"]
        for name in ("pref_margin/impossible@heldout", "pref_accuracy/impossible@heldout",
                     "pref_margin_sum/impossible@heldout", "pref_margin/control@heldout"):
            assert m[name]["status"] == "ok", (t, name)
        assert ("likelihood_auroc/impossible@heldout" in m) == (t == "0")
        assert not any(k.startswith("pref_margin/labelled/") and "@" in k for k in m)
        assert c["probe/environments/impossible@heldout"] == 2  # the trained-on and too-long ones left out
        assert c["probe/environments/control@heldout"] == 1
        assert c["probe/trained_on@heldout"] == 1 and c["probe/too_long@heldout"] == 1
        # the audit split's own probe reads its own environments (max_envs=1), never the set's
        assert c["probe/environments/impossible"] == 1
        assert set(it["per_env"]["pref_margin/impossible@heldout"]) == set(READ)
        assert set(it["per_env"]["pref_margin/impossible"]) == {"mini_counterevidence_02"}
    assert "pref_margin/impossible@heldout" in doc["rewards"]["anchored"]["across_seeds"]["1"]
    rows = list(csv.DictReader(io.StringIO((root / "audit.csv").read_text())))
    assert {r["iteration"] for r in rows if r["metric"] == "pref_margin/impossible@heldout"
            and r["seed"] == "0"} == {"0", "1"}
    text = report.render(report.load_dir(root))
    assert "Preference probe on the held-out set `heldout`" in text
    assert "`pref_margin/impossible@heldout`" in text


def test_a_set_the_run_trained_on_entirely_is_one_line_and_nothing_written(experiment, patched, tmp_path):  # noqa: F811
    d = tmp_path / "trainonly"
    (d / "data").mkdir(parents=True)
    shutil.copytree(MINI / "schema", d / "schema")
    shutil.copy(MINI / "data" / f"{TRAINED}.json", d / "data")
    before = (experiment / "audit.json").read_bytes() if (experiment / "audit.json").exists() else None
    with pytest.raises(SystemExit) as e:
        gap.main_cli(audit_cfg(experiment, f"probe_data={d}", "n=0", "kl=false"))
    msg = str(e.value)
    assert msg.startswith("audit.gap: error: probe_data=") and "no environment left" in msg and "\n" not in msg
    after = (experiment / "audit.json").read_bytes() if (experiment / "audit.json").exists() else None
    assert before == after


@pytest.mark.parametrize("extra, words", [
    pytest.param(["probe_data=/no/such/dir"], "no such directory", id="missing"),
    pytest.param(["probe_data=data/mini", "probe_data_name=a/b"], "no usable set name", id="bad-name"),
    pytest.param(["probe_data=data/mini", "probe=false"], "probe=false", id="probe-off"),
])
def test_bad_probe_data_is_one_line_exit_1(experiment, extra, words):  # noqa: F811
    r = subprocess.run([sys.executable, "-m", "audit.gap", f"ckpt={experiment}", "logger=none", *extra],
                       capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 1, r.stderr
    assert words in r.stderr and "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if "error" in line]) == 1


def test_a_broken_record_in_the_set_is_one_line(tmp_path):
    d = probe_dir(tmp_path)
    (d / "data" / "broken.json").write_text("{")
    with pytest.raises(P.ProbeSetError) as e:
        P.load_set(str(d))
    assert "\n" not in str(e.value) and "broken.json" in str(e.value)


def test_set_name_defaults_to_the_directory():
    assert P.set_name("../shared/impossible_rubrics/", None) == "impossible_rubrics"
    assert P.set_name("../shared/impossible_rubrics", "release") == "release"
    assert P.base_metric("pref_margin/impossible@release") == "pref_margin/impossible"


def test_release_records_load_and_fit_a_2048_token_policy(release_dir):
    from selfplay.models.chat import end_of_turn, render
    from selfplay.models.config import PolicyConfig
    from selfplay.models.loading import load_tokenizer

    envs = P.load_set(str(release_dir))
    assert sum(e.kind == "impossible" for e in envs) >= 12
    assert all(any(s.validity == "valid" for s in e.stress_answers) for e in envs)
    policy = PolicyConfig.named("tiny-llama")
    tok = load_tokenizer(policy)
    from selfplay.envs.prompt import policy_messages

    prompts = [render(tok, policy, policy_messages(e.public)) for e in envs]
    over = P.too_long(tok, envs, prompts, end_of_turn(tok), policy.max_context)
    assert isinstance(over, list)
    assert P.too_long(tok, envs, prompts, end_of_turn(tok), 10) == [e.task_id for e in envs]


def test_the_gate_reads_only_the_rows_the_audited_policy_wrote(audited_with_set, tmp_path):
    """data/mini/labelled_answers.jsonl holds 516 rows, all written by SmolLM2 variants: the tiny
    policy's gate reads none of them (and says so), where it used to read all 516."""
    doc = json.loads((audited_with_set / "audit.json").read_text())
    cal = doc["rewards"]["anchored"]["seeds"]["0"]["calibration"]
    assert cal["read"] == {}
    assert cal["verifiers"]["oracle"]["labelled"] is None
    assert any("none (no labelled answers of the audited policy" in r for r in cal["gate"]["reasons"])
    assert "the gate read 0 labelled row(s)" in report.render(report.load_dir(audited_with_set))


def test_gate_set_keeps_the_runs_own_base_text_and_drops_the_rest(audited_with_set, tmp_path):
    from audit.checkpoints import find_checkpoints, open_run
    from audit.gate_rows import gate_set

    ckpt = find_checkpoints(str(audited_with_set)).checkpoints[0]
    run = open_run(ckpt)
    row = {"task_id": "mini_counterevidence_02", "text": "t", "label": "invalid"}
    fresh = tmp_path / "fresh.jsonl"
    fresh.write_text("\n".join(json.dumps(r) for r in [
        row | {"policy": "tiny-llama", "adapter": None},  # the run's base weights: its t = 0
        row | {"policy": "tiny-llama", "adapter": None, "text": "t"},  # the same answer again: once
        row | {"policy": "smollm2-135m", "adapter": None, "text": "u"},  # another policy
        row | {"policy": "tiny-llama", "adapter": "anchored/seed0/iter_1/adapter", "text": "v",
               "answers_file": "answers-0.jsonl", "index": 0},  # this run's path, text it never sampled
        row | {"policy": "tiny-llama", "adapter": None, "task_id": "not_here"},  # not the run's data
    ]) + "\n")
    got = gate_set(run, run.read(budget=1), ckpt, fresh=[fresh])
    assert [(r["text"], r["iteration"]) for r in got.rows] == [("t", 0)]
    assert got.read == {str(fresh): 1}
