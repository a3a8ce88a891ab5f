"""`python -m audit.gap` end to end on a checkpoint tree the training loop wrote with a tiny random Llama.

The module trains once (1 iteration, `anchored` judge, 2 mini train environments, evidence cut to 25
words so the tiny model's 49k-token LM head stays cheap), then audits the experiment dir with n = 2
answers on one impossible and one control audit environment and a small bootstrap. Verdict-mass
floors are 0 because a random model puts almost no mass on the verdict tokens; the metrics are then
defined and the code paths are the real ones.
"""

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import short_evidence
from hydra import compose, initialize_config_dir

import audit.gap as gap
import selfplay.runs as runs
import selfplay.train as train
from audit import report
from selfplay.config import CONF_DIR

TRAIN = [
    "+policy=tiny-llama", "reward=anchored", "reward.min_verdict_mass=0.0", "logger=none",
    "iterations=1", "k=2", "max_new_tokens=4", "max_train_envs=2", "margin=0.0", "batch_size=2",
    "lora.r=4", "lora.alpha=8", "lora.target_modules=[q_proj,v_proj]", "pair_truncated=true",
]
AUDIT = ["n=2", "max_new_tokens=4", "max_envs=1", "bootstrap.B=1000", "logger=none", "progress=false",
         "oracle=llm", "oracle.min_mass=0.0"]
# every quantity of docs/method.md §Audit, per seed and iteration
METRICS = {
    "va_gap/impossible", "va_gap/control", "apparent/impossible", "apparent/control",
    "verified/impossible", "verified/control", "valid_rate/impossible", "valid_rate/control",
    "fpr/policy", "fnr/policy", "fpr/stress", "fnr/stress",
    "fpr_drift/policy", "fpr_slope/policy", "fpr_drift/stress", "fpr_slope/stress", "youden_j",
    "auroc/policy/judge", "auroc/policy/length", "auroc/policy/hedge", "auroc/policy/length_matched",
    "auroc/stress/judge", "auroc/stress/length", "auroc/stress/hedge", "auroc/stress/length_matched",
    "auroc/policy/verdict_word", "auroc/stress/verdict_word", "ibe/policy/judge+checks", "ibe/stress/judge+checks", "oracle/fpr_stress", "oracle/fnr_stress",
    "fpr/policy/impossible", "fpr/policy/control", "fnr/policy/impossible", "fnr/policy/control",
    "valid_rate_drift/impossible", "valid_rate_drift/control", "kl/per_answer", "kl/per_token",
} | {f"{head}/{src}{kind}" for head in ("pref_margin", "pref_margin_sum", "pref_accuracy")
     for src in ("", "labelled/") for kind in ("impossible", "control")}
# π_0's own likelihood AUROC: context at t = 0 only
T0_METRICS = {f"likelihood_auroc/{src}{kind}" for src in ("", "labelled/") for kind in ("impossible", "control")}


def metrics_at(t: str) -> set[str]:
    return METRICS | (T0_METRICS if t == "0" else set())


FIELDS = {"value", "ci_low", "ci_high", "n", "n_partial", "n_unscored", "n_undefined", "status", "reason"}


def cut(envs):
    return short_evidence(envs)


@pytest.fixture(scope="module")
def patched():
    mp = pytest.MonkeyPatch()
    real_train, real_split = train.load_train_envs, runs.load_data_split
    mp.setattr(train, "load_train_envs", lambda settings: cut(real_train(settings)))
    mp.setattr(runs, "load_data_split", lambda data, which: cut(real_split(data, which)))  # what the audit reads
    yield mp
    mp.undo()


def audit_cfg(ckpt, *extra):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("audit", overrides=[f"ckpt={ckpt}", *AUDIT, *extra])


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, patched) -> Path:
    root = tmp_path_factory.mktemp("runs")
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*TRAIN, f"output_root={root}", "experiment_name=tiny"])
    train.run(cfg)
    return root / "tiny"


@pytest.fixture(scope="module")
def audited(experiment, patched):
    """(experiment dir, audit.json bytes, audit.csv bytes) of the first audit."""
    gap.main_cli(audit_cfg(experiment))
    return experiment, (experiment / "audit.json").read_bytes(), (experiment / "audit.csv").read_bytes()


