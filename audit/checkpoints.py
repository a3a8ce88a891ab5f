"""Finding and validating the checkpoints an audit reads (no model is loaded here).

A checkpoint is one complete iteration directory of a training run,
`outputs/<experiment>/<reward>/seed<s>/iter_<t>/`, holding `config.yaml` (the run's resolved config),
`adapter/` (the LoRA adapter; at t = 0 the fresh no-op adapter of the initial policy) and the `DONE`
marker the loop writes last. `find_checkpoints(path)` accepts any level of that tree:

- an iteration dir: that iteration, plus `iter_0` of the same seed, because FPR drift is defined
  against t = 0 (the drift slope then runs over the iterations audited);
- a seed dir: every complete iteration t = 0..T (an iteration without `DONE` is skipped, listed in
  `Discovery.skipped` and named on stderr by audit.gap);
- a reward dir (`seed<s>/` inside) or an experiment dir (`<reward>/seed<s>/` inside): every seed of
  every reward.

`iterations` keeps, in each seed dir, t = 0 and the iterations it names, -1 being the last iteration
every run found has completed (so that seeds and rewards are compared at the same t, a run still
training included): a long sweep audited at its end points costs two checkpoints a run, not T + 1.
An iteration no run has, or `iterations` with an iteration dir, is refused.

A run whose `iter_0` is not complete is refused (`check_baseline`), never audited from iter_1 on:
every drift would lack its reference.

Everything is validated before anything is computed, so a missing or corrupt checkpoint gives one
`CheckpointError` naming the path and the problem, and the audit writes nothing. That includes the
checksum manifest in `DONE` (`selfplay.artifacts.verify_iteration`) of every complete iteration of
each run involved, the ones not audited included: a deleted or truncated adapter is named here, not
met later as PEFT's `HFValidationError` (a missing local path reads to it as a hub id).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from selfplay.artifacts import CorruptIteration, no_done, recovery, verify_iteration
from selfplay.config import ConfigError, Settings
from selfplay.runs import Run

from .cache import adapter_sha256

ITER_RE = re.compile(r"iter_(\d+)")
SEED_RE = re.compile(r"seed(\d+)")
DONE = "DONE"
CONFIG = "config.yaml"
ADAPTER = "adapter"


class CheckpointError(ValueError):
    """A path that is not an auditable checkpoint; the message says which path and why."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path  # the iter_<t> directory
    reward: str  # from the layout <reward>/seed<s>/iter_<t>
    seed: int
    iteration: int
    config: Mapping[str, Any] = field(compare=False, repr=False)  # the run's resolved config

    @property
    def adapter_path(self) -> Path:
        return self.path / ADAPTER

    @cached_property
    def adapter_is_noop(self) -> bool:
        """Whether the adapter changes nothing: every LoRA B matrix is zero, as PEFT initialises it (the
        fresh adapter of iter_0). Such a checkpoint is π_0 exactly, so the audit runs it as π_0."""
        from safetensors import safe_open

        weights = self.adapter_path / "adapter_model.safetensors"
        if not weights.is_file():
            return False
        with safe_open(str(weights), framework="pt") as f:
            b = [k for k in f.keys() if "lora_B" in k]
            return bool(b) and not any(f.get_tensor(k).any() for k in b)

    @cached_property
    def adapter_id(self) -> str | None:
        """What keys the policy's calls at this checkpoint beside its base weights: the sha256 of the
        adapter's files as `DONE` records them, or None for a no-op adapter (π_0 itself)."""
        return None if self.adapter_is_noop else adapter_sha256(self.path)

    @property
    def identity(self) -> str:
        """Names the judge's weights at this iteration (keys the judge's stage-1 cache)."""
        return f"seed{self.seed}/iter_{self.iteration}"


@dataclass(frozen=True)
class Discovery:
    root: Path  # the path given; outputs are written here
    checkpoints: tuple[Checkpoint, ...]  # sorted by reward, seed, iteration
    skipped: tuple[Path, ...]  # incomplete iteration dirs (no DONE marker)


