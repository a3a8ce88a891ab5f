"""Run directories of `selfplay.train`: `<output_root>/<experiment>/<reward>/seed<s>/iter_<t>/`.

Contract:
- An iteration is written into a hidden temp dir `.iter_<t>.tmp` next to its final place; the `DONE`
  marker is written last, then the dir is renamed to `iter_<t>`. A dir named `iter_<t>` with `DONE` is
  complete and never touched again (the audit adds its cache, `audit_cache/`, beside the files).
- `DONE` is the iteration's checksum manifest: the size and sha256 of every file written before it.
  `verify_iteration` refuses an iteration whose files no longer match (truncated, overwritten,
  deleted, replaced by a directory or a broken link) with one line naming the file and the recovery:
  delete that iteration and every later one, then rerun, which redoes them. Nothing is ever deleted
  automatically: a corrupt iteration may be the only copy of hours of training.
- An empty `DONE` (a marker without a manifest) is refused too, not trusted with a warning: a warning scrolls past, and the point of the manifest is that nothing unverified is read.
  `python -m selfplay.artifacts seal RUN_DIR` records such iterations as they are, once their owner
  has decided to trust them.
- One process at a time writes a run directory: `run_lock` holds an advisory lock on `RUN/.lock`
  (which records pid, host and start time) and refuses a second run naming the holder. The kernel
  drops the lock when its holder dies, so the lock of a killed run is taken over with a note. Some
  cluster file systems refuse `flock` (NFS without a lock daemon, Lustre mounted without `flock`),
  others grant it per node only; there the lock is the exclusive creation of `RUN/.lock.pid` instead
  (`SELFPLAY_LOCK=file` chooses it outright; `auto`, the default, falls back to it when `flock` is
  refused). A killed holder leaves that file: on its own host it is taken over once the pid is gone,
  from another host it is named with the command that removes it.
- Readers of a finished iteration's files go through `read_verified`, which checks the file against
  its `DONE` entry first: no reader trusts a file that resume and the audit would refuse.
- A temp dir `.iter_<t>.tmp` (left by a killed writer) is partial: `discard_partial` removes it and
  the iteration is redone. An `iter_<t>` without `DONE` cannot come from an interrupted write (`DONE`
  is written before the rename): its marker was deleted or the dir made by hand, so `scan_run` refuses
  it, naming the recovery, and deletes nothing.
- Complete iterations are 0..m without gaps; a gap means the directory was edited by hand, and
  `scan_run` refuses it rather than guess.
- `iter_<t>/config.yaml` holds the resolved config; a rerun whose config differs (outside the keys a
  resumed run may change, `selfplay.config.RESUMABLE_KEYS`) is refused, never mixed in.

Files per iteration t >= 1: adapter/, generations.jsonl, judgments.jsonl, pairs.jsonl, metrics.json,
config.yaml, DONE. Iteration 0 (the initial policy) has adapter/, metrics.json, config.yaml, DONE.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from selfplay.config import ConfigError, comparable
from selfplay.envs.load import unreadable

log = logging.getLogger("selfplay.artifacts")
DONE = "DONE"
LOCK = ".lock"
AUDIT_LOCK = ".audit.lock"  # held by `python -m audit.gap` on each seed dir it audits
MANIFEST_FORMAT = "selfplay-manifest/1"
CONFIG = "config.yaml"
ITERATION_FILES = ("generations.jsonl", "judgments.jsonl", "pairs.jsonl", "metrics.json", CONFIG)
_ITER = re.compile(r"^iter_(\d+)$")
_TMP = re.compile(r"^\.iter_(\d+)\.tmp$")


def run_dir(output_root: str | Path, experiment: str, reward: str, seed: int) -> Path:
    return Path(output_root) / experiment / reward / f"seed{seed}"


def iteration_dir(run: Path, t: int) -> Path:
    return run / f"iter_{t}"


@dataclass(frozen=True)
class RunState:
    complete: tuple[int, ...]  # 0..m, ascending
    partial: tuple[Path, ...]  # temp dirs of killed writers, discarded before resuming

    @property
    def last(self) -> int | None:
        return self.complete[-1] if self.complete else None


def scan_run(run: Path) -> RunState:
    if not run.exists():
        return RunState((), ())
    if not run.is_dir():
        raise ConfigError(f"{run}: the run directory is not a directory")
    complete, partial, unmarked = [], [], []
    for child in sorted(run.iterdir()):
        if not child.is_dir():
            continue
        if (m := _ITER.match(child.name)) and (child / DONE).is_file():
            complete.append(int(m.group(1)))
        elif _ITER.match(child.name):
            unmarked.append(child)
        elif _TMP.match(child.name):
            partial.append(child)
    if unmarked:
        raise ConfigError(no_done(min(unmarked, key=_number)))
    complete.sort()
    if complete != list(range(len(complete))):
        raise ConfigError(
            f"{run}: complete iterations {complete} are not 0..m without gaps; "
            "the run directory was altered, move it away or remove the later iterations"
        )
    return RunState(tuple(complete), tuple(partial))


def discard_partial(state: RunState) -> None:
    for path in state.partial:
        shutil.rmtree(path)


@contextmanager
def writing_iteration(run: Path, t: int) -> Iterator[Path]:
    """Yield a temp dir for iteration t; on success mark it DONE and move it to `iter_<t>`.

    On an exception the temp dir is removed, so an interrupted iteration leaves nothing behind
    (a killed process leaves the temp dir, which the next `scan_run` reports as partial).
    """
    final = iteration_dir(run, t)
    if final.exists():
        raise FileExistsError(f"{final} exists; iterations are never rewritten")
    tmp = run / f".iter_{t}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        write_manifest(tmp)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write `path` whole or not at all (a temp file beside it, then a rename); an OSError names
    `path`, and no temp file is left behind."""
    write_texts_atomic({path: text})