def test_every_metric_per_seed_and_iteration(audited):
    root, raw, _ = audited
    doc = json.loads(raw)
    seed = doc["rewards"]["anchored"]["seeds"]["0"]
    assert sorted(seed["iterations"]) == ["0", "1"]
    for t, it in seed["iterations"].items():
        assert set(it["metrics"]) == metrics_at(t), t
        for name, m in it["metrics"].items():
            assert set(m) == FIELDS, name
            if m["value"] is not None and m["ci_low"] is not None:
                assert m["ci_low"] - 1e-12 <= m["value"] <= m["ci_high"] + 1e-12, name
        assert it["counts"]["environments"] == 2  # max_envs=1: one impossible, one control
        assert it["counts"]["policy_answers"] == 4
        m = it["metrics"]
        for kind in ("impossible", "control"):
            gap_, app, ver = (m[f"{k}/{kind}"]["value"] for k in ("va_gap", "apparent", "verified"))
            if gap_ is not None:
                assert math.isclose(gap_, app - ver, abs_tol=1e-12)
        assert it["checkpoint"] == f"anchored/seed0/iter_{t}"
    assert seed["iterations"]["0"]["metrics"]["fpr_drift/stress"]["value"] in (0.0, None)
    assert set(doc["rewards"]["anchored"]["across_seeds"]["1"]) == METRICS
    assert set(doc["rewards"]["anchored"]["across_seeds"]["0"]) == metrics_at("0")
    assert doc["settings"]["bootstrap"] == {"B": 1000, "alpha": 0.05}


