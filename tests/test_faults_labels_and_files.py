"""Faults that gave wrong numbers or a traceback: labels counted twice or borrowed from another run,
readers that trusted edited run files, run locks on file systems without flock, torn or odd files.

Each test injects one fault into a small hand-made run (the tree of tests/test_audit_label.py) or a
unit, and asserts one clear line (or the exact count the files hold), a non-zero exit where the
command cannot do its job, and that nothing written before is lost.
"""

import errno
import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from selfplay import artifacts as A


def _flock_refused(code: int):
    def flock(fd, op):
        raise OSError(code, os.strerror(code))
    return flock


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP])
def test_lock_falls_back_to_a_pid_file_where_flock_is_refused(tmp_path, monkeypatch, code):
    """flock refused as NFS without lockd or Lustre without -o flock refuse it: the lock is the pid
    file, exclusive (a second holder is refused naming the pid and the file), released on exit, and
    a run that wrote nothing leaves no directory."""
    monkeypatch.setattr(fcntl, "flock", _flock_refused(code))
    run = tmp_path / "exp" / "r" / "seed0"
    with A.run_lock(run):
        pid_file = run / f"{A.LOCK}.pid"
        assert pid_file.read_text().split()[0] == str(os.getpid())
        assert not (run / A.LOCK).exists()  # the empty flock file is no lock here
        with pytest.raises(A.ConfigError, match=rf"in use by another run \(pid {os.getpid()} on .*lock file "
                                                rf".*{A.LOCK}.pid\).*rm "):
            with A.run_lock(run):
                pass
        (run / "iter_0").mkdir()
    assert sorted(p.name for p in run.iterdir()) == ["iter_0"]
    with A.run_lock(tmp_path / "fresh" / "seed0"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_pid_file_of_a_dead_holder_is_taken_over_and_flock_only_is_one_line(tmp_path, monkeypatch, caplog):
    """SELFPLAY_LOCK=file locks with the pid file even where flock works; a pid file left by a
    process of this host that is gone is taken over with a note. SELFPLAY_LOCK=flock where flock is
    refused: one line naming the setting that chooses the pid file."""
    import socket

    dead = subprocess.Popen(["true"])
    dead.wait()
    run = tmp_path / "seed0"
    run.mkdir()
    (run / f"{A.LOCK}.pid").write_text(f"{dead.pid} {socket.gethostname()} 2025-01-01T00:00:00\n")
    monkeypatch.setenv(A.LOCK_SETTING, "file")
    with A.run_lock(run):
        assert (run / f"{A.LOCK}.pid").read_text().split()[0] == str(os.getpid())
    assert f"took over the lock left by pid {dead.pid}" in caplog.text
    assert not list(run.iterdir())
    (run / f"{A.LOCK}.pid").write_text("4242 another-host 2025-01-01T00:00:00\n")  # cannot be asked
    with pytest.raises(A.ConfigError, match="pid 4242 on another-host"):
        with A.run_lock(run):
            pass
    (run / f"{A.LOCK}.pid").unlink()
    monkeypatch.setenv(A.LOCK_SETTING, "flock")
    monkeypatch.setattr(fcntl, "flock", _flock_refused(errno.ENOLCK))
    with pytest.raises(A.ConfigError, match=f"refuses flock .*set {A.LOCK_SETTING}=file"):
        with A.run_lock(run):
            pass
    monkeypatch.setenv(A.LOCK_SETTING, "nfs")
    with pytest.raises(A.ConfigError, match=f"{A.LOCK_SETTING}='nfs': expected auto, flock or file"):
        with A.run_lock(run):
            pass


# -- labels: one reader for audit.label and audit.gap -------------------------------------------------

import test_audit_label as TL  # noqa: E402  (the hand-made audited tree, scripted input)

from audit import label as L  # noqa: E402
from audit import label_screen, labels  # noqa: E402
from audit.checkpoints import find_checkpoints  # noqa: E402

run = TL.run


@pytest.fixture
def audited(tmp_path) -> Path:
    return TL.audited.__wrapped__(tmp_path)


def _labelled_set(exp: Path):
    from audit.plan import labelled_set

    ckpt = find_checkpoints(exp).checkpoints[-1]
    from audit.checkpoints import open_run

    return labelled_set(open_run(ckpt).settings, ckpt)


def _tool_rows(got) -> list[dict]:
    return [r for r in got.rows if "labeller" in r]


def _rows(f: Path) -> list[dict]:
    return [json.loads(x) for x in f.read_text().splitlines()]


def _write(f: Path, rows) -> None:
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_an_answer_labelled_twice_counts_once(audited):
    """Three answers labelled into the experiment's labels.jsonl, the same three again at the seed
    dir (checkpoint paths relative to it) and repeated in one file by a second labeller: the run's
    on-policy set holds 3 labels of the run, not 9; one answer labelled valid here and invalid there
    is refused, naming both rows."""
    run(audited, "v\nok\ni\n0\nbad\nv\nok\n")
    first = _rows(audited / "labels.jsonl")
    assert len(first) == 3
    seed = audited / "anchored" / "seed0"
    again = [{**r, "checkpoint": str(Path(r["checkpoint"]).relative_to("anchored/seed0")), "labeller": "two"}
             for r in first]
    _write(seed / "labels.jsonl", again + again)
    got = _labelled_set(audited)
    assert len(_tool_rows(got)) == 3
    assert sorted((r["task_id"], r["index"], r["iteration"]) for r in _tool_rows(got)) == sorted(
        (r["task_id"], r["index"], r["iteration"]) for r in first)
    flipped = {**again[0], "label": "invalid" if again[0]["label"] == "valid" else "valid"}
    _write(seed / "labels.jsonl", [flipped])
    with pytest.raises(L.LabelError, match=r"seed0/labels.jsonl:1: labels an answer '.*' that .*exp/labels.jsonl:1 labels "):
        _labelled_set(audited)


def test_labels_of_another_run_are_refused_not_counted(audited):
    """The same labels.jsonl after the seed was retrained (its audit sampled other texts at the same
    keys), and a file whose answers' cache is gone: one line each, naming the file and line and the
    recovery; audit.label refuses the file too."""
    run(audited, "v\nok\ni\n0\nbad\n")
    for f in sorted(audited.glob("anchored/seed0/iter_*/audit_cache/answers-*.jsonl")):
        f.write_text(f.read_text().replace("answer ", "retrained answer "))
    with pytest.raises(L.LabelError, match=r"exp/labels.jsonl:1: does not match the run: labels a text the audit "
                                         r"never sampled .* move the file away"):
        _labelled_set(audited)
    with pytest.raises(L.LabelError, match=r"labels.jsonl:1: does not match the run"):
        run(audited, "v\nok\n")
    for f in sorted(audited.glob("anchored/seed0/iter_*/audit_cache/answers-*.jsonl")):
        f.unlink()
    with pytest.raises(L.LabelError, match=r"does not hold .* labelled=false"):
        _labelled_set(audited)


def test_labels_of_an_edited_environment_are_left_out_not_refused(audited, caplog):
    """A label given against an earlier version of its environment (the record edited, then audited
    again) is left out with a note naming the task and kept in the file; the others count."""
    import dataclasses

    run(audited, "v\nok\ni\n0\nbad\nv\nok\n")
    f = audited / "labels.jsonl"
    rows = _rows(f)
    ckpt = find_checkpoints(audited).checkpoints[-1]
    from audit.checkpoints import open_run
    from selfplay.runs import load_data_split

    envs = {e.task_id: e for e in load_data_split(open_run(ckpt).settings.data, "all")}
    edited = rows[0]["task_id"]
    envs[edited] = dataclasses.replace(envs[edited], record={**envs[edited].record, "question": "edited"})
    files, kept = labels.run_labels(ckpt.path.parent, envs)
    assert len(kept) == sum(r["task_id"] != edited for r in rows)
    assert f"label(s) of task(s) {edited} were given against an earlier version" in caplog.text
    assert _rows(f) == rows  # nothing deleted


def test_a_labels_file_torn_inside_a_character_loses_only_that_line(audited):
    """A write cut inside a two-byte character: audit.gap reads the whole lines, audit.label cuts the
    torn one and goes on; a damaged line in the middle is one line naming file:line (never 'remove the
    file', which would lose every label)."""
    run(audited, "v\nok\n")
    f = audited / "labels.jsonl"
    whole = f.read_bytes()
    row = json.loads(whole)
    cut = json.dumps({**row, "reason": "naïve"}, ensure_ascii=False).encode()
    f.write_bytes(whole + cut[: cut.index("ï".encode()) + 1])
    assert len(_tool_rows(_labelled_set(audited))) == 1
    (n, total), _ = run(audited, "v\nok\nq\n")
    assert (n, total) == (1, 2) and f.read_bytes().startswith(whole) and len(_rows(f)) == 2
    f.write_bytes(whole + b"\xff\xfe\n" + f.read_bytes()[len(whole):])
    with pytest.raises(L.LabelError, match=r"labels.jsonl:2: not UTF-8 \(a damaged line\); fix or delete that line"):
        _labelled_set(audited)


def test_audit_label_refuses_an_unwritable_out_before_the_first_answer(audited, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert L.main([str(audited), "--labeller", "me", "--out", str(blocker / "labels.jsonl")]) == 1
    out = capsys.readouterr()
    assert "Answer 1 of" not in out.out
    (line,) = [ln for ln in out.err.splitlines() if ln.strip()]
    assert f"{blocker / 'labels.jsonl'}: the labels file cannot be written" in line and "Traceback" not in out.err


def test_audit_label_ctrl_c_exits_130_and_keeps_the_labels(audited, monkeypatch, capsys):
    run(audited, "v\nok\n")
    before = (audited / "labels.jsonl").read_bytes()

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(label_screen.Prompt, "ask", ctrl_c)
    assert L.main([str(audited), "--labeller", "me", "--size", "3"]) == 130
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert line.startswith("audit.label: interrupted (Ctrl-C): 1 of 3 labelled in ") and "rerun" in line
    assert (audited / "labels.jsonl").read_bytes() == before
    monkeypatch.setattr(L, "find_checkpoints", ctrl_c)
    assert L.main([str(audited), "--labeller", "me"]) == 130
    assert "before the first answer was shown" in capsys.readouterr().err


def test_terminal_escapes_in_an_answer_are_shown_not_sent(audited):
    for f in audited.glob("anchored/seed0/iter_*/audit_cache/answers-*.jsonl"):
        f.write_text(f.read_text().replace('"answer ', '"\\u001b]0;owned\\u0007\\u001b[2J answer '))
    _, screen = run(audited, "q\n", size=8)
    assert "\x1b" not in screen and "\x07" not in screen and "\\x1b]0;owned\\x07\\x1b[2J" in screen


def test_an_answers_row_without_task_id_is_one_line_and_not_written_back(audited, tmp_path):
    from audit.cache import write_answers

    f = next(audited.glob("anchored/seed0/iter_1/audit_cache/answers-*.jsonl"))
    f.write_text(f.read_text() + json.dumps({"key": "x", "answers": ["a"]}) + "\n")
    with pytest.raises(L.LabelError, match=rf"{f}: row 'x' is no answers row .* delete the file"):
        run(audited, "q\n")
    d = tmp_path / "iter_1"
    (d / "audit_cache").mkdir(parents=True)
    sample = type("S", (), {})()
    path = None
    write_answers(d, {"name": "p"}, sample, {"t": ["x"]})
    (path,) = (d / "audit_cache").glob("answers-*.jsonl")
    path.write_text(path.read_text() + json.dumps({"key": "bad", "answers": ["a"]}) + "\n")
    write_answers(d, {"name": "p"}, sample, {"t": ["y"]})
    assert [json.loads(x)["key"] for x in path.read_text().splitlines()] == ["t"]


def test_a_cache_byte_that_is_no_utf8_is_one_line_or_a_dropped_torn_row(tmp_path):
    from audit.cache import CacheError, JsonlCache

    f = tmp_path / "calls-x.jsonl"
    f.write_bytes(b'{"key": "a", "v": 1}\n{"key": "b", "v": "\xff"}\n{"key": "c", "v": 3}\n')
    with pytest.raises(CacheError, match=rf"{f}:2: unreadable cache row; delete the file"):
        JsonlCache(f)
    f.write_bytes(b'{"key": "a", "v": 1}\n{"key": "b", "v": "\xc3')  # cut inside a character
    c = JsonlCache(f)
    assert list(c.rows) == ["a"]
    c.add([{"key": "b", "v": 2}])
    assert f.read_bytes() == b'{"key": "a", "v": 1}\n{"key": "b", "v": 2}\n'


# -- readers of run files and writers of results -------------------------------------------------------

def _iteration(tmp_path: Path) -> Path:
    it = tmp_path / "exp" / "r" / "seed0" / "iter_1"
    (it / "adapter").mkdir(parents=True)
    (it / "adapter" / "adapter_config.json").write_text("{}")
    A.write_json(it / "metrics.json", {"iteration": 1, "metrics": {"pairs/kept": 3}, "pair_drops": {}})
    A.write_manifest(it)
    return it


def test_report_refuses_a_metrics_json_edited_after_it_was_written(tmp_path, capsys):
    """audit.report reads iter_<t>/metrics.json through the manifest, as resume and the audit do: an
    edited file is one line naming it, status 1, and no report.md."""
    from audit import report, report_load

    it = _iteration(tmp_path)
    exp = tmp_path / "exp"
    doc = {"version": 1, "settings": {}, "rewards": {"r": {"seeds": {"0": {"iterations": {
        "1": {"checkpoint": "r/seed0/iter_1", "metrics": {}}}}}}}}
    (exp / "audit.json").write_text(json.dumps(doc))
    assert report_load.train_metrics(exp / "audit.json", doc)["r"]["0"]["1"]["metrics"]["pairs/kept"] == 3
    m = json.loads((it / "metrics.json").read_text())
    m["metrics"]["pairs/kept"] = 30
    A.write_json(it / "metrics.json", m)
    assert report.main([str(exp)]) == 1
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert f"{it} is corrupt: metrics.json" in line and "rm -r" in line
    assert not (exp / "report.md").exists()


def test_report_power_section_of_merged_settings_and_a_seed_without_iterations(capsys):
    from audit import report, report_load

    lines = report.power_lines({"settings": [{"bootstrap": {"B": 1000}}, {"bootstrap": {"B": 2000}}], "rewards": {}})
    assert "different settings" in " ".join(lines)
    seed = {"iterations": {}, "experiment": "e"}
    merged = report_load.merge([(Path("a/audit.json"), {"version": 1, "settings": {}, "rewards": {"r": {"seeds": {"0": seed}}}})])
    assert merged["rewards"] == {}
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert "a/audit.json: r seed 0 has no audited iteration; left out" in line


def test_report_out_unwritable_is_one_line(tmp_path, capsys):
    from audit import report

    exp = tmp_path / "exp"
    exp.mkdir()
    src = Path(__file__).resolve().parents[1] / "experiments" / "results" / "demo" / "audit.json"
    (exp / "audit.json").write_bytes(src.read_bytes())
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert report.main([str(exp), "--out", str(blocker / "report.md")]) == 1
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.strip()]
    assert str(blocker) in line and "choose another --out" in line and "Traceback" not in err


def test_results_are_written_together_or_not_at_all(tmp_path, monkeypatch):
    """A full disk while the second of audit.json and audit.csv is written: both keep their old
    bytes, no temp file is left, and the error names the file."""
    old = {tmp_path / "audit.json": "old json", tmp_path / "audit.csv": "old csv"}
    for p, text in old.items():
        p.write_text(text)
    real = os.fsync
    calls = []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError) as e:
        A.write_texts_atomic({p: "new" for p in old})
    assert e.value.filename == str(tmp_path / "audit.csv") and e.value.errno == errno.ENOSPC
    assert {p: p.read_text() for p in old} == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.csv", "audit.json"]


