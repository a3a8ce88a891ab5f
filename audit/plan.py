"""Planning an audit: find and validate every checkpoint, read each run's saved config, environments,
labelled answers and verifier roles, and check that every prompt fits, before anything is computed
or written (`plan`, raising one AuditError, CheckpointError or AuditConfigError naming the problem)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from judges.verifiers import OracleConfig
from selfplay.config import Settings, resolve_data_path
from selfplay.envs import EnvLoadError
from selfplay.envs.types import Environment
from selfplay.runs import (
    Prompts,
    Run,
    RunData,
    load_data_split,
    sweep_differences,
)

from . import calibration as C
from .checkpoints import Checkpoint, Discovery, find_checkpoints, open_run
from .collect import CHECKS, ORACLE, ORACLE2, SampleSettings, chunk_size
from .config import AuditConfig, AuditConfigError
from .gate_rows import GateSet, gate_set
from .labels import run_labels


class AuditError(RuntimeError):
    """A problem with the input (checkpoint, data, settings): reported in one line."""


@dataclass(frozen=True)
class Plan:
    discovery: Discovery
    runs: Mapping[Path, Run]  # the training run of each checkpoint, its saved config validated
    envs: Mapping[tuple[str, int], tuple[Environment, ...]]  # audit split of each reward × seed
    # labelled on-policy answers of each reward × seed's data (environments by id, rows); None = none
    labelled: Mapping[tuple[str, int], Any] = None
    oracles: Mapping[tuple[str, int], Mapping[str, Any]] = None  # verifier role -> OracleConfig
    sample: Mapping[tuple[str, int], SampleSettings] = None  # how each reward × seed's answers are drawn
    prompts: Mapping[tuple[str, int], Prompts] = None  # each reward × seed's policy prompts, rendered once
    # the labelled rows each reward × seed's own policy wrote: all its calibration gate reads (None: none)
    gate_sets: Mapping[tuple[str, int], GateSet | None] = None


class LabelledSet(NamedTuple):
    envs: dict[str, Environment]  # the environments of the run's data, by task id
    rows: list[dict]  # the labelled answers; a row of `python -m audit.label` has its `iteration`
    where: str  # names the on-policy set (its files) in the gate's reasons


def labelled_set(settings: Settings, ckpt: Checkpoint | None = None) -> LabelledSet | None:
    """The run's on-policy set (see `labelled_of`), its data read here."""
    return labelled_of(str(settings.data.path), resolve_data_path(settings.data.path),
                       {e.task_id: e for e in load_data_split(settings.data, "all")}, ckpt)


def labelled_of(data: str, data_dir: Path, envs: dict[str, Environment],
                ckpt: Checkpoint | None = None) -> LabelledSet | None:
    """The run's on-policy set: the data set's labelled answers (labelled_answers.jsonl, mini) and
    the labels `python -m audit.label` made for the run of `ckpt` (audit.labels.run_labels), with the
    environments they belong to (`envs`, of data set `data` at `data_dir`); None when there are none."""
    files, rows = [], []
    path = C.labelled_path(data_dir)
    if path is not None:
        files.append(f"{data}/{path.name}")
        rows += C.read_labelled(path)
    if ckpt is not None:
        found, labels = run_labels(ckpt.path.parent, envs)
        files += [_relative(f, ckpt.path.parent.parent.parent) for f in found]
        rows += labels
    if not rows:
        return None
    unknown = sorted({r["task_id"] for r in rows} - set(envs))
    if unknown:
        raise AuditError(f"{', '.join(files)}: task_id {unknown[0]!r} is not an environment of {data}")
    return LabelledSet(envs, rows, f"on-policy set ({', '.join(files)})")


def plan(cfg: AuditConfig) -> Plan:
    """Find the checkpoints, then read each run in one pass (`selfplay.runs.Run.read`), then check
    what was read: nothing is computed or written before every run passes."""
    discovery = find_checkpoints(cfg.ckpt, cfg.iterations)
    runs = {c.path: open_run(c) for c in discovery.checkpoints}
    first = {(c.reward, c.seed): c for c in reversed(discovery.checkpoints)}
    sample = {key: sample_settings(cfg, runs[c.path].settings) for key, c in first.items()}
    # the verifier roles for either default primary oracle (the data, once read, picks one)
    choices = {name: oracle_roles(cfg, name) for name in ((None,) if cfg.oracle is not None else ("any", "llm"))}

    data: dict[tuple[str, int], RunData] = {}
    tokenizers: dict[str, Any] = {}
    for key, c in first.items():
        try:
            data[key] = runs[c.path].read(budget=sample[key].max_new_tokens, max_per_kind=cfg.max_envs,
                                          tokenizers=tokenizers, judge_answers=True,
                                          judge_answer_tokens=sample[key].max_new_tokens if sample[key].n else None)
        except (EnvLoadError, FileNotFoundError, ValueError) as e:
            raise AuditError(f"{c.path}: cannot read the run's environments and prompts: {e}") from None
    differences = [(ref, c, sweep_differences(ref.config, c.config, same_reward=ref.reward == c.reward))
                   for ref, c in sweep_pairs(discovery)]

    check_one_experiment(cfg, differences)
    oracles, labelled, gate_sets = {}, {}, {}
    for key, c in first.items():
        d = data[key]
        check_read(c, d, runs[c.path], sample[key].max_new_tokens)
        oracles[key] = choices[None if cfg.oracle is not None else "any" if d.checked else "llm"]
        try:
            labelled[key] = labelled_of(str(runs[c.path].settings.data.path), d.data_dir, dict(d.envs), c) \
                if cfg.labelled else None
        except C.LabelledError as e:  # a labels file: its own line names the file and the recovery
            raise AuditError(str(e)) from None
        gate_sets[key] = gate_set(runs[c.path], d, c) if cfg.labelled else None
    check_api_keys(oracles, runs)
    return Plan(discovery, runs, {k: d.audit for k, d in data.items()}, labelled, oracles,
                {(c.reward, c.seed): sample[(c.reward, c.seed)] for c in discovery.checkpoints},
                {k: d.prompts for k, d in data.items()}, gate_sets)