_LAYOUT = ("expected an iteration dir iter_<t>/ (with config.yaml and DONE), a seed dir seed<s>/ "
           "holding iter_<t>/ dirs, or a reward or experiment dir above them")


def find_checkpoints(path: str | Path, iterations: Sequence[int] | None = None) -> Discovery:
    """Every checkpoint under `path` (see the module docstring), validated; raises CheckpointError."""
    root = Path(path).expanduser()
    if not root.exists():
        raise CheckpointError(f"ckpt={path}: no such file or directory")
    if not root.is_dir():
        raise CheckpointError(f"ckpt={path}: not a directory; {_LAYOUT}")
    root = root.resolve()
    if ITER_RE.fullmatch(root.name):
        if iterations is not None:
            raise CheckpointError(f"ckpt={path} names one iteration; iterations={list(iterations)} chooses "
                                  "among a run's iterations: give its seed dir, or leave iterations unset")
        ckpt = load_checkpoint(root)
        base = root.parent / "iter_0"
        if ckpt.iteration != 0:
            check_baseline(root.parent, path)
        extra = [] if ckpt.iteration == 0 else [load_checkpoint(base)]
        verify_run(root.parent, skip={ckpt.path, base})
        return Discovery(root, tuple(sorted(extra + [ckpt], key=_order)), ())
    seed_dirs = _seed_dirs(root)
    if not seed_dirs:
        raise CheckpointError(f"ckpt={path}: no training iterations found; {_LAYOUT}")
    runs, skipped = [], []
    for seed_dir in seed_dirs:
        mine = []
        for d in sorted(_iter_dirs(seed_dir), key=_number):
            if (d / DONE).is_file():
                mine.append(load_checkpoint(d))
            else:
                skipped.append(d)
        if mine:
            check_baseline(seed_dir, path)
            runs.append(mine)
    found = [c for mine in runs for c in mine]
    if found and iterations is not None:
        found = _chosen(runs, iterations)
    if not found:
        raise CheckpointError(f"ckpt={path}: no complete iteration (none has a {DONE} marker); "
                              f"incomplete: {', '.join(str(s) for s in skipped)}")
    return Discovery(root, tuple(sorted(found, key=_order)), tuple(skipped))


def _chosen(runs: list[list[Checkpoint]], iterations: Sequence[int]) -> list[Checkpoint]:
    """t = 0 and the iterations named of every run's checkpoints; -1 is the last iteration every run
    has completed."""
    last = min(max(c.iteration for c in mine) for mine in runs)
    wanted = {0} | {last if t == -1 else t for t in iterations}
    have = {c.iteration for mine in runs for c in mine}
    if missing := sorted(t for t in wanted if t not in have):
        raise CheckpointError(f"iterations={list(iterations)}: no run has a complete iteration {missing[0]} "
                              f"(complete: {', '.join(map(str, sorted(have)))})")
    return [c for mine in runs for c in mine if c.iteration in wanted]


def check_baseline(seed_dir: Path, given: str | Path) -> None:
    """Every drift is measured against t = 0: a run whose `iter_0` is not complete is refused, never
    audited from iter_1 on."""
    base = seed_dir / "iter_0"
    if (base / DONE).is_file():
        return
    if base.is_dir():
        why = no_done(base)
    else:
        why = f"{base} is missing; {recovery(base)}"
    raise CheckpointError(f"ckpt={given}: no baseline (t = 0, which every drift is measured against): {why}")


def verify(path: Path) -> None:
    """The iteration's files against its checksum manifest; CheckpointError naming the first that differ."""
    try:
        verify_iteration(path)
    except CorruptIteration as e:
        raise CheckpointError(f"corrupt checkpoint: {e}") from None


