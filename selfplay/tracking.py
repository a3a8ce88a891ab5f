"""Experiment logging: one wandb run per seed (offline unless configured), or nothing (`logger=none`).

The wandb run id is derived from the run directory, so a resumed run appends to the same wandb run
instead of starting a second one. Metrics arrive already namespaced (`train/`, `judge/`, `pairs/`)
and are logged with the iteration as the step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from selfplay.config import LoggerConfig


class Logger(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


class NullLogger:
    def log(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbLogger:
    def __init__(self, run):
        self._run = run

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def finish(self) -> None:
        self._run.finish()


def wandb_id(run_dir: Path) -> str:
    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]


def start_logger(cfg: LoggerConfig, run_dir: Path, *, name: str, group: str, config: Mapping[str, Any]) -> Logger:
    if cfg.kind == "none":
        return NullLogger()
    import wandb

    run_dir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=cfg.project,
        entity=cfg.entity,
        group=group,
        name=name,
        id=wandb_id(run_dir),
        resume="allow",
        mode=cfg.mode,
        dir=str(cfg.dir or run_dir),
        config=dict(config),
    )
    return WandbLogger(run)
