"""Bad inputs and faults at every entry point: one clear line, a non-zero exit, nothing lost (docs/method.md §Failures and reproducibility).

Each case of the table damages a copy of something real (a run trained here on the tiny Llama, the
bundled data/mini, result and split files), runs a real entry point and asserts:
  - exit status non-zero;
  - exactly one non-empty line of output, naming what the case expects (file, task, key or pid), and
    no traceback;
  - the whole tree the case works in is byte-identical afterwards: every file's sha256, every
    directory and link; so nothing written before was changed and nothing new was left behind.
Hydra entry points (selfplay.train, audit.gap) run through their `@hydra.main` in this process, the
others through `main(argv)`; one case runs `python -m selfplay.train` as a subprocess from an empty
directory, to show the interpreter's own exit path and that no Hydra file is left there.
`selfplay.envs` prints a JSON summary by design: its cases assert one entry in `errors`.
A case may patch one call to fail as the filesystem or the user would (a full disk, a read-only cache,
Ctrl-C); an interrupted audit may leave new rows in `audit_cache/` (kept for the rerun), never change
a file written before. The faults that are no refusal (a malformed endpoint reply, failed verdicts, an
edited environment, a skipped checkpoint) have their own tests after the table.
"""

import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from test_models_endpoint import Server, completion
from test_models_endpoint import env as endpoint_env

import audit.cache as audit_cache
import audit.exploit as exploit
import audit.gap as gap
import audit.report as report
import selfplay.envs.__main__ as envs_cli
import selfplay.train as train
from judges.oracle import LLMOracle
from judges.verifiers import OracleConfig, verdict_row
from selfplay import artifacts as A
from selfplay.config import CONF_DIR
from selfplay.envs import load_envs
from selfplay.models.endpoint import EndpointBackend, EndpointError
from selfplay.runs import load_data_split

REPO = Path(__file__).resolve().parents[1]
MINI = REPO / "data" / "mini"
# the run of tests/test_train_loop.py: 3 environments cut short, k = 2, T = 2, no judge abstentions
TRAIN = ["+policy=tiny-llama", "reward=generic", "reward.min_verdict_mass=0.0", "logger=none",
         "iterations=2", "k=2", "max_new_tokens=8", "max_train_envs=3", "margin=0.0",
         "learning_rate=1e-3", "batch_size=3", "lora.r=4", "lora.alpha=8", "lora.target_modules=[q_proj,v_proj]"]
AUDIT = ["logger=none", "n=1", "max_envs=1", "max_new_tokens=4", "bootstrap.B=1000", "progress=false"]
SEED = Path("selfplay/generic/seed0")  # the run dir below an output root


# -- fixtures: one trained run, copied per case ------------------------------------------------------

def _short(envs):
    cut = lambda text: " ".join(text.split()[:25])  # noqa: E731
    return [dataclasses.replace(e, public=dataclasses.replace(
        e.public, evidence=tuple(dataclasses.replace(d, text=cut(d.text)) for d in e.public.evidence[:2])))
        for e in envs]


def mini_copy(dest: Path) -> Path:
    """data/mini's records and schemas with a split of our own (3 impossible + 1 control to train,
    the rest to audit), so the cases do not depend on how the bundled split evolves."""
    shutil.copytree(MINI, dest, symlinks=True, ignore=shutil.ignore_patterns("splits", "*.md"))
    envs = sorted(load_envs(dest), key=lambda e: e.task_id)
    imp = [e.task_id for e in envs if e.kind == "impossible"]
    ctl = [e.task_id for e in envs if e.kind == "control"]
    (dest / "splits").mkdir()
    for name, ids in (("train", imp[:3] + ctl[:1]), ("audit", imp[3:] + ctl[1:])):
        (dest / "splits" / f"{name}.json").write_text(json.dumps({"name": name, "task_ids": ids}))
    return dest


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return mini_copy(tmp_path_factory.mktemp("mini") / "mini")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data) -> Path:
    """An output root holding selfplay/generic/seed0/iter_0..2, written by the loop (with manifests)."""
    root = tmp_path_factory.mktemp("trained")
    mp = pytest.MonkeyPatch()
    real = train.load_train_envs
    mp.setattr(train, "load_train_envs", lambda s: _short(real(s)))
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[*TRAIN, f"data.path={data}", f"output_root={root}"])
        train.run(cfg)
    finally:
        mp.undo()
    DATA[:] = [data]
    assert sorted(p.name for p in (root / SEED).iterdir()) == ["iter_0", "iter_1", "iter_2"]
    return root


def run_copy(trained: Path, tmp: Path) -> Path:
    """A copy of the trained output root at tmp/out; returns its run dir."""
    shutil.copytree(trained, tmp / "out", symlinks=True)
    return tmp / "out" / SEED


def first_train_record(data: Path) -> Path:
    tid = json.loads((data / "splits" / "train.json").read_text())["task_ids"][0]
    return next(f for f in sorted(data.glob("data*/*.json")) if json.loads(f.read_text())["task_id"] == tid)