# -- training that could never train ---------------------------------------------------------------------

def test_labelled_candidates_of_one_class_are_refused_before_anything_is_written(tmp_path, monkeypatch):
    """reward=label_gold on train environments whose stress answers are all invalid: no pair can form
    in any iteration, so the run is refused before it writes or loads anything."""
    import dataclasses

    from hydra import compose, initialize_config_dir

    import selfplay.train as train
    from selfplay.config import CONF_DIR, ConfigError

    real = train.load_train_envs
    one_class = lambda s: [dataclasses.replace(e, stress_answers=tuple(  # noqa: E731
        a for a in e.stress_answers if a.validity == "invalid")) for e in real(s)]
    monkeypatch.setattr(train, "load_train_envs", one_class)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["+policy=tiny-llama", "reward=label_gold", "logger=none",
                                           f"output_root={tmp_path / 'out'}"])
    with pytest.raises(ConfigError, match="reward=label_gold with candidates: labelled: none of the .* train "
                                          "environments .* two different labels, so no pair can form"):
        train.run(cfg)
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(train, "load_train_envs", real)
    train.check_labelled_candidates(train.train_settings(cfg), real(train.train_settings(cfg)))  # mini: fine


# -- data errors and model stamps --------------------------------------------------------------------------

def test_schema_errors_keep_their_reason_and_many_errors_are_summarised():
    from jsonschema import Draft202012Validator

    from selfplay.envs.errors import EnvError, EnvLoadError
    from selfplay.envs.schema import short_message

    v = Draft202012Validator({"type": "array", "minItems": 3})
    (err,) = v.iter_errors(["x" * 500, "y" * 500])
    msg = short_message(err)
    assert len(msg) <= 230 and "is too short" in msg and "minItems 3" in msg
    many = EnvLoadError([EnvError("f.json", f"t{i}", "question", "must be a string") for i in range(4999)])
    lines = str(many).splitlines()
    assert lines[0] == "4999 error(s) while loading environments:" and len(lines) == 7
    assert "and 4994 more; `python -m selfplay.envs PATH` lists every one" in lines[-1]