def verify_run(seed_dir: Path, skip: set[Path] = frozenset()) -> None:
    """Every complete iteration of one run (a seed dir), but those in `skip` (already verified)."""
    if seed_dir.is_dir():
        for d in sorted(_iter_dirs(seed_dir), key=_number):
            if d not in skip and (d / DONE).is_file():
                verify(d)


def load_checkpoint(path: Path) -> Checkpoint:
    """Validate one iteration dir and read its config; raises CheckpointError naming the problem."""
    m = ITER_RE.fullmatch(path.name)
    if m is None:
        raise CheckpointError(f"{path}: not an iteration dir (its name must be iter_<t>)")
    t = int(m.group(1))
    if not (path / DONE).is_file():
        raise CheckpointError(f"{path}: incomplete iteration (no {DONE} marker); the training run "
                              "did not finish it — rerun training to complete it")
    verify(path)
    cfg_path = path / CONFIG
    if not cfg_path.is_file():
        raise CheckpointError(f"{path}: corrupt checkpoint: {CONFIG} is missing")
    try:
        config = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{cfg_path}: corrupt checkpoint: unreadable YAML ({e})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{cfg_path}: corrupt checkpoint: expected a mapping, got {type(config).__name__}")
    for key in ("policy", "reward"):
        if not isinstance(config.get(key), dict):
            raise CheckpointError(f"{cfg_path}: corrupt checkpoint: the run config has no `{key}` section")
    if not (config["reward"].get("name")):
        raise CheckpointError(f"{cfg_path}: corrupt checkpoint: reward.name is missing")
    adapter = path / ADAPTER
    if not (adapter / "adapter_config.json").is_file():
        raise CheckpointError(f"{path}: corrupt checkpoint: {ADAPTER}/adapter_config.json is missing")
    seed_m = SEED_RE.fullmatch(path.parent.name)
    seed = int(seed_m.group(1)) if seed_m else config.get("seed")
    if not isinstance(seed, int):
        raise CheckpointError(f"{path}: cannot tell the seed (parent dir is not seed<s> and the config "
                              "has no integer `seed`)")
    if "seed" in config and config["seed"] != seed:
        raise CheckpointError(f"{path}: corrupt checkpoint: it lies under seed{seed}/ but its config "
                              f"says seed={config['seed']}")
    reward = path.parent.parent.name if seed_m else str(config["reward"]["name"])
    return Checkpoint(path=path, reward=reward, seed=seed, iteration=t, config=config)


def open_run(ckpt: Checkpoint) -> Run:
    """The training run `ckpt` belongs to, its saved config validated as training validates it."""
    try:
        return Run.from_config(ckpt.path.parent, ckpt.config, ckpt.seed)
    except (ConfigError, ValueError, TypeError) as e:
        raise CheckpointError(f"{ckpt.path / CONFIG}: corrupt checkpoint: {e}") from None


def run_settings(ckpt: Checkpoint) -> Settings:
    """The checkpoint's saved run config, validated (see `open_run`)."""
    return open_run(ckpt).settings


def _number(d: Path) -> int:
    return int(ITER_RE.fullmatch(d.name).group(1))


def _order(c: Checkpoint) -> tuple[str, int, int]:
    return (c.reward, c.seed, c.iteration)


def _iter_dirs(d: Path) -> list[Path]:
    # temp dirs of an iteration being written (e.g. `.iter_2.tmp`) do not match and are ignored
    return [p for p in d.iterdir() if p.is_dir() and ITER_RE.fullmatch(p.name)]


def _seed_dirs(root: Path) -> list[Path]:
    """Seed dirs at the three levels a user may point at: seed, reward or experiment dir."""
    if _iter_dirs(root):
        return [root]
    for depth in (1, 2):
        pattern = "seed*" if depth == 1 else "*/seed*"
        dirs = sorted(d for d in root.glob(pattern) if d.is_dir() and SEED_RE.fullmatch(d.name) and _iter_dirs(d))
        if dirs:
            return dirs
    return []