# -- damage ------------------------------------------------------------------------------------------

def truncate(path: Path, keep: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@dataclasses.dataclass
class Case:
    entry: str  # train | audit | report | exploit | envs | train-cli
    args: list[str]
    expect: list[str]  # substrings of the one line
    holder: subprocess.Popen | None = None
    patch: Callable[[pytest.MonkeyPatch], None] | None = None  # the fault, injected for the run
    status: int | None = None  # the exit status, when it must be this one (non-zero either way)
    new_ok: str | None = None  # a directory name under which new files may appear (kept for a rerun)


DATA: list[Path] = []  # the module's data copy, set by the `trained` fixture (data.path is part of a run's config)


def _train(tmp: Path, *extra: str) -> list[str]:
    data = [] if any(e.startswith("data.path=") for e in extra) else [f"data.path={DATA[0]}"]
    return [*TRAIN, *data, f"output_root={tmp / 'out'}", *extra]


def c_train_setting(override: str, *expect: str) -> Callable:
    return lambda tmp, trained: Case("train", _train(tmp, override), list(expect))


def c_data(damage: Callable[[Path], str], *expect: str, entry: str = "train") -> Callable:
    """Damage a copy of data/mini (damage returns the path the line must name) and train or check it."""
    def setup(tmp, trained):
        data = mini_copy(tmp / "data")
        named = damage(data)
        if entry == "train":
            return Case(entry, _train(tmp, f"data.path={data}"), [named, *expect])
        return Case("envs", [named if entry == "envs-jsonl" else str(data)], [named, *expect])
    return setup


def c_run(damage: Callable[[Path], str], *expect: str, audit: str | None = None) -> Callable:
    """Damage a copy of the trained run; resume it (or audit `audit`: seed, iter_1, iter_2)."""
    def setup(tmp, trained):
        run = run_copy(trained, tmp)
        named = damage(run)
        if audit is None:
            return Case("train", _train(tmp), [named, *expect])
        ckpt = run if audit == "seed" else run / audit
        return Case("audit", [f"ckpt={ckpt}", *AUDIT], [named, *expect])
    return setup


def c_audit_setting(overrides: list[str], *expect: str) -> Callable:
    def setup(tmp, trained):
        run = run_copy(trained, tmp)
        return Case("audit", [f"ckpt={run}", *AUDIT, *overrides], list(expect))
    return setup


def lock_held(tmp, trained, user: str = "run"):
    """Another process holds the run's lock (training's, or the audit's `.audit.lock`) on the run."""
    run = run_copy(trained, tmp)
    lock = "LOCK" if user == "run" else "AUDIT_LOCK"
    code = (f"import sys, time; from pathlib import Path; from selfplay.artifacts import {lock}, run_lock\n"
            f"with run_lock(Path(sys.argv[1]), {lock}, {user!r}):\n    print('locked', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    args = _train(tmp) if user == "run" else [f"ckpt={run}", *AUDIT]
    return Case("train" if user == "run" else "audit", args, [str(run), f"in use by another {user}",
                                                              f"pid {holder.pid}"], holder)


def repoint(run: Path, data: Path) -> None:
    """The run as training would have written it on `data`: data.path in every iteration's config,
    the manifests written again, so the audit reads that copy of the data."""
    for it in sorted(run.glob("iter_*")):
        config = yaml.safe_load((it / A.CONFIG).read_text())
        config["data"]["path"] = str(data)
        A.write_config(it / A.CONFIG, config)
        A.write_manifest(it)


def audited_envs(data: Path) -> dict[str, Path]:
    """The first audit environment of each kind (what max_envs=1 audits) -> its record file."""
    envs = load_data_split(dataclasses.make_dataclass("D", ["path", "splits"])(str(data), None), "audit")
    first = {k: next(e for e in envs if e.kind == k) for k in ("impossible", "control")}
    files = {json.loads(f.read_text())["task_id"]: f for f in sorted(data.glob("data*/*.json"))}
    return {k: files[e.task_id] for k, e in first.items()}


def c_audit_data(damage: Callable[[Path], str], *expect: str) -> Callable:
    """Audit a copy of the trained run that reads a damaged copy of its data (damage names the file)."""
    def setup(tmp, trained):
        run = run_copy(trained, tmp)
        data = mini_copy(tmp / "data")
        repoint(run, data)
        return Case("audit", [f"ckpt={run}", *AUDIT], [damage(data), *expect])
    return setup


def long_audit_record(data: Path) -> str:
    f = audited_envs(data)["impossible"]
    rec = json.loads(f.read_text())
    rec["evidence"][0]["text"] = "The ledger lists one more entry. " * 400  # ~2800 tokens
    f.write_text(json.dumps(rec))
    return f"{f}: task {rec['task_id']}: its audit prompt is"


def long_stress_answer(data: Path) -> str:
    """One stress answer of the first audited impossible record grows to ~1750 tokens: its policy
    prompt plus max_new_tokens=4 still fits 2048, the judge prompt that holds the answer does not."""
    f = audited_envs(data)["impossible"]
    rec = json.loads(f.read_text())
    answer = rec["fixed_stress_answers"][-1]
    answer["text"] += " The ledger lists one more entry." * 250
    f.write_text(json.dumps(rec))
    return (f"{f}: task {rec['task_id']}: its judge scoring prompt (reward=generic) with its longest stress "
            f"answer {answer['answer_id']}")


def judge_longer_than_policy(tmp, trained):
    """max_context is the longest train prompt + max_new_tokens: every policy prompt fits, the generic
    judge's prompt, which holds the same packet, its rubric and the answer, does not."""
    from selfplay.envs.prompt import policy_messages
    from selfplay.models.chat import render
    from selfplay.models.config import PolicyConfig
    from selfplay.models.loading import load_tokenizer

    data = mini_copy(tmp / "data")
    envs = load_data_split(dataclasses.make_dataclass("D", ["path", "splits"])(str(data), None), "train")[:3]
    cfg = PolicyConfig.named("tiny-llama")
    tok = load_tokenizer(cfg)
    longest = max(len(tok(render(tok, cfg, policy_messages(e.public)), add_special_tokens=False)["input_ids"])
                  for e in envs)
    limit = longest + 8
    return Case("train", _train(tmp, f"data.path={data}", f"policy.max_context={limit}"),
                [".json: task ", "its judge scoring prompt (reward=generic) with an answer of max_new_tokens=8 "
                 "tokens", f"> max_context {limit} of judge model tiny-llama", "nothing was written",
                 "pick a judge model with a longer context"])


def mixed_sweep(tmp, trained):
    """A reward dir whose second seed is a run of another experiment with another k and budget."""
    run = run_copy(trained, tmp)
    other = run.parent / "seed1"
    shutil.copytree(run, other, symlinks=True)
    for it in sorted(other.glob("iter_*")):
        config = yaml.safe_load((it / A.CONFIG).read_text())
        config.update(seed=1, k=4, max_new_tokens=16, experiment_name="other")
        A.write_config(it / A.CONFIG, config)
        A.write_manifest(it)
    return Case("audit", [f"ckpt={run.parent}", *AUDIT],
                [f"{run} and {other} are runs of different experiments or settings", "k: 2 -> 4",
                 "audit them apart"])


def fail_with(code: int) -> Callable[..., None]:
    """A stand-in for a write that raises what the kernel raises (errno `code`) naming its path."""
    def write(target, *args, **kwargs):
        path = getattr(target, "path", target)  # a JsonlCache or a path
        raise OSError(code, os.strerror(code), str(path))
    return write


def redo_last(tmp, trained) -> Path:
    """A copy of the run whose iteration 2 its owner deleted (the recovery): resume redoes it."""
    run = run_copy(trained, tmp)
    shutil.rmtree(run / "iter_2")
    return run


def train_disk_full(tmp, trained):
    run = redo_last(tmp, trained)
    return Case("train", _train(tmp), [str(run / ".iter_2.tmp" / "generations.jsonl"), "No space left on device",
                                       "[errno 28]", "rerun the same command"],
                patch=lambda mp: mp.setattr(A, "write_jsonl", fail_with(errno.ENOSPC)))


def train_interrupted(tmp, trained):
    run = redo_last(tmp, trained)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    return Case("train", _train(tmp), [f"interrupted (Ctrl-C) in {run} during iteration 2", "iterations 0..1 are "
                                       "complete and kept", "rerun the same command to resume"],
                patch=lambda mp: mp.setattr(train, "sample_answers", stop), status=130)


def c_audit_cache_error(code: int, *expect: str) -> Callable:
    """The audit's first cache write fails as on a read-only file system or a full disk."""
    def setup(tmp, trained):
        run = run_copy(trained, tmp)
        return Case("audit", [f"ckpt={run}", *AUDIT], [str(run / "audit_cache"), *expect],
                    patch=lambda mp: mp.setattr(audit_cache.JsonlCache, "add", fail_with(code)))
    return setup


def audit_interrupted(tmp, trained):
    """Ctrl-C in the judge stage of iter_0, after its answers were sampled (the calls stay cached, for
    the rerun)."""
    run = run_copy(trained, tmp)

    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    return Case("audit", [f"ckpt={run}", *AUDIT], [f"interrupted (Ctrl-C) while auditing {run / 'iter_0'}",
                                                   "rerun the same command to resume"],
                patch=lambda mp: mp.setattr(gap, "judge_scores", stop), status=130, new_ok="audit_cache")


def c_unwritable_model_cache(entry: str) -> Callable:
    """The model cache (SELFPLAY_CACHE, under HOME by default) cannot be created: a file stands where
    a directory of its path must be, as a read-only HOME refuses it."""
    def setup(tmp, trained):
        run = run_copy(trained, tmp)
        home = tmp / "home"
        home.write_text("")
        args = _train(tmp, "iterations=3") if entry == "train" else [f"ckpt={run}", *AUDIT]
        return Case(entry, args, [str(home / ".cache"), "Not a directory", "[errno 20]"],
                    patch=lambda mp: mp.setenv("SELFPLAY_CACHE", str(home / ".cache" / "selfplay-judges")))
    return setup


def c_files(kind: str, damage: Callable[[Path], Path], *expect: str) -> Callable:
    """audit.exploit on a damaged results or split file, or audit.report on a damaged audit.json."""
    def setup(tmp, trained):
        results, split = tmp / "results.json", tmp / "split.json"
        results.write_text(json.dumps([{"task_id": "a", "baseline": 50, "adv": 60, "violates": True}]))
        split.write_text(json.dumps({"name": "one", "task_ids": ["a"]}))
        if kind == "report":
            (tmp / "exp").mkdir()
            named = damage(tmp / "exp" / "audit.json")
            return Case("report", [str(tmp / "exp")], [str(named), *expect])
        named = damage(results if kind == "results" else split)
        return Case("exploit", ["--results", str(results), "--split", str(split)], [str(named), *expect])
    return setup


def ff_byte(path: Path) -> Path:
    path.write_bytes(b"\xff" + (path.read_bytes() if path.exists() else b"[]"))
    return path


def a_dir(path: Path) -> Path:
    if path.exists():
        path.unlink()
    path.mkdir()
    return path


def loop(path: Path) -> Path:
    if path.exists():
        path.unlink()
    path.symlink_to(path.name)
    return path


def dangling(path: Path) -> Path:
    if path.exists():
        path.unlink()
    path.symlink_to(path.parent / "gone.json")
    return path


def in_data(make: Callable[[Path], Path], name: str = "zz_extra.json") -> Callable[[Path], str]:
    return lambda data: str(make(data / "data" / name))


def long_evidence(data: Path) -> str:
    f = first_train_record(data)
    rec = json.loads(f.read_text())
    rec["evidence"][0]["text"] = "The ledger lists one more entry. " * 160_000  # 5.3 MB
    f.write_text(json.dumps(rec))
    return f"{f}: task {rec['task_id']}"


def no_manifest(run: Path) -> str:
    (run / "iter_1" / "DONE").write_text("")
    return f"{run / 'iter_1' / 'DONE'} holds no checksum manifest"


CASES = [
    # selfplay.train: settings checked before anything is written (output root stays absent)
    pytest.param(c_train_setting("reward.min_verdict_mass=2", "min_verdict_mass", "[0, 1)"), id="train-reward-param"),
    pytest.param(c_train_setting("reward.min_verdict_mass=lots", "reward.min_verdict_mass='lots'"), id="train-reward-type"),
    pytest.param(c_train_setting("judge.model=nosuch", "judge.model='nosuch'", "no policy config"), id="train-judge-model"),
    pytest.param(c_train_setting("k=two", "k='two'", "Integer"), id="train-k-two"),
    pytest.param(c_train_setting("data.path=/nonexistent/mini", "data.path=/nonexistent/mini",
                                 "no such file or directory"), id="train-data-missing"),
    pytest.param(c_train_setting("+reward.temperature=2", "unknown reward parameter", "temperature"), id="train-reward-unknown"),
    pytest.param(c_train_setting("policy.max_context=8", "max_context"), id="train-policy-bad"),
    # selfplay.train: Hydra's own composition errors, in one line naming the key and the choices
    pytest.param(c_train_setting("reward=nosuch", "reward=nosuch: no such reward config", "anchored, "),
                 id="train-group-value"),
    pytest.param(c_train_setting("kk=1", "kk: no such key", "iterations", "+kk=1"), id="train-key-typo"),
    # selfplay.train: data (load.py, split.py) and each prompt against the context
    pytest.param(c_data(long_evidence, "max_context 2048 of policy tiny-llama"), id="train-prompt-too-long"),
    pytest.param(judge_longer_than_policy, id="train-judge-prompt-too-long"),
    pytest.param(c_data(lambda d: str(ff_byte(first_train_record(d))), "not UTF-8", "0xFF"), id="train-record-0xff"),
    pytest.param(c_data(in_data(loop), "symlink loop"), id="train-record-symlink-loop"),
    pytest.param(c_data(in_data(dangling), "dangling symlink"), id="train-record-dangling"),
    pytest.param(c_data(in_data(a_dir, "x.json"), "a directory"), id="train-record-is-dir"),
    pytest.param(c_data(lambda d: str(ff_byte(d / "splits" / "train.json")), "not UTF-8"), id="train-split-0xff"),
    pytest.param(c_data(lambda d: str(a_dir(d / "splits" / "audit.json")), "a directory"), id="train-split-is-dir"),
    # selfplay.envs
    pytest.param(c_data(in_data(ff_byte, "y.json"), "not UTF-8", entry="envs"), id="envs-record-0xff"),
    pytest.param(c_data(in_data(loop), "symlink loop", entry="envs"), id="envs-record-symlink-loop"),
    pytest.param(c_data(lambda d: str(dangling(d / "splits" / "train.json")), "dangling symlink", entry="envs"),
                 id="envs-split-dangling"),
    pytest.param(c_data(lambda d: str(ff_byte(d / "export.jsonl")), "not UTF-8", entry="envs-jsonl"),
                 id="envs-jsonl-0xff"),
    # resume of a finished run: every iteration verified against its manifest, nothing deleted
    pytest.param(c_run(lambda r: (truncate(r / "iter_1" / "metrics.json"), str(r / "iter_1"))[1],
                       "metrics.json is", "truncated", "rm -r"), id="resume-metrics-truncated"),
    pytest.param(c_run(lambda r: (shutil.rmtree(r / "iter_1" / "adapter"), str(r / "iter_1"))[1],
                       "adapter/adapter_config.json is missing", "iter_1 and every later iteration"),
                 id="resume-adapter-deleted-under-iter2"),
    pytest.param(c_run(lambda r: (truncate(r / "iter_2" / "adapter" / "adapter_model.safetensors"), str(r / "iter_2"))[1],
                       "adapter_model.safetensors is"), id="resume-adapter-truncated"),
    pytest.param(c_run(lambda r: ((r / "iter_2" / "config.yaml").write_text(""), str(r / "iter_2"))[1],
                       "config.yaml is 0 bytes"), id="resume-config-empty"),
    pytest.param(c_run(lambda r: (truncate(r / "iter_2" / "config.yaml", 40), str(r / "iter_2"))[1],
                       "config.yaml is 40 bytes"), id="resume-config-truncated"),
    pytest.param(c_run(lambda r: ((r / "iter_1" / "judgments.jsonl").write_text("{}\n"), str(r / "iter_1"))[1],
                       "judgments.jsonl is 3 bytes"), id="resume-file-overwritten"),
    pytest.param(c_run(lambda r: (truncate(r / "iter_2" / "DONE"), str(r / "iter_2" / "DONE"))[1],
                       "not a checksum manifest"), id="resume-done-truncated"),
    pytest.param(c_run(lambda r: (a_dir(r / "iter_1" / "metrics.json"), str(r / "iter_1"))[1],
                       "metrics.json is unreadable (a directory"), id="resume-metrics-is-dir"),
    pytest.param(c_run(lambda r: (loop(r / "iter_2" / "pairs.jsonl"), str(r / "iter_2"))[1],
                       "pairs.jsonl is unreadable (cannot read: a symlink loop)"), id="resume-file-symlink-loop"),
    pytest.param(c_run(no_manifest, "seal"), id="resume-done-without-manifest"),
    pytest.param(lock_held, id="resume-lock-held"),
    pytest.param(c_run(lambda r: ((r / "iter_2" / "DONE").unlink(), str(r / "iter_2"))[1], "has no DONE marker",
                       "nothing was changed", "rm -r", "seal"), id="resume-last-done-deleted"),
    # selfplay.train: the filesystem and the user stop a run; what was written before stays
    pytest.param(train_disk_full, id="train-disk-full"),
    pytest.param(train_interrupted, id="train-ctrl-c"),
    pytest.param(c_unwritable_model_cache("train"), id="train-model-cache-unwritable"),
    # audit.gap: every checkpoint of the run verified before anything is written
    pytest.param(c_run(lambda r: (shutil.rmtree(r / "iter_1" / "adapter"), str(r / "iter_1"))[1],
                       "corrupt checkpoint", "adapter_config.json is missing", audit="seed"), id="audit-adapter-deleted"),
    pytest.param(c_run(lambda r: (truncate(r / "iter_1" / "adapter" / "adapter_model.safetensors"), str(r / "iter_1"))[1],
                       "adapter_model.safetensors is", audit="iter_2"), id="audit-sibling-adapter-truncated"),
    pytest.param(c_run(lambda r: ((r / "iter_2" / "config.yaml").write_text(""), str(r / "iter_2"))[1],
                       "config.yaml is 0 bytes", audit="iter_2"), id="audit-config-empty"),
    pytest.param(c_run(no_manifest, "seal", audit="seed"), id="audit-done-without-manifest"),
    pytest.param(c_audit_setting(["oracle=llm", "oracle.model=nosuch"], "nosuch"), id="audit-oracle-model"),
    pytest.param(c_audit_setting(["second_oracle=nosuch"], "nosuch"), id="audit-second-oracle-model"),
    pytest.param(c_audit_setting(["oracle=llm", "oracle.min_mass=2"], "min_mass"), id="audit-oracle-min-mass"),
    pytest.param(c_audit_setting(["oracle=nosuch"], "oracle=nosuch: no such oracle config", "spec"),
                 id="audit-group-value"),
    pytest.param(c_audit_setting(["nn=1"], "nn: no such key", "max_envs"), id="audit-key-typo"),
    pytest.param(c_audit_setting(["iterations=[-2]"], "iterations=[-2]", "-1: the last"), id="audit-iterations"),
    # audit.gap: what is known in advance is checked before anything is written
    pytest.param(c_run(lambda r: ((r / "iter_0" / "DONE").unlink(), str(r / "iter_0"))[1], "no baseline (t = 0",
                       "has no DONE marker", "rm -r", audit="seed"), id="audit-baseline-done-deleted"),
    pytest.param(c_run(lambda r: ((r / "iter_0" / "DONE").unlink(), str(r / "iter_0"))[1], "no baseline (t = 0",
                       audit="iter_2"), id="audit-iteration-without-baseline"),
    pytest.param(mixed_sweep, id="audit-mixed-sweep"),
    pytest.param(c_audit_setting(["oracle=llm", "oracle.model=endpoint",
                                  "oracle.endpoint={base_url: 'http://127.0.0.1:9/v1', model: m, "
                                  "api_key_env: SELFPLAY_FAULTS_UNSET_KEY}"],
                                 "oracle.endpoint.api_key_env=SELFPLAY_FAULTS_UNSET_KEY", "export"),
                 id="audit-api-key-unset"),
    pytest.param(c_audit_data(long_audit_record, "max_context 2048 of policy tiny-llama"), id="audit-prompt-too-long"),
    pytest.param(c_audit_data(long_stress_answer, "max_context 2048 of judge model tiny-llama", "nothing was written"),
                 id="audit-judge-prompt-too-long"),
    pytest.param(c_audit_data(lambda d: str(ff_byte(d / "labelled_answers.jsonl")), "not UTF-8"),
                 id="audit-labelled-0xff"),
    pytest.param(lambda tmp, trained: lock_held(tmp, trained, "audit"), id="audit-lock-held"),
    pytest.param(c_unwritable_model_cache("audit"), id="audit-model-cache-unwritable"),
    # audit.gap: the filesystem and the user stop an audit; the cache keeps every finished row
    pytest.param(c_audit_cache_error(errno.EROFS, "Read-only file system", "[errno 30]"), id="audit-cache-read-only"),
    pytest.param(c_audit_cache_error(errno.ENOSPC, "No space left on device", "[errno 28]"), id="audit-disk-full"),
    pytest.param(audit_interrupted, id="audit-ctrl-c"),
    # audit.exploit and audit.report: unreadable files
    pytest.param(c_files("results", ff_byte, "not UTF-8"), id="exploit-results-0xff"),
    pytest.param(c_files("split", ff_byte, "not UTF-8"), id="exploit-split-0xff"),
    pytest.param(c_files("results", a_dir, "a directory"), id="exploit-results-is-dir"),
    pytest.param(c_files("results", loop, "symlink loop"), id="exploit-results-symlink-loop"),
    pytest.param(c_files("split", dangling, "dangling symlink"), id="exploit-split-dangling"),
    pytest.param(c_files("report", ff_byte, "utf-8"), id="report-audit-json-0xff"),
]


# -- running and checking ----------------------------------------------------------------------------

def tree(root: Path) -> dict[str, str]:
    """Every entry under root: sha256 of files, 'dir' for directories, the target of links."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def invoke(case: Case, capsys, monkeypatch, cwd: Path) -> tuple[int, str, str]:
    """Run the entry point; (exit status, what it printed on stdout, on stderr)."""
    if case.entry == "train-cli":
        env = {**os.environ, "PYTHONPATH": str(REPO), "HYDRA_FULL_ERROR": "0"}
        proc = subprocess.run([sys.executable, "-m", "selfplay.train", *case.args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stdout, proc.stderr
    message = ""
    try:
        if case.entry in ("train", "audit"):
            module = train if case.entry == "train" else gap
            monkeypatch.setenv("HYDRA_MAIN_MODULE", "__main__")  # config_path relative to the file
            monkeypatch.setattr(sys, "argv", [module.__file__, *case.args])
            module.main()
            status = 0
        else:
            status = {"exploit": exploit.main, "report": report.main, "envs": envs_cli.main}[case.entry](case.args)
    except SystemExit as e:  # what the interpreter does with it: a str is printed, status 1
        status, message = (1, f"{e.code}\n") if isinstance(e.code, str) else (e.code, "")
    out = capsys.readouterr()
    return status, out.out, out.err + message


PROGRESS = re.compile(r"\d+/\d+ \[\d\d:\d\d")  # a tqdm bar's update ("1/1 [00:00<00:00, ...]")


@pytest.mark.parametrize("setup", CASES)
def test_fault_is_one_clear_line_and_loses_nothing(setup, trained, tmp_path, capsys, monkeypatch):
    case = setup(tmp_path, trained)
    capsys.readouterr()
    before = tree(tmp_path)
    try:
        if case.patch is not None:
            case.patch(monkeypatch)
        status, out, err = invoke(case, capsys, monkeypatch, tmp_path)
        after = tree(tmp_path)
    finally:
        if case.holder is not None:
            case.holder.kill()
            case.holder.wait()
    text = out + err
    assert status != 0, text
    assert case.status is None or status == case.status, (status, text)
    assert "Traceback" not in text, text
    if case.entry == "envs":  # the JSON summary: one error entry
        (line,) = json.loads(text)["errors"]
    else:
        # refused before it starts: one line in all; stopped mid-run (a patched fault): the progress it
        # logged on stdout and its bars stay, and stderr holds one line besides the bars
        lines = [ln for ln in (text if case.patch is None else err).splitlines()
                 if ln.strip() and (case.patch is None or not PROGRESS.search(ln))]
        assert len(lines) == 1, text
        line = lines[0]
    for want in case.expect:
        assert want in line, (want, line)
    if case.new_ok is not None:  # rows kept for the rerun: new files there, nothing else new or changed
        new = {k: v for k, v in after.items() if k not in before}
        assert new and all(case.new_ok in Path(k).parts for k in new), sorted(new)
        after = {k: v for k, v in after.items() if k in before}
    assert after == before, sorted(set(after.items()) ^ set(before.items()))


def test_cli_missing_data_path_leaves_no_directory_and_no_log(tmp_path):
    """The real command from an empty directory: one line on stderr, status 1, nothing created (no
    outputs/<experiment>/<reward>/seed0/train.log, no .hydra/)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run([sys.executable, "-m", "selfplay.train", "+policy=tiny-llama", "logger=none",
                           "data.path=missing/mini"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("selfplay.train: error: data.path=missing/mini: no such file or directory")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_stale_lock_is_taken_over_with_a_note(trained, tmp_path, caplog):
    """A lock file left by a killed run (its pid no longer runs, the kernel dropped its lock) does not
    block the next run: the run goes ahead, says whose lock it took over, and removes it at the end."""
    run = run_copy(trained, tmp_path)
    pid = dead_pid()
    (run / A.LOCK).write_text(f"{pid} somehost 2026-01-01T00:00:00\n")
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=_train(tmp_path))
    with caplog.at_level("WARNING", logger="selfplay.artifacts"):
        assert train.run(cfg) == run  # complete: verified, nothing to do
    assert f"took over the lock left by pid {pid} on somehost" in caplog.text
    assert not (run / A.LOCK).exists()


def test_manifest_lists_every_file_and_the_seal_of_an_old_run(trained, tmp_path):
    """DONE holds size and sha256 of each file written before it; `seal` fills an empty DONE (an
    older run) from the files as they are, after which the run verifies and resumes."""
    run = run_copy(trained, tmp_path)
    files = A.read_manifest(run / "iter_1")
    on_disk = {p.relative_to(run / "iter_1").as_posix(): p for p in (run / "iter_1").rglob("*") if p.is_file()}
    assert set(files) == set(on_disk) - {"DONE"}
    for rel, entry in files.items():
        assert entry == {"bytes": on_disk[rel].stat().st_size,
                         "sha256": hashlib.sha256(on_disk[rel].read_bytes()).hexdigest()}
    (run / "iter_1" / "DONE").write_text("")
    assert A.main(["seal", str(run)]) == 0
    assert A.read_manifest(run / "iter_1") == files
    A.verify_run(run, A.scan_run(run))


def test_audit_cache_beside_the_files_is_not_corruption(trained, tmp_path):
    """The audit writes iter_<t>/audit_cache/ into finished iterations: files the manifest does not
    list are not looked at."""
    run = run_copy(trained, tmp_path)
    (run / "iter_1" / "audit_cache").mkdir()
    (run / "iter_1" / "audit_cache" / "answers-x.jsonl").write_text("{}\n")
    A.verify_iteration(run / "iter_1")


def test_lock_is_exclusive_and_released(tmp_path):
    run = tmp_path / "exp" / "r" / "seed0"
    with A.run_lock(run):
        assert (run / A.LOCK).read_text().split()[0] == str(os.getpid())
        with pytest.raises(A.ConfigError, match=f"in use by another run \\(pid {os.getpid()} on "):
            with A.run_lock(run):
                pass
        (run / "iter_0").mkdir()  # the run wrote something: its directory stays
    assert sorted(p.name for p in run.iterdir()) == ["iter_0"]
    with A.run_lock(tmp_path / "fresh" / "seed0"):
        time.sleep(0)
    assert list(tmp_path.iterdir()) == [tmp_path / "exp"]  # a run that wrote nothing leaves nothing


# -- faults that are no refusal: the audit goes on, counts them, and a rerun does not keep them ----

def endpoint_backend(url: str, **cfg) -> EndpointBackend:
    return EndpointBackend.from_config({"base_url": url, "model": "served", "max_retries": 1, "backoff_s": 0.0,
                                        "backoff_max_s": 0.0, "concurrency": 1} | cfg)


@pytest.mark.parametrize("body", [
    pytest.param(b'{"id": "c", "object": "chat.completion", "choices": [', id="json-cut"),
    pytest.param({"id": "c", "object": "chat.completion", "choices": []}, id="no-choices"),
    pytest.param(b"[1, 2]", id="not-a-completion"),
])
def test_endpoint_malformed_reply_is_a_counted_undecided_verdict(body):
    """A 200 whose body is no chat completion is retried like a 5xx, then a NaN row: the verdict is
    undecided (mode failed, the reason kept) and counted, not a crash; a generation says so."""
    server = Server(lambda req, i, auth: (200, body, 0))
    try:
        backend = endpoint_backend(server.url)
        (v,) = LLMOracle(backend, min_mass=0.0).verify([(endpoint_env(), "Mortality fell.")])
        assert v.violates is None and v.p_violates is None and v.mode == "failed"
        assert "malformed reply" in v.error and "2 attempt" in v.error
        assert backend.stats["failed"] == 1 and len(server.requests) == 2
        assert json.loads(json.dumps(verdict_row(v)))["mode"] == "failed"  # a cache row like any other
        with pytest.raises(EndpointError, match="generation failed: .*malformed reply"):
            backend.greedy([backend.render([{"role": "user", "content": "q"}])], max_new_tokens=4)
    finally:
        server.close()


def test_failed_endpoint_verdicts_are_retried_by_a_rerun(tmp_path):
    """After a run of 429s the oracle's cache holds undecided rows (mode failed); a rerun against a
    server that works again asks for exactly those, keeps every byte written before, and the
    verdicts it then gets are final (a third run asks nothing)."""
    busy = [True]
    server = Server(lambda req, i, auth: (429, {"error": {"message": "slow down"}}, 0) if busy[0]
                    else (200, completion("No", {"No": 0.9, "Yes": 0.1}), 0))
    try:
        cfg = OracleConfig.from_mapping({"name": "llm", "verifiers": [], "model": "endpoint", "min_mass": 0.0,
                                         "endpoint": {"base_url": server.url, "model": "served", "max_retries": 0,
                                                      "concurrency": 1}})
        env = endpoint_env()
        texts = {env.task_id: ["We cannot say.", "The packet cannot settle it (D1)."]}

        def audit_once() -> list[bool | None]:
            # the audit's own wiring: the oracle's endpoint behind the run's call cache (gap.Models)
            verifier = gap.build_verifiers({"oracle": cfg}, None, gap.Models(None), tmp_path)["oracle"]
            return [v.violates for v in verifier.verify([(env, t) for t in texts[env.task_id]])]

        assert audit_once() == [None, None] and len(server.requests) == 2
        assert not list(tmp_path.rglob("calls-*.jsonl"))  # a failed request is never cached
        busy[0] = False
        assert audit_once() == [False, False] and len(server.requests) == 4
        (cache,) = tmp_path.rglob("calls-*.jsonl")
        written = cache.read_bytes()
        assert audit_once() == [False, False] and len(server.requests) == 4
        assert cache.read_bytes() == written
    finally:
        server.close()


def test_skipped_checkpoint_is_named_and_an_edited_environment_is_reaudited(trained, tmp_path, capsys, monkeypatch):
    """An iteration without DONE is left out and named on stderr (one line), not only in audit.json.
    Then the question of an audited environment is edited: the rerun samples that environment again
    under a new key (with the sampling chunk it shares, as a fresh audit would) instead of replaying
    its old answers; the call cache only grows, the checkpoints' own files do not change."""
    run = run_copy(trained, tmp_path)
    data = mini_copy(tmp_path / "data")
    repoint(run, data)
    (run / "iter_1" / "DONE").unlink()
    capsys.readouterr()
    monkeypatch.setenv("HYDRA_MAIN_MODULE", "__main__")
    monkeypatch.setattr(sys, "argv", [gap.__file__, f"ckpt={run}", *AUDIT])
    gap.main()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith(f"audit.gap: warning: skipped {run / 'iter_1'} has no DONE marker"), err
    doc = json.loads((run / "audit.json").read_text())
    assert sorted(doc["rewards"]["generic"]["seeds"]["0"]["iterations"]) == ["0", "2"]

    (calls,) = (run / "audit_cache").glob("calls-*.jsonl")
    written = calls.read_bytes()
    sampled = [json.loads(line) for line in written.decode().splitlines()]
    sampled = [r for r in sampled if r["method"] == "sample"]
    answers = next((run / "iter_0" / "audit_cache").glob("answers-*.jsonl"))
    files = audited_envs(data)
    rec = json.loads(files["impossible"].read_text())
    rec["question"] = rec["question"] + " Answer in one sentence."
    files["impossible"].write_text(json.dumps(rec))

    gap.main()
    capsys.readouterr()
    after = [json.loads(line) for line in calls.read_text().splitlines()]
    again = [r for r in after[len(written.decode().splitlines()):] if r["method"] == "sample"]
    # a new request per distinct adapter: the chunk holding the edited prompt, sampled again under its key
    assert again and not {r["key"] for r in again} & {r["key"] for r in sampled}
    assert calls.read_bytes().startswith(written)  # append only: every cached call kept
    assert rec["task_id"] in answers.read_text()
    for t in (0, 2):
        A.verify_iteration(run / f"iter_{t}")
