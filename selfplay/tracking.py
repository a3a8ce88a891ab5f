"""Experiment logging: one wandb run per seed (offline unless configured), or nothing (`logger=none`).

The wandb run id is derived from the run directory, so a resumed run appends to the same wandb run
instead of starting a second one. Metrics arrive already namespaced (`train/`, `judge/`, `pairs/`)
and are logged with the iteration as the step.

Besides the scalars, each iteration logs a sample table (`samples`, `SAMPLE_COLUMNS`): one row per
answer the policy wrote, with the judge's score, whether the answer was a pair's chosen or rejected
side, and truncation. The rows come from the iteration's own files (`iteration_samples`), the join
`python -m audit.view` renders too, so the table and the viewer cannot disagree.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from selfplay.artifacts import read_jsonl
from selfplay.config import LoggerConfig


class Logger(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None: ...

    def finish(self) -> None: ...


class NullLogger:
    def log(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbLogger:
    def __init__(self, run):
        self._run = run

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        import wandb

        self._run.log({key: wandb.Table(columns=list(columns), data=[list(r) for r in rows])}, step=step)

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


# -- the samples of one iteration ----------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    """One answer written at iteration t (by π_{t-1}), joined with what the judge and pairing made of it."""

    iteration: int
    task_id: str
    kind: str
    index: int  # its position among the environment's k answers (the key of judgments and pairs)
    answer: str
    source: str | None  # policy (sampled) | labelled (an authored stress answer); None in older runs
    judge_score: float | None  # None: the judge could not score it
    judge_error: str | None
    chosen: int  # how many DPO pairs it is the chosen side of (one at most when sampled)
    rejected: int  # how many it is the rejected side of (labelled candidates pair every scored gap)
    truncated: bool  # reached max_new_tokens without an end-of-turn
    drop: str | None  # why the environment gave no pair this iteration (nan, tie, margin, ...)


SAMPLE_COLUMNS = tuple(f.name for f in fields(Sample))


def iteration_samples(iteration_dir: Path) -> list[Sample]:
    """Every answer of `iter_<t>/`, joined by (task_id, index) across generations.jsonl,
    judgments.jsonl and pairs.jsonl (and metrics.json's `pair_drops`); [] for iter_0, which holds
    no answers."""
    gens = iteration_dir / "generations.jsonl"
    if not gens.is_file():
        return []
    t = json.loads((iteration_dir / "metrics.json").read_text(encoding="utf-8"))
    drops = t.get("pair_drops") or {}
    judged = {(r["task_id"], r["index"]): r for r in read_jsonl(iteration_dir / "judgments.jsonl")}
    chosen: Counter[tuple[str, int]] = Counter()
    rejected: Counter[tuple[str, int]] = Counter()
    for p in read_jsonl(iteration_dir / "pairs.jsonl"):
        chosen[(p["task_id"], p["chosen_index"])] += 1
        rejected[(p["task_id"], p["rejected_index"])] += 1
    out = []
    for g in read_jsonl(gens):
        cut = g.get("truncated") or [False] * len(g["answers"])
        sources = g.get("sources") or [None] * len(g["answers"])
        for i, (text, truncated, source) in enumerate(zip(g["answers"], cut, sources, strict=True)):
            key = (g["task_id"], i)
            verdict = judged.get(key, {})
            out.append(Sample(int(t["iteration"]), g["task_id"], g.get("kind", ""), i, text, source, verdict.get("score"),
                              verdict.get("error"), chosen[key], rejected[key], bool(truncated),
                              drops.get(g["task_id"])))
    return out


def sample_rows(samples: Sequence[Sample]) -> list[tuple]:
    """The rows of the `samples` table, in SAMPLE_COLUMNS order."""
    return [astuple(s) for s in samples]