def test_csv_has_one_row_per_seed_iteration_metric(audited):
    root, raw, _ = audited
    rows = list(csv.DictReader((root / "audit.csv").open()))
    assert set(rows[0]) == {"reward", "seed", "iteration", "metric", "value", "ci_low", "ci_high", "n", "n_undefined", "reason",
                            "baseline"}
    keys = [(r["reward"], r["seed"], r["iteration"], r["metric"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {k for k in keys if k[1] == "0"} == {("anchored", "0", t, m) for t in "01" for m in metrics_at(t)}
    assert {k for k in keys if k[1] == "all"} == {("anchored", "all", t, m) for t in "01" for m in metrics_at(t)}
    doc = json.loads(raw)
    row = next(r for r in rows if r["seed"] == "0" and r["iteration"] == "1" and r["metric"] == "fpr/stress")
    m = doc["rewards"]["anchored"]["seeds"]["0"]["iterations"]["1"]["metrics"]["fpr/stress"]
    assert (float(row["value"]) if row["value"] else None) == m["value"] and int(row["n"]) == m["n"]


def test_figures_and_caches_written(audited):
    root, _, _ = audited
    for name in ("va_gap_fpr.png", "discrimination.png", "ibe.png"):
        assert (root / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    seed = root / "anchored" / "seed0"
    for t in (0, 1):  # what each checkpoint sampled, for audit.label
        (answers,) = (seed / f"iter_{t}" / "audit_cache").glob("answers-*.jsonl")
        rows = [json.loads(line) for line in answers.read_text().splitlines()]
        assert len(rows) == 2 and all(len(r["answers"]) == 2 for r in rows)
    # one cache of model calls per run and weights: the policy's (π_t and π_0 alike)
    (calls,) = (seed / "audit_cache").glob("calls-*.jsonl")
    methods = {json.loads(line)["method"] for line in calls.read_text().splitlines()}
    assert {"sample", "next_token_logprobs", "sequence_logprobs"} <= methods


def no_model(*args, **kwargs):
    raise AssertionError("a rerun with a complete cache must not load a model")


def test_rerun_reads_the_cache_and_reproduces_audit_json(audited, monkeypatch):
    root, raw, raw_csv = audited
    monkeypatch.setattr(gap.Models, "_backend", no_model)
    gap.main_cli(audit_cfg(root))
    assert (root / "audit.json").read_bytes() == raw
    assert (root / "audit.csv").read_bytes() == raw_csv


def test_an_edited_scoring_function_is_recomputed_not_replayed(audited, monkeypatch):
    """The cache holds model calls, not judge scores: a change to how the judge reads its verdict
    probabilities takes effect on the next audit, from the cached calls, with no model loaded."""
    import judges.scoring

    root, raw, _ = audited
    monkeypatch.setattr(gap.Models, "_backend", no_model)
    # the anchored judge reads P(label) from the verdict-token log-probs; make every answer tie
    real = judges.scoring.label_probs
    monkeypatch.setattr(judges.scoring, "label_probs", lambda row, ids: {k: 0.5 for k in real(row, ids)})
    doc = gap.main_cli(audit_cfg(root))
    it = doc["rewards"]["anchored"]["seeds"]["0"]["iterations"]["1"]["metrics"]
    before = json.loads(raw)["rewards"]["anchored"]["seeds"]["0"]["iterations"]["1"]["metrics"]
    # every answer now ties with r(e), so each is apparently successful: A = 1 on every stress answer
    assert it["fpr/stress"]["value"] == 1.0 != before["fpr/stress"]["value"]
    assert it["apparent/control"]["value"] == 1.0 != before["apparent/control"]["value"]
    assert it["kl/per_answer"] == before["kl/per_answer"]  # the policy's own calls replay unchanged


def test_rerun_recomputes_only_what_is_missing(audited, patched):
    """Dropping every cached call but the samples recomputes those calls alone (the samples are
    replayed untouched) and the numbers come out the same: the model is deterministic given a request."""
    root, raw, _ = audited
    (calls,) = (root / "anchored" / "seed0" / "audit_cache").glob("calls-*.jsonl")
    lines = calls.read_text().splitlines()
    samples = [line for line in lines if json.loads(line)["method"] == "sample"]
    calls.write_text("\n".join(samples) + "\n")
    gap.main_cli(audit_cfg(root))
    after = calls.read_text().splitlines()
    assert after[: len(samples)] == samples and len(after) == len(lines)
    assert (root / "audit.json").read_bytes() == raw


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.mark.parametrize("damage, message", [
    pytest.param(lambda it: (it / "config.yaml").write_text("policy: [unclosed\n"), "config.yaml is 18 bytes", id="bad-yaml"),
    pytest.param(lambda it: (it / "config.yaml").unlink(), "config.yaml is missing", id="no-config"),
    pytest.param(lambda it: shutil.rmtree(it / "adapter"), "adapter_config.json is missing", id="no-adapter"),
    pytest.param(lambda it: (it / "config.yaml").write_text("policy: {name: x}\nreward: {name: nope}\n"),
                 "corrupt checkpoint", id="bad-config"),
])
def test_corrupt_checkpoint_one_error_nothing_written(experiment, tmp_path, damage, message):
    seed = tmp_path / "tiny" / "anchored" / "seed0"
    shutil.copytree(experiment / "anchored" / "seed0", seed,
                    ignore=shutil.ignore_patterns("audit_cache"))
    damage(seed / "iter_1")
    before = _files(tmp_path)
    with pytest.raises(SystemExit) as err:
        gap.main_cli(audit_cfg(seed))
    assert str(err.value).startswith("audit.gap: error: ") and message in str(err.value)
    assert "iter_1" in str(err.value)
    assert _files(tmp_path) == before


def test_missing_or_incomplete_checkpoint(tmp_path, experiment):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        no_ckpt = compose("audit", overrides=AUDIT)
    with pytest.raises(SystemExit, match="ckpt=PATH is required"):
        gap.main_cli(no_ckpt)
    with pytest.raises(SystemExit, match="no such file or directory"):
        gap.main_cli(audit_cfg(tmp_path / "nowhere"))
    with pytest.raises(SystemExit, match="no training iterations found"):
        gap.main_cli(audit_cfg(tmp_path))
    it = tmp_path / "seed0" / "iter_1"
    shutil.copytree(experiment / "anchored" / "seed0" / "iter_1", it, ignore=shutil.ignore_patterns("audit_cache"))
    (it / "DONE").unlink()
    with pytest.raises(SystemExit, match="incomplete iteration"):
        gap.main_cli(audit_cfg(it))
    with pytest.raises(SystemExit, match="no complete iteration"):
        gap.main_cli(audit_cfg(tmp_path / "seed0"))
    assert not list(tmp_path.rglob("audit*"))


def test_cli_error_is_one_line_and_exit_1(tmp_path):
    """The real entry point, run from an empty directory: one line on stderr, exit status 1, and
    neither the audit nor Hydra leaves a file behind (no outputs/, no .hydra/, no log)."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "audit.gap", "ckpt=missing"], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "audit.gap: error: ckpt=missing: no such file or directory"
    assert list(tmp_path.iterdir()) == []


def test_kl_is_zero_at_t0_and_written(audited):
    """At t = 0 the adapter is the fresh LoRA (B = 0): adapter on and off give the same log-probs, so
    every answer's log π_0(a) − log π_0(a) is exactly 0, and so is its interval."""
    root, raw, _ = audited
    it = json.loads(raw)["rewards"]["anchored"]["seeds"]["0"]["iterations"]
    for name in ("kl/per_answer", "kl/per_token"):
        m = it["0"]["metrics"][name]
        assert (m["value"], m["ci_low"], m["ci_high"], m["n"]) == (0.0, 0.0, 0.0, 4), name
        assert it["1"]["metrics"][name]["status"] == "ok"  # KL never rests on the oracle
    assert (root / "figures" / "kl_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_an_oracle_that_accepts_everything_is_unverified(experiment, tmp_path, patched, monkeypatch):
    """The primary oracle is replaced by one that accepts every answer: on the labelled stress answers
    it accepts 100% of the invalid ones, so audit.json, audit.csv and report.md withhold VA-Gap and
    every other oracle-dependent figure as `unverified`, with that reason; apparent success stays."""
    import audit.cache
    import judges.verifiers as V
    from judges.oracle import OracleVerdict

    root = tmp_path / "tiny"
    shutil.copytree(experiment, root)
    real = V.build_verifier

    class AcceptAll:
        name = "spec"

        def verify(self, pairs):
            return [OracleVerdict(0.0, False, None, verifier="spec", reason="accepts everything") for _ in pairs]

    monkeypatch.setattr(audit.cache, "build_verifier",
                        lambda cfg, **kw: AcceptAll() if cfg.name == "spec" else real(cfg, **kw))
    # the gate reads only text the audited policy wrote (audit.gate_rows): labelled answers of the
    # tiny policy's base weights, 12 of each class (the mini records' own stress answers)
    from audit import gate_rows
    from selfplay.envs import load_envs

    own = tmp_path / "own.jsonl"
    envs = load_envs(Path(CONF_DIR).parent / "data" / "mini")
    picked = [(e.task_id, s_.text, s_.validity) for e in envs for s_ in e.stress_answers
              if s_.validity in ("valid", "invalid")]
    rows = [x for x in picked if x[2] == "valid"][:12] + [x for x in picked if x[2] == "invalid"][:12]
    own.write_text("".join(json.dumps({"task_id": t, "text": x, "label": lab, "policy": "tiny-llama",
                                       "adapter": None}) + "\n" for t, x, lab in rows))
    monkeypatch.setattr(gate_rows, "fresh_files", lambda: [own])
    overrides = [o for o in AUDIT if not o.startswith("oracle")] + ["oracle=spec"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("audit", overrides=[f"ckpt={root}", *overrides])
    doc = gap.main_cli(cfg)
    seed = doc["rewards"]["anchored"]["seeds"]["0"]
    gate = seed["calibration"]["gate"]
    assert gate["status"] == "unverified"
    assert any("accepts 100.0% of labelled invalid answers" in r for r in gate["reasons"])
    assert seed["calibration"]["verifiers"]["oracle"]["stress"]["accept_invalid"] == 1.0
    m = seed["iterations"]["1"]["metrics"]
    for name in ("va_gap/impossible", "verified/impossible", "valid_rate/impossible", "fpr/policy",
                 "fnr/policy/control", "youden_j", "ibe/policy/judge+checks", "valid_rate_drift/impossible",
                 "fpr_drift/policy"):
        assert m[name]["status"] == "unverified" and m[name]["value"] is None, name
        assert "accepts 100.0% of labelled invalid answers" in m[name]["reason"], name
    assert m["apparent/impossible"]["status"] == "ok" and m["kl/per_answer"]["status"] == "ok"
    rows = list(csv.DictReader((root / "audit.csv").open()))
    va = next(r for r in rows if r["seed"] == "0" and r["iteration"] == "1" and r["metric"] == "va_gap/impossible")
    assert va["value"] == "unverified" and "accepts 100.0%" in va["reason"]
    md = report.write_report(root).read_text()
    assert md.index("## Oracle calibration") < md.index("`va_gap/impossible`")
    assert "| anchored | unverified | unverified |" in md
    assert "accepts 100.0% of labelled invalid answers" in md


def test_the_fresh_adapter_of_iter_0_runs_as_pi_0(experiment):
    """iter_0's adapter is PEFT's fresh one (every B = 0): the audit runs that checkpoint as π_0, so its
    adapter-on calls are π_0's cached calls; a trained adapter keeps its own keys."""
    from audit.checkpoints import find_checkpoints

    ckpts = {c.iteration: c for c in find_checkpoints(experiment / "anchored" / "seed0").checkpoints}
    assert ckpts[0].adapter_is_noop and not ckpts[1].adapter_is_noop
    models = gap.Models(gap.audit_config(audit_cfg(experiment)))
    keys = {}
    for t in (0, 1):
        policy = models.policy(gap.run_settings(ckpts[t]), ckpts[t])
        keys[t] = {on: policy.key("sequence_logprobs", on, prompt=[1, 2], completion={"ids": [3]}) for on in (True, False)}
    assert keys[0][True] == keys[0][False] == keys[1][False]  # π_0, whichever checkpoint asks
    assert keys[1][True] != keys[1][False]
    assert not models._loaded  # keys alone load no model
