"""The labels file of `python -m audit.label`, read and checked the same way by that command and by
`audit.gap` (`run_labels`), so both count the same answers:
- a row is a label of one answer, its key (checkpoint dir, answers file, task, index); the same
  answer labelled twice (labels at the seed and the reward dir, two labellers into one file) counts
  once, and two different labels of one answer are refused, naming both rows;
- the row's text must be the answer the audit cached at that key: a row that is not (a labels file
  copied from another run, or left beside a seed that was retrained) is refused, never counted;
- a row labelled against an earlier version of its environment (edited, then audited again, the
  documented flow) is left out with a note naming the task, and kept in the file: its answer is
  drawn again for a new label;
- a torn last line (a write that was cut, inside a character too) is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from selfplay.artifacts import JsonlLineError, read_jsonl_lines

from . import calibration as C
from . import metrics as M
from .cache import CACHE_DIR, CacheError, JsonlCache, digest
from .checkpoints import ITER_RE

log = logging.getLogger("audit.labels")
LABELS_FILE = "labels.jsonl"
LABEL_KEYS = {"v": M.VALID, "i": M.INVALID, "p": M.PARTIAL}
ENV_STAMP = "environment_sha256"


class LabelError(C.LabelledError):
    """A problem with DIR or the labels file: one line."""


def env_stamp(env: Any) -> str:
    """The digest of an environment's whole record (hidden anchor included): a label read against one
    version of the certificate is no label under another."""
    return digest(dict(env.record) if env.record else repr(env), 16)


def answer_rows(f: Path) -> dict[str, dict[str, Any]]:
    """task_id -> the row of an answers file, each checked to hold a task id and a list of texts; a
    damaged row is one line naming the file and the recovery (the audit writes the file again)."""
    try:
        rows = JsonlCache(f).rows
    except CacheError as e:
        raise LabelError(str(e)) from None
    out = {}
    for key, row in rows.items():
        answers = row.get("answers")
        if not isinstance(row.get("task_id"), str) or not isinstance(answers, list) \
                or not all(isinstance(a, str) for a in answers):
            raise LabelError(f"{f}: row {key!r} is no answers row (a `task_id` and a list of `answers` texts); "
                             f"delete the file and rerun `python -m audit.gap` on the run, which writes it again")
        out[row["task_id"]] = row
    return out


def read_label_file(path: Path, *, repair: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of every label in `path`. A torn last line (no newline after it: the last
    write was cut, maybe inside a character) is dropped, and with `repair` cut from the file so the
    next label starts a line of its own; any other damaged line is one error naming file, line and
    the recovery, and the file is left as it is."""
    try:
        rows, good = read_jsonl_lines(path)
    except JsonlLineError as e:
        raise LabelError(f"{path}:{e.line}: {e.what} (a damaged line); fix or delete that line, the other "
                         "labels are read as they are") from None
    for i, row in rows:
        if not isinstance(row, dict):
            raise LabelError(f"{path}:{i}: expected a JSON object; fix or delete that line")
    if repair and good is not None:
        with path.open("r+b") as f:
            f.truncate(good)
    return rows


def answer_key(row: Mapping[str, Any], base: Path) -> tuple[str, str, str, int] | None:
    """The answer a labels row names: (checkpoint dir, resolved; answers file; task; index)."""
    ckpt, f, tid, j = (row.get(k) for k in ("checkpoint", "answers_file", "task_id", "index"))
    if not (isinstance(ckpt, str) and isinstance(f, str) and isinstance(tid, str) and isinstance(j, int)):
        return None
    return (str((base / ckpt).resolve()), f, tid, j)


