"""Split manifests and the train/audit partition.

A manifest is `{"name": ..., "count": N, "task_ids": [...]}` (`name`, `count` and `description`
optional; a bare JSON list of ids is accepted too). `task_ids` must be non-empty strings without
duplicates, and `count`, when given, must equal their number.

`train_audit_split(envs, root)` (docs/method.md §Environment sets and splits; train and audit are disjoint by task_id):
  - release directory (has `splits/hard45.json`): audit = the Hard-45 environments present, plus half
    the controls: sort the control task_ids and take every other one starting with the first
    (indices 0, 2, 4, ...; ceil(n/2) of n). Train = everything else.
  - directory with `splits/train.json` and `splits/audit.json` (the bundled `data/mini/`): those
    manifests, which must name every loaded environment exactly once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import EnvError, EnvLoadError
from .types import Environment


@dataclass(frozen=True)
class Split:
    name: str
    task_ids: tuple[str, ...]


def check_split(path: str | Path) -> tuple[Split | None, list[EnvError]]:
    from .load import read_text  # load.py's reader: one wording for unreadable files

    f = str(path)
    text = read_text(path)
    if isinstance(text, EnvError):
        return None, [text]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return None, [EnvError(f, None, "", f"invalid JSON: {e.msg} (column {e.colno})", e.lineno)]
    if isinstance(data, list):
        data = {"task_ids": data}
    if not isinstance(data, dict) or not isinstance(data.get("task_ids"), list):
        return None, [EnvError(f, None, "task_ids", "a split manifest needs a task_ids list")]
    errors, seen = [], set()
    ids = data["task_ids"]
    for i, tid in enumerate(ids):
        if not isinstance(tid, str) or not tid.strip():
            errors.append(
                EnvError(
                    f,
                    tid if isinstance(tid, str) else None,
                    f"task_ids[{i}]",
                    f"task ids must be non-empty strings, got {tid!r}",
                )
            )
        elif tid in seen:
            errors.append(EnvError(f, tid, f"task_ids[{i}]", "duplicate task_id in split"))
        else:
            seen.add(tid)
    if "count" in data and data["count"] != len(ids):
        errors.append(
            EnvError(f, None, "count", f"count is {data['count']!r} but task_ids has {len(ids)}")
        )
    name = data.get("name") if isinstance(data.get("name"), str) else Path(path).stem
    return (None, errors) if errors else (Split(name, tuple(ids)), [])


def load_split(path: str | Path) -> Split:
    split, errors = check_split(path)
    if errors:
        raise EnvLoadError(errors)
    return split


def split_files(root: str | Path) -> list[Path]:
    return sorted((Path(root) / "splits").glob("*.json"))


def select(envs: Iterable[Environment], split: Split) -> tuple[list[Environment], list[str]]:
    """The environments named by `split`, in split order, and the ids it names that are absent."""
    by_id = {e.task_id: e for e in envs}
    selected = [by_id[t] for t in split.task_ids if t in by_id]
    missing = [t for t in split.task_ids if t not in by_id]
    return selected, missing


def every_other(ids: Iterable[str]) -> list[str]:
    return sorted(ids)[::2]


def train_audit_split(
    envs: list[Environment], root: str | Path
) -> tuple[list[Environment], list[Environment]]:
    root = Path(root)
    # `lexists`: a manifest that is there but unreadable (a directory, a broken link) is an error
    # naming it, not a silent fall-through to the other scheme
    if os.path.lexists(root / "splits" / "hard45.json"):
        hard = set(load_split(root / "splits" / "hard45.json").task_ids)
        controls = every_other(e.task_id for e in envs if e.kind == "control")
        audit_ids = hard | set(controls)
    elif os.path.lexists(root / "splits" / "train.json") and os.path.lexists(root / "splits" / "audit.json"):
        train_split = load_split(root / "splits" / "train.json")
        audit_split = load_split(root / "splits" / "audit.json")
        _check_partition(envs, train_split, audit_split, root / "splits")
        audit_ids = set(audit_split.task_ids)
    else:
        raise FileNotFoundError(
            f"{root / 'splits'} has neither hard45.json nor train.json + audit.json"
        )
    train = [e for e in envs if e.task_id not in audit_ids]
    audit = [e for e in envs if e.task_id in audit_ids]
    overlap = {e.task_id for e in train} & {e.task_id for e in audit}
    if overlap:  # two environments sharing an id would land on both sides
        raise ValueError(f"train and audit share task_ids {sorted(overlap)}")
    return train, audit


def _check_partition(envs: list[Environment], train: Split, audit: Split, where: Path) -> None:
    errors = []
    for tid in sorted(set(train.task_ids) & set(audit.task_ids)):
        errors.append(
            EnvError(
                str(where / "audit.json"), tid, "task_ids", "task_id is in both train and audit"
            )
        )
    for split, name in ((train, "train.json"), (audit, "audit.json")):
        _, missing = select(envs, split)
        errors += [
            EnvError(str(where / name), t, "task_ids", "no loaded environment has this task_id")
            for t in missing
        ]
    named = set(train.task_ids) | set(audit.task_ids)
    errors += [
        EnvError(
            e.source, e.task_id, "task_id", "environment is in neither train.json nor audit.json"
        )
        for e in envs
        if e.task_id not in named
    ]
    if errors:
        raise EnvLoadError(errors)
