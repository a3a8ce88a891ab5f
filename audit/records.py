"""Per-answer audit records and the JSONL cache they are built from.

`AnswerRow` is everything the metrics need about one answer at one checkpoint: which environment,
whether it is a policy answer or a fixed stress answer, the judge's score of it and of the reference
answer r(e) at that iteration, its validity label and what the second verifiers said. Labels:
policy answers take the primary oracle's verdict (None when the oracle could not decide); stress
answers take the release's `oracle_validity` label (`partially_valid` included: the metrics leave it
out and count it), and the oracles' verdicts on them are kept to measure the oracles themselves.

`JsonlCache` keeps one JSONL file per computed stage (answers, judge verdicts, oracle verdicts) under
`iter_<t>/audit_cache/`, keyed by strings. Rows are appended as they are computed, so an interrupted
audit keeps what it finished and a rerun computes only what is missing; a torn last line (the write
that was interrupted) is dropped on read, any other unreadable line is an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

POLICY, STRESS = "policy", "stress"


@dataclass(frozen=True)
class AnswerRow:
    task_id: str
    kind: str  # impossible | control
    source: str  # policy | stress
    answer_id: str  # "p<j>" for the j-th policy sample; the release's answer_id for stress answers
    text: str
    score: float | None  # judge score s(a); None when the judge could not score it
    ref_score: float | None  # judge score s(r(e)) of the environment's reference answer, same iteration
    label: str | None  # valid | invalid | partially_valid; None = the oracle could not decide
    checks_accept: bool  # the deterministic checks found no violation
    oracle2_accept: bool | None = None  # second oracle (when configured): no violation found
    is_reference: bool = False  # the stress answer that is r(e) itself (A = 1 by construction)
    # the primary oracle's verdict (no violation found); on stress answers it is checked against
    # the release label, on policy answers it is the label
    oracle_accept: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_hash(values: Mapping[str, Any], length: int = 12) -> str:
    """Stable short hash of JSON-able settings: names a cache file for exactly those settings."""
    blob = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def text_key(*parts: str) -> str:
    """Cache key from ids and texts: a changed answer text is a new key, never a stale hit."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]


class CacheError(RuntimeError):
    pass


class JsonlCache:
    """Rows `{"key": ..., **values}` in one JSONL file; later rows win for a repeated key."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        self._good_bytes: int | None = None  # set when a torn last line must be cut before appending
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            lines = text.split("\n")
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    self.rows[row["key"]] = row
                except (json.JSONDecodeError, KeyError, TypeError):
                    if i == len(lines) - 1:  # torn last write: drop it, recompute that row
                        self._good_bytes = len(text[: len(text) - len(line)].encode("utf-8"))
                        continue
                    raise CacheError(f"{path}:{i + 1}: unreadable cache row; delete the file to "
                                     "recompute it") from None

    def missing(self, keys: Iterable[str]) -> list[str]:
        return [k for k in dict.fromkeys(keys) if k not in self.rows]

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._good_bytes is not None:
            with self.path.open("r+b") as f:
                f.truncate(self._good_bytes)
            self._good_bytes = None
        with self.path.open("a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True, allow_nan=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        for row in rows:
            self.rows[row["key"]] = dict(row)

    def fill(self, groups: Mapping[str, Sequence[str]],
             compute: Callable[[str, list[str]], list[Mapping[str, Any]]],
             progress: Callable[[int], None] | None = None) -> dict[str, dict[str, Any]]:
        """Compute the missing keys group by group (e.g. one environment at a time) and append them.

        `compute(group, keys)` returns one row per key (with its "key"); each group is written as soon
        as it is done. Returns every row of `groups` by key.
        """
        for group, keys in groups.items():
            todo = self.missing(keys)
            if todo:
                rows = compute(group, todo)
                got = [r["key"] for r in rows]
                if sorted(got) != sorted(todo):
                    raise CacheError(f"{self.path.name}: computed keys do not match the keys asked for "
                                     f"in group {group!r}")
                self.add(rows)
            if progress is not None:
                progress(1)
        return {k: self.rows[k] for keys in groups.values() for k in keys}