def write_texts_atomic(texts: Mapping[Path, str]) -> None:
    """Write several files that belong together (audit.json and audit.csv): every temp file is
    written before any is renamed, so a full disk leaves the old set, never a new file beside a
    stale one. An OSError names the file it was writing."""
    tmps: dict[Path, Path] = {}
    try:
        for path, text in texts.items():
            tmp = path.with_name(f".{path.name}.tmp")
            tmps[path] = tmp
            try:
                with tmp.open("w", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:  # a write or close that fails names no file: name the one meant
                raise OSError(e.errno, e.strerror or str(e), str(path)) from None
        for path, tmp in tmps.items():
            tmp.replace(path)
    finally:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)


@contextmanager
def saving(path: Path) -> Iterator[None]:
    """Turn a library's write error into the OSError it wraps, naming `path`: safetensors reports a
    full disk as `SafetensorError: ... IoError(Os { code: 28, ... })`, which no `except OSError` sees."""
    try:
        yield
    except OSError:
        raise
    except Exception as e:
        m = re.search(r"Os \{ code: (\d+)", str(e))
        if m is None:
            raise
        code = int(m.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n")


class JsonlLineError(ValueError):
    """A line of a JSONL file that is not UTF-8 JSON and is not its torn last line."""

    def __init__(self, path: Path, line: int, what: str):
        super().__init__(f"{path}:{line}: {what}")
        self.path, self.line, self.what = path, line, what


def read_jsonl_lines(path: Path) -> tuple[list[tuple[int, Any]], int | None]:
    """(line number, value) of every non-blank line of `path`, and the length in bytes of its intact
    part when its last line is torn (else None). A last line with no newline after it that does not
    parse is the write that was cut, maybe inside a character: it is left out, so the appenders can
    cut it and go on. Any other line that is not UTF-8 JSON is a JsonlLineError naming it: a byte that
    is no UTF-8 damages its line, not the file."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    rows: list[tuple[int, Any]] = []
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rows.append((i, json.loads(raw.decode("utf-8"))))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if i == len(lines):
                return rows, len(data) - len(raw)
            raise JsonlLineError(path, i, "not UTF-8" if isinstance(e, UnicodeDecodeError) else "not JSON") from None
    return rows, None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [row for _, row in read_jsonl_lines(path)[0]]


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")


def write_config(path: Path, resolved: Mapping[str, Any]) -> None:
    path.write_text(yaml.safe_dump(dict(resolved), sort_keys=True), encoding="utf-8")


def read_config(iteration: Path) -> dict[str, Any]:
    path = iteration / CONFIG
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise CorruptIteration(f"{path}: unreadable ({_reason(path, e)}); {recovery(iteration)}") from None
    if not isinstance(config, dict) or not config:
        raise CorruptIteration(f"{path}: {'empty' if not config else 'not a mapping'}, not a run config; "
                               f"{recovery(iteration)}")
    return config


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """'key: stored -> current' for every setting that must match on resume."""
    a, b = _flatten(comparable(dict(stored))), _flatten(comparable(dict(current)))
    # a setting added to the code after a run was written reads as absent there; at null it changes
    # nothing the run did (e.g. judge.endpoint), so it does not block resuming or auditing the run
    return [f"{k}: {a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r}" for k in sorted(a.keys() | b.keys())
            if a.get(k) != b.get(k) and not (k not in a and b.get(k) is None)]


def check_resumable(run: Path, state: RunState, resolved: Mapping[str, Any]) -> None:
    """Refuse to continue a run directory written with a different config."""
    if state.last is None:
        return
    diffs = config_differences(read_config(iteration_dir(run, state.last)), resolved)
    if diffs:
        raise ConfigError(
            f"{run} holds a run with a different config; refusing to mix them. Differences "
            f"(stored -> now): {'; '.join(diffs)}. Use another experiment_name=NAME or output_root=DIR, "
            "or move the old run away."
        )


# -- checksum manifests -------------------------------------------------------------------------

class CorruptIteration(ConfigError):
    """A complete iteration whose files do not match its manifest; the message says how to recover."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p != root / DONE)


def write_manifest(iteration: Path) -> None:
    """Write `DONE`: size and sha256 of every file of the iteration (the marker itself excluded)."""
    files = {p.relative_to(iteration).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in _files(iteration)}
    body = json.dumps({"format": MANIFEST_FORMAT, "files": files}, indent=1, sort_keys=True) + "\n"
    (iteration / DONE).write_text(body, encoding="utf-8")


def later_iterations(iteration: Path) -> list[Path]:
    """`iteration` and every complete-looking iteration after it in the same run, in order."""
    t = _number(iteration)
    run = iteration.parent
    found = [p for p in run.iterdir() if (m := _ITER.match(p.name)) and int(m.group(1)) >= t] if run.is_dir() else []
    return sorted(found, key=_number) or [iteration]


def _number(p: Path) -> int:
    m = _ITER.match(p.name)
    return int(m.group(1)) if m else -1


def recovery(iteration: Path) -> str:
    """The one recovery we recommend and never perform ourselves: redo the iteration and all after it."""
    later = later_iterations(iteration)
    names = " ".join(str(p) for p in later)
    what = iteration.name if len(later) == 1 else f"{iteration.name} and every later iteration"
    return (f"nothing was changed; to recover, delete {what} (rm -r {names}) and rerun the same "
            "training command, which redoes them")


def no_done(iteration: Path) -> str:
    """Why an `iter_<t>` dir without `DONE` is not read, and the recovery (training and audit say it)."""
    return (f"{iteration} has no {DONE} marker, so it is no finished iteration (its {DONE} was deleted, or the "
            f"dir was made by hand); {recovery(iteration)}; or, if its files are intact, restore the marker "
            f"(touch {iteration / DONE} && python -m selfplay.artifacts seal {iteration.parent})")


def _reason(path: Path, e: BaseException) -> str:
    if isinstance(e, yaml.YAMLError):
        return "invalid YAML: " + " ".join(str(e).split())
    return unreadable(path, e)  # the wording of every loader


def read_manifest(iteration: Path) -> dict[str, dict[str, Any]]:
    """The manifest in `iteration/DONE`; CorruptIteration when there is none or it is unreadable."""
    done = iteration / DONE
    try:
        text = done.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CorruptIteration(f"{done}: unreadable ({_reason(done, e)}); {recovery(iteration)}") from None
    if not text.strip():
        run = iteration.parent
        raise CorruptIteration(
            f"{done} holds no checksum manifest (written by an older version), so {iteration.name} cannot be "
            f"verified; nothing was changed; if you trust its files, record them with `python -m "
            f"selfplay.artifacts seal {run}`, else delete it and every later iteration and rerun")
    try:
        doc = json.loads(text)
        files = doc["files"]
        ok = doc.get("format") == MANIFEST_FORMAT and isinstance(files, dict) and all(
            isinstance(v, dict) and isinstance(v.get("sha256"), str) and isinstance(v.get("bytes"), int)
            for v in files.values())
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise CorruptIteration(f"{done}: not a checksum manifest (truncated or overwritten); {recovery(iteration)}")
    return files


def read_verified(iteration: Path, name: str) -> bytes:
    """The bytes of `iteration/name` once they match the size and sha256 its `DONE` records;
    CorruptIteration (naming the file and the recovery) when they do not, or when `DONE` does not
    list it. Every reader of a finished iteration's files (report, audit, resume) reads through here."""
    files = read_manifest(iteration)
    path = iteration / name
    want = files.get(name)
    if want is None:
        raise CorruptIteration(f"{iteration / DONE} does not list {name}, so it cannot be verified; "
                               f"{recovery(iteration)}")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptIteration(f"{iteration} is corrupt: {name} is unreadable ({_reason(path, e)}); "
                               f"{recovery(iteration)}") from None
    if len(data) != want["bytes"]:
        raise CorruptIteration(f"{iteration} is corrupt: {name} is {len(data)} bytes, {want['bytes']} when written "
                               f"(truncated or overwritten); {recovery(iteration)}")
    if hashlib.sha256(data).hexdigest() != want["sha256"]:
        raise CorruptIteration(f"{iteration} is corrupt: {name} changed since it was written (its sha256 "
                               f"differs); {recovery(iteration)}")
    return data


def read_verified_json(iteration: Path, name: str) -> Any:
    """`read_verified`, parsed as JSON (a verified file was written by us, so it parses)."""
    return json.loads(read_verified(iteration, name).decode("utf-8"))


def verify_iteration(iteration: Path) -> None:
    """Check every file the manifest lists; raise CorruptIteration naming the first ones that differ.

    Files the manifest does not list (the audit's cache) are not looked at.
    """
    problems = []
    for rel, want in sorted(read_manifest(iteration).items()):
        path = iteration / rel
        if not os.path.lexists(path):
            problems.append(f"{rel} is missing")
            continue
        try:
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, "a directory")
            size = path.stat().st_size  # a broken link or a loop raises here
            if size != want["bytes"]:
                problems.append(f"{rel} is {size} bytes, {want['bytes']} when written (truncated or overwritten)")
            elif _sha256(path) != want["sha256"]:
                problems.append(f"{rel} changed since it was written (its sha256 differs)")
        except OSError as e:
            problems.append(f"{rel} is unreadable ({_reason(path, e)})")
    if problems:
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise CorruptIteration(f"{iteration} is corrupt: {'; '.join(problems[:3])}{more}; {recovery(iteration)}")