def check_rows(path: Path, rows: Sequence[tuple[int, Mapping[str, Any]]], answer: Callable[[tuple], str | None],
               envs: Callable[[tuple], Any], mine: Callable[[tuple], bool] = lambda key: True,
               seen: dict[tuple, tuple[Path, int, str]] | None = None) -> tuple[list[dict], list[dict]]:
    """(labels counted, labels left out as stale) of the rows of one labels file, every row checked:
    `answer(key)` is the text the audit cached for an answer key (None: it holds none), `envs(key)`
    its environment now, `mine(key)` whether the key is an answer of the run being read (rows of
    other runs in a shared file are passed over). `seen` carries the keys already counted across the
    files of one run: a repeat of the same label counts once, a different label of one answer is
    refused. Foreign rows are refused (module docstring)."""
    seen = {} if seen is None else seen
    kept, stale = [], []
    for i, row in rows:
        key = answer_key(row, path.parent)
        if key is None or row.get("label") not in LABEL_KEYS.values() or not isinstance(row.get("text"), str):
            raise LabelError(f"{path}:{i}: not a label of `python -m audit.label` (it needs checkpoint, "
                             "answers_file, task_id, index, text and label); fix or delete that line")
        if not mine(key):
            continue
        env = envs(key)
        if env is None:
            raise LabelError(f"{path}:{i}: task_id {key[2]!r} is not an environment of the run's data; the file "
                             "belongs to another run: move it away")
        cached = answer(key)
        was = row.get(ENV_STAMP)
        if was is not None and was != env_stamp(env):
            stale.append(dict(row))
            continue
        if cached is None:
            raise LabelError(
                f"{path}:{i}: does not match the run: labels an answer that {Path(key[0]) / CACHE_DIR / key[1]} does not hold (task "
                f"{key[2]}, answer {key[3]}): the labels of another run, or of a cache since deleted; move the "
                f"file away, or sample the answers again (`python -m audit.gap ckpt={Path(key[0]).parent} "
                "labelled=false`, the same draw) and rerun")
        if cached != row["text"]:
            raise LabelError(
                f"{path}:{i}: does not match the run: labels a text the audit never sampled at {key[0]} (task {key[2]}, answer "
                f"{key[3]}): a labels file of another run, or of this seed before it was retrained; it is not "
                "counted: move the file away (or label into another file with --out)")
        if key in seen:
            first, line, label = seen[key]
            if label != row["label"]:
                raise LabelError(f"{path}:{i}: labels an answer {row['label']!r} that {first}:{line} labels {label!r}; "
                                 "one answer has one label: delete the row that is wrong")
            continue
        seen[key] = (path, i, row["label"])
        kept.append(dict(row))
    return kept, stale


def stale_note(stale: Sequence[Mapping[str, Any]], where: Path) -> str:
    tasks = sorted({r["task_id"] for r in stale})
    return (f"{where}: {len(stale)} label(s) of task(s) {', '.join(tasks)} were given against an earlier version "
            "of the environment: left out (kept in the file); label their new answers with `python -m audit.label`")


def run_labels(seed_dir: Path, envs: Mapping[str, Any]) -> tuple[list[Path], list[dict[str, Any]]]:
    """The labels `audit.label` wrote for the run of `seed_dir` (for audit.gap): the rows of
    `labels.jsonl` in its experiment, reward or seed dir or one of its iteration dirs whose
    `checkpoint` is an iteration of this run, each with that `iteration`, read by `check_rows`
    against the answers the audit cached there and the run's environments (`envs`, by task id);
    the files that held some."""
    seed_dir = seed_dir.resolve()
    candidates = [seed_dir.parent.parent / LABELS_FILE, seed_dir.parent / LABELS_FILE, seed_dir / LABELS_FILE,
                  *sorted(seed_dir.glob(f"iter_*/{LABELS_FILE}"))]
    answers: dict[Path, dict[str, dict[str, Any]]] = {}

    def answer(key: tuple) -> str | None:
        f = Path(key[0]) / CACHE_DIR / key[1]
        if f not in answers:
            answers[f] = answer_rows(f) if f.is_file() else {}
        texts = (answers[f].get(key[2]) or {}).get("answers") or []
        return texts[key[3]] if 0 <= key[3] < len(texts) else None

    def mine(key: tuple) -> bool:
        d = Path(key[0])
        return d.parent == seed_dir and ITER_RE.fullmatch(d.name) is not None

    files, rows, stale, seen = [], [], [], {}
    for f in dict.fromkeys(candidates):
        if not f.is_file():
            continue
        try:
            numbered = read_label_file(f)
        except OSError as e:
            raise LabelError(f"{f}: cannot read ({e.strerror})") from None
        kept, old = check_rows(f, numbered, answer, lambda key: envs.get(key[2]), mine, seen)
        stale += old
        if kept:
            files.append(f)
            rows += [{**r, "iteration": int(ITER_RE.fullmatch(Path(answer_key(r, f.parent)[0]).name).group(1))}
                     for r in kept]
    if stale:
        log.warning("%s", stale_note(stale, seed_dir))
    return files, rows

