"""Run directories of `selfplay.train`: `<output_root>/<experiment>/<reward>/seed<s>/iter_<t>/`.

Contract:
- An iteration is written into a hidden temp dir `.iter_<t>.tmp` next to its final place; the `DONE`
  marker is written last, then the dir is renamed to `iter_<t>`. A dir named `iter_<t>` with `DONE` is
  complete and never touched again.
- Anything else (temp dirs, an `iter_<t>` without `DONE`) is partial: `discard_partial` removes it and
  the iteration is redone.
- Complete iterations are 0..m without gaps; a gap means the directory was edited by hand, and
  `scan_run` refuses it rather than guess.
- `iter_<t>/config.yaml` holds the resolved config; a rerun whose config differs (outside the keys a
  resumed run may change, `selfplay.config.RESUMABLE_KEYS`) is refused, never mixed in.

Files per iteration t >= 1: adapter/, generations.jsonl, judgments.jsonl, pairs.jsonl, metrics.json,
config.yaml, DONE. Iteration 0 (the initial policy) has adapter/, metrics.json, config.yaml, DONE.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from selfplay.config import ConfigError, comparable

DONE = "DONE"
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
    partial: tuple[Path, ...]  # dirs to discard before resuming

    @property
    def last(self) -> int | None:
        return self.complete[-1] if self.complete else None


def scan_run(run: Path) -> RunState:
    if not run.exists():
        return RunState((), ())
    complete, partial = [], []
    for child in sorted(run.iterdir()):
        if not child.is_dir():
            continue
        if (m := _ITER.match(child.name)) and (child / DONE).is_file():
            complete.append(int(m.group(1)))
        elif _ITER.match(child.name) or _TMP.match(child.name):
            partial.append(child)
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
        (tmp / DONE).write_text("")
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")


def write_config(path: Path, resolved: Mapping[str, Any]) -> None:
    path.write_text(yaml.safe_dump(dict(resolved), sort_keys=True), encoding="utf-8")


def read_config(iteration: Path) -> dict[str, Any]:
    return yaml.safe_load((iteration / CONFIG).read_text(encoding="utf-8"))


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
    return [f"{k}: {a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r}" for k in sorted(a.keys() | b.keys())
            if a.get(k) != b.get(k)]


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


def json_float(x: float | None) -> float | None:
    """NaN/inf -> None, so JSON files stay strict (NaN is not JSON)."""
    return None if x is None or x != x or x in (float("inf"), float("-inf")) else float(x)