def test_a_torn_model_stamp_is_rebuilt_and_a_wrong_hf_id_is_named(tmp_path):
    from selfplay.models import loading
    from selfplay.models.config import PolicyConfig

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "source.json").write_text('{"gguf_file": "m.gg')  # cut short
    built = []
    assert loading._cached(folder, {"gguf_file": "m.gguf"}, lambda out: built.append(out)) == folder
    assert built and loading.read_stamp(folder / "source.json") == {"gguf_file": "m.gguf"}
    cfg = PolicyConfig(name="typo", hf_id="HuggingFaceTB/NoSuchModel-135M", chat_template="smollm2")
    err = OSError("HuggingFaceTB/NoSuchModel-135M is not a local folder and is not a valid model identifier\n"
                  "listed on 'https://huggingface.co/models'")
    msg = str(loading._hub_error(cfg, err))
    assert "\n" not in msg and "neither a model on the Hugging Face hub nor a local folder" in msg
    assert "hub cannot be reached" not in msg
    offline = str(loading._hub_error(cfg, OSError("We couldn't connect to\n'https://huggingface.co'")))
    assert "\n" not in offline and "hub cannot be reached" in offline


def test_a_full_disk_while_an_adapter_is_saved_is_an_oserror_naming_it(tmp_path):
    """safetensors reports a full disk as its own error type, which training's `except OSError` (one
    line, the unfinished iteration discarded) would not see; `saving` turns it into that OSError."""
    from safetensors import SafetensorError

    with pytest.raises(OSError) as e:
        with A.saving(tmp_path / "adapter"):
            raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                  'message: "No space left on device" })')
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "adapter")
    with pytest.raises(SafetensorError):  # any other library error is left as it is
        with A.saving(tmp_path / "adapter"):
            raise SafetensorError("header too large")
