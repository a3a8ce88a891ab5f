"""`python -m audit.label` on a hand-made audited tree: scripted keyboard input, stop and resume,
blindness, a labels file of another run refused, and audit.gap reading the labels as the run's set."""

import io
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from rich.console import Console

from audit import label as L
from audit.cache import CACHE_DIR
from audit.label_screen import clauses
from selfplay.artifacts import write_config, write_manifest
from selfplay.config import CONF_DIR
from selfplay.runs import load_data_split

SENTINEL = "VERDICT-SENTINEL"  # in every verifier row of the cache: it must never reach the screen
WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


@pytest.fixture
def audited(tmp_path) -> Path:
    """exp/anchored/seed0/iter_{0,1}: a real run config, a manifest, and an audit cache with two
    answers for each of two audit environments (one impossible, one control) and verifier rows."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["+policy=tiny-llama", "reward=anchored", "logger=none",
                                           f"output_root={tmp_path}", "experiment_name=exp"])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    audit = load_data_split(cfg.data, "audit")
    envs = [next(e for e in audit if e.kind == "impossible"), next(e for e in audit if e.kind == "control")]
    exp = tmp_path / "exp"
    for t in (0, 1):
        d = exp / "anchored" / "seed0" / f"iter_{t}"
        (d / "adapter").mkdir(parents=True)
        (d / "adapter" / "adapter_config.json").write_text("{}")
        write_config(d / "config.yaml", resolved)
        write_manifest(d)
        cache = d / CACHE_DIR
        cache.mkdir()
        (cache / "answers-abc.jsonl").write_text("".join(
            json.dumps({"key": e.task_id, "task_id": e.task_id, "chunk": [e.task_id],
                        "answers": [f"answer {j} of {e.task_id} at t{t}" for j in range(2)]}) + "\n"
            for e in envs))
        (cache / "oracle-def.jsonl").write_text(json.dumps({"key": "k", "task_id": envs[0].task_id,
                                                            "violates": False, "reason": SENTINEL}) + "\n")
    return exp


def run(root, script, **kw):
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False, color_system=None)
    kw = {"size": 3, "seed": 0, "labeller": "tester", **kw}
    got = L.label(root, console=console, stream=io.StringIO(script), now=lambda: WHEN, **kw)
    return got, out.getvalue()


def test_help_works():
    out = subprocess.run([sys.executable, "-m", "audit.label", "--help"], capture_output=True, text=True, check=True)
    assert "--labeller" in out.stdout and "--size" in out.stdout and "PROTOCOL.md" in out.stdout


def test_three_answers_labelled_stopped_and_resumed_blind(audited):
    """First session: an invalid answer (clause 1, a reason), then a bad key and `q` → 1 row. Second
    session: valid, then partially valid with clause 0 (none) and an empty reason retried → 3 rows in
    all; a third session has nothing left. The screens show question, packet, certificate and answer,
    never a verifier row, the reward, the iteration or the checkpoint."""
    (n1, total1), screen1 = run(audited, "i\n1\ninvents a figure\nx\nq\n")
    assert (n1, total1) == (1, 1)
    assert "stopped: 1 of 3 labelled" in screen1
    (n2, total2), screen2 = run(audited, "v\nnames the obstruction\np\n0\n\nright verdict, one figure wrong\n")
    assert (n2, total2) == (2, 3)
    rows = [json.loads(x) for x in (audited / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    assert [r["label"] for r in rows] == ["invalid", "valid", "partially_valid"]
    assert rows[1]["clause"] == "" and rows[2]["clause"] == "" and rows[2]["reason"] == "right verdict, one figure wrong"
    assert rows[0]["clause"] == clauses(_env(rows[0]))[0]
    assert len({(r["checkpoint"], r["task_id"], r["index"]) for r in rows}) == 3
    for r in rows:
        assert r["labeller"] == "tester" and r["labelled_at"] == "2025-01-02T03:04:05+00:00"
        assert r["checkpoint"] in ("anchored/seed0/iter_0", "anchored/seed0/iter_1")
        assert r["reward"] == "anchored" and r["run_seed"] == 0 and r["split"] == "audit"
        assert r["text"] == f"answer {r['index']} of {r['task_id']} at t{r['iteration']}"
        assert set(r) >= {"task_id", "kind", "split", "policy", "adapter", "temperature", "seed", "index",
                          "max_new_tokens", "truncated", "text", "label", "reason", "clause"}
    assert {r["kind"] for r in rows} == {"impossible", "control"}  # stratified: both kinds in 3
    (n3, total3), screen3 = run(audited, "")
    assert (n3, total3) == (0, 3) and "all 3 answers of the sample are labelled" in screen3
    assert len((audited / "labels.jsonl").read_text().splitlines()) == 3
    for screen in (screen1, screen2):
        assert "question" in screen and "packet" in screen and "certificate" in screen and "answer 0 of" in screen
        for hidden in (SENTINEL, "violates", "anchored", "iter_", "seed0", "oracle-def", "answers-abc"):
            assert hidden not in screen, hidden
        assert "checks" not in screen  # the `spec` verifier's patterns stay hidden too


def _env(row):
    from selfplay.envs import load_envs

    return next(e for e in load_envs("data/mini") if e.task_id == row["task_id"])


def test_a_torn_last_row_is_dropped_and_a_foreign_row_refused(audited):
    run(audited, "v\nok\nq\n")
    f = audited / "labels.jsonl"
    f.write_text(f.read_text() + '{"task_id": "x", "te')  # the write was cut
    (n, total), _ = run(audited, "v\nok\nq\n")
    assert (n, total) == (1, 2) and len(f.read_text().splitlines()) == 2
    row = json.loads(f.read_text().splitlines()[0])
    f.write_text(f.read_text() + json.dumps({**row, "text": "an answer this audit never sampled"}) + "\n")
    with pytest.raises(L.LabelError, match=r"labels.jsonl:3: does not match the run"):
        run(audited, "v\nok\n")
    assert L.main([str(audited), "--labeller", "me"]) == 1  # one line on stderr, not a traceback


def test_labellers_share_a_sample_by_parts(audited):
    """Sample of 5 split 2 ways: part 1/2 labels positions 1, 3, 5 and part 2/2 positions 2, 4, each
    into its own file; together they are the whole sample, once each."""
    _, whole = run(audited, "q\n", size=5, out=audited / "whole.jsonl")
    (n1, _), _ = run(audited, "v\nok\n" * 3, size=5, part=(1, 2), out=audited / "a.jsonl")
    (n2, _), _ = run(audited, "v\nok\n" * 3, size=5, part=(2, 2), out=audited / "b.jsonl")
    assert (n1, n2) == (3, 2)
    a = [json.loads(x) for x in (audited / "a.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (audited / "b.jsonl").read_text().splitlines()]
    keys = [(r["checkpoint"], r["task_id"], r["index"]) for r in a + b]
    assert len(set(keys)) == 5
    first = whole.split("Answer 1 of 5")[1]
    assert a[0]["text"] in first  # part 1 starts where the whole sample starts
    out = subprocess.run([sys.executable, "-m", "audit.label", str(audited), "--labeller", "x", "--part", "3/2"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--part 3/2: expected K/M with 1 <= K <= M" in out.stderr


def test_sample_is_stratified_seeded_and_grows_as_a_superset():
    items = [L.Item(f"r/seed0/iter_{t}", "r", 0, t, "a.jsonl", f"{k}{i}", 0, k, "x")
             for t in (0, 1) for k in ("impossible", "control") for i in range(10)]
    small, big = L.draw(items, 8, seed=3), L.draw(items, 16, seed=3)
    assert L.draw(items, 8, seed=3) == small and L.draw(items, 8, seed=4) != small
    strata = {(it.checkpoint, it.kind) for it in small}
    assert len(strata) == 4 and all(sum((i.checkpoint, i.kind) == s for i in small) == 2 for s in strata)
    assert set(small) <= set(big)


def test_gap_reads_the_labels_as_the_runs_on_policy_set(audited):
    """audit.gap's labelled set of the run: mini's labelled_answers.jsonl and labels.jsonl, each row of
    the tool carrying its iteration; the gate's reasons name both files."""
    from audit.checkpoints import find_checkpoints
    from audit.gap import labelled_set, run_settings

    run(audited, "i\n0\nbad\nv\ngood\nq\n")
    ckpt = find_checkpoints(audited).checkpoints[-1]
    got = labelled_set(run_settings(ckpt), ckpt)
    tool = [r for r in got.rows if "labeller" in r]
    assert len(tool) == 2 and all(r["iteration"] in (0, 1) for r in tool)
    assert got.where == "on-policy set (data/mini/labelled_answers.jsonl, labels.jsonl)"
    assert len(got.rows) == len(tool) + len((Path("data/mini") / "labelled_answers.jsonl").read_text().splitlines())