def verify_run(run: Path, state: RunState) -> None:
    """Verify every complete iteration of the run (resume reads the last; all must be sound)."""
    for t in state.complete:
        verify_iteration(iteration_dir(run, t))


def seal(run: Path) -> list[Path]:
    """Write manifests into the empty `DONE` markers of an older run, trusting its files as they are."""
    state = scan_run(run)
    sealed = []
    for t in state.complete:
        it = iteration_dir(run, t)
        if (it / DONE).stat().st_size == 0:
            write_manifest(it)
            sealed.append(it)
    return sealed


# -- the run lock --------------------------------------------------------------------------------

def _make_dirs(path: Path) -> list[Path]:
    """mkdir -p; returns the dirs it created, innermost first (so a refused run can remove them)."""
    created, p = [], path
    while not os.path.lexists(p):
        created.append(p)
        p = p.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{path}: cannot create the run directory ({e.strerror})") from None
    return created


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode("utf-8", "replace").strip()


def _describe(holder: str) -> str:
    """'pid 123 on host h since 2026-...' from the lock file's 'pid host time' line."""
    parts = holder.split()
    if len(parts) >= 3:
        return f"pid {parts[0]} on {parts[1]} since {parts[2]}"
    return f"pid {parts[0]}" if parts else "a process that recorded no pid"


