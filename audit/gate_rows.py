"""The rows the calibration gate reads: the labelled answers the audited policy itself wrote
(docs/method.md §Calibration gate).

The gate vouches for the primary oracle's verdicts on the audited policy's text, so it is measured
on that text alone. Per reward × seed it reads:
- the rows of the data's `labelled_answers.jsonl` (mini) and of the fresh blind labels
  (`experiments/labelled/*.jsonl`) that `audit.calibration.own_rows` finds to be this run's: base
  weights text of the run's own policy as t = 0, and an adapter's text only where this run's audit
  cache holds the very same text at the row's key;
- the labels `python -m audit.label` wrote for the run (`labels.jsonl`), which it reads answer by
  answer against the run's cache (audit.labels.run_labels);
each answer once (keyed by task, iteration and text), and only rows of the run's own environments.
The preference probe is not filtered: it reads every labelled answer of the audited environments,
whoever wrote it, as fixed texts whose likelihood the policy moves.

`read` counts the rows read per file; the report names them for each run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfplay.config import PROJECT_ROOT
from selfplay.envs.types import Environment
from selfplay.runs import Run, RunData

from . import calibration as C
from .checkpoints import Checkpoint

FRESH_DIR = PROJECT_ROOT / "experiments" / "labelled"


@dataclass(frozen=True)
class GateSet:
    envs: dict[str, Environment]  # the run's environments, by task id
    rows: list[dict[str, Any]]  # the labelled rows the gate reads, each with its `iteration`
    where: str  # names the set (its files) in the gate's reasons
    read: dict[str, int] = field(default_factory=dict)  # file -> rows of it the gate reads


def fresh_files(folder: Path = FRESH_DIR) -> list[Path]:
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def cached_text(seed_dir: Path) -> Callable[[Mapping[str, Any], int], str | None]:
    """`(row, t) -> the text this run's audit cached at the row's key` (its answers file in
    `iter_<t>/audit_cache/`, task and index), None where it holds none."""
    from .cache import CACHE_DIR
    from .labels import answer_rows

    files: dict[Path, dict[str, Any]] = {}

    def look(row: Mapping[str, Any], t: int) -> str | None:
        name, i = row.get("answers_file"), row.get("index")
        if not isinstance(name, str) or "/" in name or not isinstance(i, int):
            return None
        f = seed_dir / f"iter_{t}" / CACHE_DIR / name
        if f not in files:
            files[f] = answer_rows(f) if f.is_file() else {}
        texts = (files[f].get(str(row.get("task_id"))) or {}).get("answers") or []
        return texts[i] if 0 <= i < len(texts) else None

    return look


def gate_set(run: Run, d: RunData, ckpt: Checkpoint, fresh: list[Path] | None = None) -> GateSet | None:
    """The gate's rows for the run of `ckpt` (module docstring), from its data as `Run.read` gave it;
    None when there are none."""
    from .labels import run_labels

    envs, seed_dir = dict(d.envs), ckpt.path.parent
    rule = dict(policy=d.policy.name, reward=ckpt.reward, seed=ckpt.seed,
                experiment=run.settings.train.experiment_name, cached_text=cached_text(seed_dir))
    sources: list[tuple[str, list[dict[str, Any]]]] = []
    data_file = C.labelled_path(d.data_dir)
    if data_file is not None:
        sources.append((f"{run.settings.data.path}/{data_file.name}", C.own_rows(C.read_labelled(data_file), **rule)))
    for f in fresh_files() if fresh is None else fresh:
        name = f.relative_to(PROJECT_ROOT).as_posix() if f.is_relative_to(PROJECT_ROOT) else str(f)
        sources.append((name, C.own_rows(C.read_labelled(f), **rule)))
    found, labels = run_labels(seed_dir, envs)
    if labels:  # run_labels joins the run's label files: counted together
        root = seed_dir.resolve().parent.parent
        sources.append((", ".join(f.relative_to(root).as_posix() if f.is_relative_to(root) else str(f)
                                  for f in found), labels))
    rows, read, seen = [], {}, set()
    for name, got in sources:
        kept = 0
        for r in got:
            key = (r["task_id"], int(r["iteration"]), r["text"])
            if r["task_id"] not in envs or key in seen:
                continue
            seen.add(key)
            rows.append(r)
            kept += 1
        if kept:
            read[name] = kept
    if not rows:
        return None
    return GateSet(envs, rows, f"on-policy set ({', '.join(read)})", read)
