"""Loaders: a release directory, a combined JSONL export, or either by path.

Release directory layout (the ImpossibleRubrics release, and the bundled `data/mini/`):
    data/*.json           one impossible environment per file
    data_control/*.json   one answerable control per file
    splits/*.json         id manifests (see `split.py`)
    schema/*.json         the JSON Schemas (optional; see `schema.find_schema_dir`)
In a JSONL export each line is one record; its kind is read from the record: impossible when it has
`impossibility_type`, control when `env_type == "answerable_control"` or it has `ground_truth`.

A file that cannot be read (not UTF-8, a directory or a broken symlink where a file should be, a
symlink loop, no permission) is one error naming its path, like a malformed record.

All-or-nothing: `check_*` gathers every error and returns no environments when there is any;
`load_*` raises one `EnvLoadError` listing them. Environments come back in file order (sorted file
names, impossible before controls) or line order.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import EnvError, EnvLoadError
from .schema import SchemaNotFound, Schemas, find_schema_dir
from .types import Environment, Kind
from .validate import build_environment, detect_kind, record_errors

RELEASE_DIRS: dict[str, Kind] = {"data": "impossible", "data_control": "control"}


@dataclass(frozen=True)
class LoadResult:
    envs: list[Environment]
    errors: list[EnvError]
    schema_dir: Path | None = None

    def raise_if_errors(self) -> list[Environment]:
        if self.errors:
            raise EnvLoadError(self.errors)
        return self.envs


@dataclass
class _Checked:
    """Records that passed their own checks, awaiting the whole-load checks."""

    items: list[tuple[dict[str, Any], Kind, str, str, int | None]] = field(default_factory=list)
    errors: list[EnvError] = field(default_factory=list)

    def add(self, record: Any, kind: Kind, file: str, line: int | None, schemas: Schemas) -> None:
        task_id = record.get("task_id") if isinstance(record, dict) else None
        task_id = task_id if isinstance(task_id, str) else None
        problems = record_errors(record, kind, schemas)
        self.errors += [EnvError(file, task_id, f, msg, line) for f, msg in problems]
        if not problems:
            source = file if line is None else f"{file}:{line}"
            self.items.append((record, kind, source, file, line))

    def result(self, schema_dir: Path) -> LoadResult:
        first_seen: dict[str, str] = {}
        for record, _, source, file, line in self.items:
            tid = record["task_id"]
            if tid in first_seen:
                self.errors.append(
                    EnvError(
                        file,
                        tid,
                        "task_id",
                        f"duplicate task_id (first seen in {first_seen[tid]})",
                        line,
                    )
                )
            else:
                first_seen[tid] = source
        if self.errors:
            return LoadResult([], self.errors, schema_dir)
        envs = [build_environment(rec, kind, source) for rec, kind, source, _, _ in self.items]
        return LoadResult(envs, [], schema_dir)


def unreadable(path: str | Path, e: OSError | UnicodeDecodeError) -> str:
    """Why `path` cannot be read as text, in words: the reason an error line gives."""
    path = Path(path)
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte 0x{e.object[e.start]:02X} at offset {e.start})"
    if e.errno == errno.ELOOP:
        return "cannot read: a symlink loop"
    if path.is_symlink() and not path.exists():
        return f"cannot read: a dangling symlink (to {os.readlink(path)})"
    if e.errno == errno.EISDIR or path.is_dir():
        return "a directory, expected a file"
    if e.errno == errno.ENOENT:
        return "no such file"
    return f"cannot read ({e.strerror or e})"


def read_text(path: str | Path) -> str | EnvError:
    """The UTF-8 text of `path`, or the EnvError saying why it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return EnvError(str(path), None, "", unreadable(path, e))


def _schemas(data_root: Path, schema_dir: str | Path | None) -> Schemas | EnvError:
    try:
        return Schemas.load(find_schema_dir(data_root, schema_dir))
    except (SchemaNotFound, json.JSONDecodeError) as e:
        return EnvError(str(schema_dir or data_root), None, "schema", str(e))
    except (OSError, UnicodeDecodeError) as e:
        where = getattr(e, "filename", None) or str(schema_dir or data_root)
        return EnvError(str(where), None, "schema", unreadable(where, e))


def _bad_json(file: str, e: json.JSONDecodeError, line: int | None = None) -> EnvError:
    return EnvError(file, None, "", f"invalid JSON: {e.msg} (column {e.colno})", line or e.lineno)


def check_release(path: str | Path, schema_dir: str | Path | None = None) -> LoadResult:
    root = Path(path)
    schemas = _schemas(root, schema_dir)
    if isinstance(schemas, EnvError):
        return LoadResult([], [schemas])
    if not any((root / d).is_dir() for d in RELEASE_DIRS):
        err = EnvError(
            str(root), None, "", f"not a release directory: no {' or '.join(RELEASE_DIRS)}/ inside"
        )
        return LoadResult([], [err], schemas.dir)
    checked = _Checked()
    for sub, kind in RELEASE_DIRS.items():
        for f in sorted((root / sub).glob("*.json")):
            text = read_text(f)
            if isinstance(text, EnvError):
                checked.errors.append(text)
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                checked.errors.append(_bad_json(str(f), e))
                continue
            checked.add(record, kind, str(f), None, schemas)
    return checked.result(schemas.dir)


def check_jsonl(path: str | Path, schema_dir: str | Path | None = None) -> LoadResult:
    path = Path(path)
    schemas = _schemas(path.parent, schema_dir)
    if isinstance(schemas, EnvError):
        return LoadResult([], [schemas])
    checked = _Checked()
    whole = read_text(path)
    if isinstance(whole, EnvError):
        return LoadResult([], [whole], schemas.dir)
    for lineno, text in enumerate(whole.splitlines(), start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as e:
            checked.errors.append(_bad_json(str(path), e, lineno))
            continue
        kind = detect_kind(record) if isinstance(record, dict) else "impossible"
        if kind is None:
            tid = record.get("task_id") if isinstance(record.get("task_id"), str) else None
            checked.errors.append(
                EnvError(
                    str(path),
                    tid,
                    "impossibility_type",
                    "cannot tell impossible from control: need impossibility_type (impossible) or "
                    "env_type='answerable_control' / ground_truth (control), not both or neither",
                    lineno,
                )
            )
            continue
        checked.add(record, kind, str(path), lineno, schemas)
    return checked.result(schemas.dir)


def check_path(path: str | Path, schema_dir: str | Path | None = None) -> LoadResult:
    """A release directory, or a `.jsonl` export."""
    p = Path(path)
    if p.suffix == ".jsonl" and (p.is_file() or os.path.lexists(p)):
        return check_jsonl(p, schema_dir)  # an unreadable one is reported by the reader
    if p.is_dir():
        return check_release(p, schema_dir)
    if not os.path.lexists(p):
        why = "no such file or directory"
    elif not p.exists():
        why = "a dangling symlink" if p.is_symlink() else "cannot be read"
    else:
        why = "expected a release directory or a .jsonl file"
    return LoadResult([], [EnvError(str(p), None, "", why)])


def load_release(path: str | Path, schema_dir: str | Path | None = None) -> list[Environment]:
    return check_release(path, schema_dir).raise_if_errors()


def load_jsonl(path: str | Path, schema_dir: str | Path | None = None) -> list[Environment]:
    return check_jsonl(path, schema_dir).raise_if_errors()


def load_envs(path: str | Path, schema_dir: str | Path | None = None) -> list[Environment]:
    return check_path(path, schema_dir).raise_if_errors()