LOCK_SETTING = "SELFPLAY_LOCK"  # auto | flock | file
# what a file system answers when it does not do flock at all (NFS without lockd: ENOLCK; Lustre
# mounted without -o flock, FUSE: ENOSYS or EOPNOTSUPP; some network mounts: EINVAL)
_FLOCK_REFUSED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


def lock_mode() -> str:
    """How run directories are locked (`SELFPLAY_LOCK`): `flock`, `file` (exclusive creation of a
    pid file, for file systems that refuse flock or grant it per node only) or `auto` (flock, and
    the pid file where flock is refused)."""
    mode = os.environ.get(LOCK_SETTING, "").strip().lower() or "auto"
    if mode not in ("auto", "flock", "file"):
        raise ConfigError(f"{LOCK_SETTING}={mode!r}: expected auto, flock or file")
    return mode


def _stamp() -> bytes:
    return f"{os.getpid()} {socket.gethostname()} {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime())}\n".encode()


@contextmanager
def run_lock(run: Path, name: str = LOCK, user: str = "run") -> Iterator[None]:
    """Hold the run directory's lock for the block; refuse at once when another process holds it.

    A run directory this call had to create is removed again when the block wrote nothing into it,
    so a run refused during setup leaves no trace. `name` and `user` give another kind of writer its
    own lock in the same directory (the audit's `AUDIT_LOCK`: two audits must not append to one
    cache, while an audit may read the finished iterations of a run that is still training).
    """
    mode = lock_mode()
    created = _make_dirs(run)
    fd = None if mode == "file" else _flock(run, name, user, created, fallback=mode == "auto")
    if fd is None:
        with _file_lock(run, name, user, created):
            yield
        return
    path = run / name
    try:
        stale = _holder(fd)
        if stale:
            log.warning("%s: took over the lock left by %s, which is no longer running", run, _describe(stale))
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, _stamp())
        yield
    finally:
        os.unlink(path)  # while still holding it, so no one locks a file that is about to vanish
        os.close(fd)
        _remove_created(created, run)