def sweep_pairs(discovery: Discovery) -> list[tuple[Checkpoint, Checkpoint]]:
    """The pairs of checkpoints one audit must find alike: each with the first of its reward and the
    first of all."""
    first: dict[str, Checkpoint] = {}
    return [(ref, c) for c in discovery.checkpoints
            for ref in dict.fromkeys([first.setdefault(c.reward, c), discovery.checkpoints[0]])]


def check_one_experiment(cfg: AuditConfig, differences: Sequence[tuple[Checkpoint, Checkpoint, list[str]]]) -> None:
    """One audit averages seeds and compares rewards: a tree holding runs of different experiments
    or settings (k, max_new_tokens, data, experiment_name, ...) is refused, never averaged."""
    for ref, c, diffs in differences:
        if diffs:
            same = ref.reward == c.reward
            a, b = ref.path.parent, c.path.parent
            apart = (a, b) if same else (a.parent, b.parent)
            more = f" and {len(diffs) - 3} more" if len(diffs) > 3 else ""
            raise AuditError(
                f"ckpt={cfg.ckpt}: {a} and {b} are runs of different experiments or settings "
                f"({'; '.join(diffs[:3])}{more}), which one audit would average into one figure; "
                f"nothing was written; audit them apart: python -m audit.gap ckpt={apart[0]}, then "
                f"ckpt={apart[1]}")


def check_read(c: Checkpoint, d: RunData, run: Run, budget: int) -> None:
    """A run's audit split must hold environments, and each one's policy prompt plus the answer
    budget must fit the policy's context (as selfplay.train.check_prompt_lengths does for training):
    found here, naming the task, not by the sampler in the middle of the audit."""
    if not d.audit:
        raise AuditError(f"{run.settings.data.path}: the audit split is empty")
    if d.too_long is not None:
        e, n = d.too_long
        policy = d.policy
        raise AuditError(
            f"{e.source}: task {e.task_id}: its audit prompt is {n} tokens + max_new_tokens="
            f"{budget} > max_context {policy.max_context} of policy {policy.name} (run {c.path.parent}); "
            "nothing was written; shorten the record's evidence or lower max_new_tokens")
    if d.judge_too_long is not None:  # the judge reads every stress answer and every sampled one
        raise AuditError(d.judge_too_long.line(f" (run {c.path.parent})"))


def check_api_keys(oracles: Mapping[tuple[str, int], Mapping[str, Any]], runs: Mapping[Path, Run]) -> None:
    for roles in oracles.values():
        for o in roles.values():
            if o.uses_llm and o.model == "endpoint":
                check_api_key(o.endpoint)
    for run in runs.values():  # a run judged by a server: its key too
        if run.settings.judge.model == "endpoint":
            check_api_key(run.settings.judge.endpoint_config, "judge.endpoint")


def check_api_key(endpoint: Any, where: str = "oracle.endpoint") -> None:
    """An endpoint judge's or oracle's key variable must be set before anything is computed (it is
    read when the judge or oracle is first built, after answers are cached)."""
    name = endpoint.api_key_env
    if name is not None and not os.environ.get(name):
        raise AuditConfigError(f"{where}.api_key_env={name}: the environment variable {name} is not "
                               f"set; export {name}=<the API key>, or set {where}.api_key_env=null "
                               "for a server that needs no key")


def oracle_roles(cfg: AuditConfig, default: str | None) -> dict[str, Any]:
    """Verifier role -> judges.verifiers.OracleConfig: the primary oracle (the `oracle` group, else the
    oracle named `default`), the second LLM oracle when configured, and the public-view checks (the
    second verifier of the judge × checks IBE)."""
    primary = OracleConfig.from_mapping(cfg.oracle) if default is None else OracleConfig.named(default)
    roles = {ORACLE: primary}
    if cfg.second_oracle is not None:
        roles[ORACLE2] = OracleConfig(name="llm", verifiers=(), model=cfg.second_oracle,
                                      min_mass=primary.min_mass)
    roles[CHECKS] = OracleConfig(name="checks", verifiers=())
    return roles


def sample_settings(cfg: AuditConfig, settings: Settings) -> SampleSettings:
    return SampleSettings(
        n=cfg.n, seed=cfg.seed, chunk=chunk_size(cfg.batch_size, cfg.n),
        temperature=cfg.temperature if cfg.temperature is not None else settings.train.temperature,
        max_new_tokens=cfg.max_new_tokens if cfg.max_new_tokens is not None else settings.train.max_new_tokens,
    )


def _relative(path: Path, root: Path) -> str:
    """Paths in audit.json are relative to it, so a moved tree gives the same bytes."""
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()
    return rel or "."