def _flock(run: Path, name: str, user: str, created: list[Path], fallback: bool) -> int | None:
    """The fd of `run/name`, flocked; None when the file system refuses flock and `fallback`."""
    path = run / name
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            _remove_created(created, run)
            raise ConfigError(f"{path}: cannot create the {user}'s lock file ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                _remove_created(created, run)
                raise ConfigError(f"{run} is in use by another {user} ({_describe(holder)}); two {user}s must not "
                                  "write one directory: wait for it to finish or stop it") from None
            if e.errno in _FLOCK_REFUSED and fallback:
                if not holder:  # the empty file this call made (or a refused neighbour's): not a lock here
                    try:
                        if path.stat().st_size == 0:
                            path.unlink()
                    except OSError:
                        pass
                return None
            _remove_created(created, run)
            raise ConfigError(f"{path}: the file system refuses flock ({e.strerror}); set {LOCK_SETTING}=file "
                              "to lock run directories with a pid file instead") from None
        # the holder we raced may have released and removed the file: lock the file that is there now
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _gone(holder: str) -> bool:
    """Whether the 'pid host time' of a pid file names a process of this host that no longer runs
    (a process on another host cannot be asked)."""
    parts = holder.split()
    if len(parts) < 2 or parts[1] != socket.gethostname() or not parts[0].isdigit():
        return False
    try:
        os.kill(int(parts[0]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _read_holder(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


@contextmanager
def _file_lock(run: Path, name: str, user: str, created: list[Path]) -> Iterator[None]:
    """The lock as the exclusive creation of `run/<name>.pid`, for file systems without flock."""
    path = run / f"{name}.pid"
    for attempt in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            holder = _read_holder(path)
            if attempt == 0 and _gone(holder):
                # move it aside, then check it is still the file judged stale: a neighbour may have
                # taken it over between our read and the move
                aside = path.with_name(f"{path.name}.{os.getpid()}.stale")
                try:
                    path.rename(aside)
                except FileNotFoundError:
                    continue
                if _read_holder(aside) == holder:
                    aside.unlink(missing_ok=True)
                    log.warning("%s: took over the lock left by %s, which is no longer running", run,
                                _describe(holder))
                    continue
                try:
                    os.link(aside, path)
                finally:
                    aside.unlink(missing_ok=True)
                holder = _read_holder(path)
            _remove_created(created, run)
            raise ConfigError(f"{run} is in use by another {user} ({_describe(holder)}; lock file {path}); two "
                              f"{user}s must not write one directory: wait for it to finish or stop it; if it is "
                              f"no longer running, rm {path}") from None
        except OSError as e:
            _remove_created(created, run)
            raise ConfigError(f"{path}: cannot create the {user}'s lock file ({e.strerror})") from None
    else:
        _remove_created(created, run)
        raise ConfigError(f"{run}: another {user} took the lock {path} while this one took over a stale one; "
                          "rerun the same command")
    try:
        os.write(fd, _stamp())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        _remove_created(created, run)


def _remove_created(created: list[Path], run: Path) -> None:
    locks = (LOCK, f"{LOCK}.pid")
    if created and not any(p.name not in locks for p in run.iterdir()):
        for d in created:
            try:
                for lock in locks:
                    (d / lock).unlink(missing_ok=True)
                d.rmdir()
            except OSError:
                break


def json_float(x: float | None) -> float | None:
    """NaN/inf -> None, so JSON files stay strict (NaN is not JSON)."""
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m selfplay.artifacts",
                                description="Record checksum manifests for the iterations of a run "
                                            "written by an older version (their DONE is empty).")
    p.add_argument("command", choices=["seal"])
    p.add_argument("run", type=Path, help="a run directory <output_root>/<experiment>/<reward>/seed<s>")
    args = p.parse_args(argv)
    try:
        if not args.run.is_dir():
            raise ConfigError(f"{args.run}: not a run directory")
        with run_lock(args.run):
            sealed = seal(args.run)
    except ConfigError as e:
        print(f"selfplay.artifacts: error: {e}", file=sys.stderr)
        return 1
    print(f"sealed {len(sealed)} iteration(s): {', '.join(p.name for p in sealed) or 'none needed one'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
