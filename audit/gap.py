"""`python -m audit.gap ckpt=PATH`: the hidden-anchor audit of training checkpoints (SPEC §6).

    python -m audit.gap ckpt=outputs/selfplay/anchored/seed0/iter_2     # one iteration (+ t = 0)
    python -m audit.gap ckpt=outputs/selfplay/anchored/seed0            # t = 0..T of one seed
    python -m audit.gap ckpt=outputs/selfplay                           # every reward × seed
    python -m audit.gap ckpt=... n=2 bootstrap.B=200 logger=none        # a quick look

Recipe: find and validate every checkpoint under PATH and read each run's saved config (nothing is
computed or written before all of them pass) → per reward × seed: load the run's audit split and
its policy; per iteration: load that iteration's adapter, build the run's own judge as it stood at
that iteration (same design, same `judge.model`, identity = that iteration), collect answers,
verdicts and checks (cached in `iter_<t>/audit_cache/`) → metrics with environment-bootstrap
intervals per seed and iteration, means over seeds → `audit.json`, `audit.csv` and `figures/*.png`
in PATH, one wandb run per seed.

Settings: conf/audit.yaml, documented in `audit.config.AuditConfig` (including why the oracle
defaults to the run's own initial weights).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from selfplay.config import ConfigError, Settings, resolve_data_path, train_settings
from selfplay.envs import EnvLoadError, load_envs, train_audit_split
from selfplay.envs.types import Environment

from .checkpoints import Checkpoint, CheckpointError, Discovery, find_checkpoints
from .config import AuditConfig, AuditConfigError, audit_config
from .records import CacheError, config_hash
from .results import build_results, dumps, to_csv, write_text_atomic
from .summary import IterationAudit, StatsSettings, seed_metrics

log = logging.getLogger("audit.gap")
CACHE_DIR = "audit_cache"
FIGURES_DIR = "figures"


class AuditError(RuntimeError):
    """A problem with the input (checkpoint, data, settings): reported in one line."""


@dataclass(frozen=True)
class Plan:
    discovery: Discovery
    runs: Mapping[Path, Settings]  # the saved config of each checkpoint, validated
    envs: Mapping[tuple[str, int], tuple[Environment, ...]]  # audit split of each reward × seed


# -- planning: validate everything before computing anything ---------------------------------------

def run_settings(ckpt: Checkpoint) -> Settings:
    """The checkpoint's saved run config, validated as selfplay.train validates it."""
    from judges import JUDGES
    from selfplay.models.config import PolicyConfig

    config = {k: v for k, v in ckpt.config.items() if k != "hydra"}
    try:
        settings = train_settings(OmegaConf.create(config))
        PolicyConfig.from_mapping(settings.policy)
    except (ConfigError, ValueError, TypeError) as e:
        raise CheckpointError(f"{ckpt.path / 'config.yaml'}: corrupt checkpoint: {e}") from None
    if settings.reward_name not in JUDGES:
        raise CheckpointError(f"{ckpt.path / 'config.yaml'}: unknown reward {settings.reward_name!r} "
                              f"(known: {sorted(JUDGES)})")
    return settings


def audit_envs(settings: Settings, max_envs: int | None) -> tuple[Environment, ...]:
    """The run's audit split (the environments it never trained on); `max_envs` caps each kind."""
    path = resolve_data_path(settings.data.path)
    root = resolve_data_path(settings.data.splits) if settings.data.splits else (path if path.is_dir() else path.parent)
    _, audit = train_audit_split(load_envs(path), root)
    if max_envs is not None:
        kept = {"impossible": 0, "control": 0}
        capped = []
        for e in audit:
            if kept[e.kind] < max_envs:
                kept[e.kind] += 1
                capped.append(e)
        audit = capped
    if not audit:
        raise AuditError(f"{path}: the audit split is empty")
    return tuple(audit)


def plan(cfg: AuditConfig) -> Plan:
    from selfplay.models.config import PolicyConfig

    discovery = find_checkpoints(cfg.ckpt)
    runs = {c.path: run_settings(c) for c in discovery.checkpoints}
    for name in (cfg.oracle.model, cfg.oracle.second):
        if name not in (None, "initial"):
            try:
                PolicyConfig.named(name)
            except ValueError as e:
                raise AuditConfigError(f"oracle model: {e}") from None
    envs: dict[tuple[str, int], tuple[Environment, ...]] = {}
    for c in discovery.checkpoints:
        if (c.reward, c.seed) not in envs:
            try:
                envs[(c.reward, c.seed)] = audit_envs(runs[c.path], cfg.max_envs)
            except (EnvLoadError, FileNotFoundError, ValueError) as e:
                raise AuditError(f"{c.path}: cannot load the run's audit environments: {e}") from None
    return Plan(discovery, runs, envs)


# -- models -----------------------------------------------------------------------------------------

class BackendPool:
    """One backend per (policy config, LoRA shape), loaded on first use and shared by roles."""

    def __init__(self, cfg: AuditConfig):
        self.cfg = cfg
        self._pool: dict[str, Any] = {}

    def get(self, policy: Mapping[str, Any] | str, lora: Mapping[str, Any] | None = None):
        from selfplay.models import load_backend

        key = json.dumps([policy if isinstance(policy, str) else dict(policy), dict(lora or {})],
                         sort_keys=True, default=str)
        if key not in self._pool:
            # hf: the audit swaps one adapter per checkpoint into the same weights
            self._pool[key] = load_backend(policy if isinstance(policy, str) else dict(policy), backend="hf",
                                           lora=lora, device=self.cfg.device, batch_size=self.cfg.batch_size,
                                           progress=self.cfg.progress)
        return self._pool[key]


def _source_hash(*modules) -> str:
    """Prompt templates are code: a change to them must not be served from an old cache."""
    return hashlib.sha256("".join(inspect.getsource(m) for m in modules).encode()).hexdigest()[:12]


def judge_identity(settings: Settings, ckpt: Checkpoint) -> str:
    """Names the judge's weights at iteration t: π_t (self), π_0 (frozen) or another model."""
    model = settings.judge.model
    return ckpt.identity if model == "self" else ("initial" if model == "frozen" else model)


def build_verifiers(cfg: AuditConfig, settings: Settings, ckpt: Checkpoint, policy, pool: BackendPool):
    """The run's own judge at iteration t, the LLM oracle(s) and the deterministic checks."""
    from judges import build_judge
    from judges.oracle import LLMOracle

    from .collect import Verifiers

    model = settings.judge.model
    if model in ("self", "frozen"):
        backend, adapter = policy, model == "self"
    else:
        backend, adapter = pool.get(model), False
    judge = build_judge(settings.reward_name, backend, adapter=adapter, identity=judge_identity(settings, ckpt),
                        params=OmegaConf.to_container(settings.reward))

    def oracle(name: str | None):
        if name is None:
            return None
        kw = {} if cfg.oracle.min_mass is None else {"min_mass": cfg.oracle.min_mass}
        return LLMOracle(policy if name == "initial" else pool.get(name), adapter=False, **kw)

    return Verifiers(judge=judge, oracle=oracle(cfg.oracle.model), oracle2=oracle(cfg.oracle.second))


def cache_names(cfg: AuditConfig, settings: Settings, identity: str, sample) -> Any:
    import judges.designs
    import judges.oracle
    import judges.prompts
    import selfplay.envs.prompt

    from .collect import CacheNames

    policy = OmegaConf.to_container(settings.policy)
    reward = OmegaConf.to_container(settings.reward)

    def oracle_name(name: str | None) -> str | None:
        if name is None:
            return None
        model = {"initial": policy} if name == "initial" else {"named": name}
        model["min_mass"] = cfg.oracle.min_mass
        return f"oracle-{config_hash({'model': model, 'code': _source_hash(judges.prompts, judges.oracle)})}.jsonl"

    return CacheNames(
        answers=f"answers-{config_hash({'policy': policy, 'sample': vars(sample), 'code': _source_hash(selfplay.envs.prompt)})}.jsonl",
        judge=f"judge-{config_hash({'policy': policy, 'reward': reward, 'judge': settings.judge.model, 'identity': identity, 'code': _source_hash(judges.prompts, judges.designs)})}.jsonl",
        oracle=oracle_name(cfg.oracle.model),
        oracle2=oracle_name(cfg.oracle.second),
    )


# -- the audit --------------------------------------------------------------------------------------

def audit(cfg: AuditConfig, the_plan: Plan | None = None) -> dict[str, Any]:
    """Run the audit `cfg` describes and write its outputs; returns the audit.json document."""
    from .collect import SampleSettings, cached_rows, collect_checkpoint

    p = the_plan or plan(cfg)
    pool = BackendPool(cfg)
    stats = StatsSettings(seed=cfg.seed, B=cfg.bootstrap.B, alpha=cfg.bootstrap.alpha, max_rel_diff=cfg.length_match)
    groups: dict[tuple[str, int], list[Checkpoint]] = defaultdict(list)
    for c in p.discovery.checkpoints:
        groups[(c.reward, c.seed)].append(c)

    audits: dict[tuple[str, int], dict[int, IterationAudit]] = {}
    where: dict[tuple[str, int, int], str] = {}
    experiments: dict[tuple[str, int], str] = {}
    for (reward, seed), ckpts in groups.items():
        rows_by_t = {}
        for ckpt in ckpts:
            settings = p.runs[ckpt.path]
            envs = p.envs[(reward, seed)]
            sample = SampleSettings(
                n=cfg.n, seed=cfg.seed,
                temperature=cfg.temperature if cfg.temperature is not None else settings.train.temperature,
                max_new_tokens=cfg.max_new_tokens if cfg.max_new_tokens is not None else settings.train.max_new_tokens,
            )
            names = cache_names(cfg, settings, judge_identity(settings, ckpt), sample)
            rows = cached_rows(envs, ckpt.path / CACHE_DIR, names)
            if rows is None:  # something is missing: only now load the models
                log.info("auditing %s (%d environments)", ckpt.path, len(envs))
                policy = pool.get(OmegaConf.to_container(settings.policy), settings.train.lora)
                policy.load_adapter(ckpt.adapter_path)
                rows = collect_checkpoint(envs, policy, build_verifiers(cfg, settings, ckpt, policy, pool),
                                          sample, ckpt.path / CACHE_DIR, names, show_progress=cfg.progress)
            else:
                log.info("%s: every answer and verdict cached", ckpt.path)
            rows_by_t[ckpt.iteration] = rows
            where[(reward, seed, ckpt.iteration)] = _relative(ckpt.path, p.discovery.root)
        experiments[(reward, seed)] = p.runs[ckpts[0].path].train.experiment_name
        audits[(reward, seed)] = seed_metrics(rows_by_t, run_seed=seed, settings=stats,
                                              second_oracle=cfg.oracle.second is not None)
    doc = build_results(cfg.fingerprint(), audits, where, experiments,
                        [_relative(s, p.discovery.root) for s in p.discovery.skipped])
    write_outputs(p.discovery.root, doc)
    if cfg.logger.kind == "wandb":
        log_wandb(cfg, doc, p.discovery.root)
    return doc


def _relative(path: Path, root: Path) -> str:
    """Paths in audit.json are relative to it, so a moved tree gives the same bytes."""
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()
    return rel or "."


def write_outputs(root: Path, doc: Mapping[str, Any]) -> list[Path]:
    from .figures import write_figures

    write_text_atomic(root / "audit.json", dumps(doc))
    write_text_atomic(root / "audit.csv", to_csv(doc))
    return [root / "audit.json", root / "audit.csv", *write_figures(doc, root / FIGURES_DIR)]


def log_wandb(cfg: AuditConfig, doc: Mapping[str, Any], root: Path) -> None:
    """One wandb run per reward × seed: every metric (value and interval) with the iteration as step."""
    import wandb

    for reward, entry in sorted(doc["rewards"].items()):
        for seed, s in sorted(entry["seeds"].items(), key=lambda kv: int(kv[0])):
            run = wandb.init(project=cfg.logger.project, entity=cfg.logger.entity, mode=cfg.logger.mode,
                             group=s["experiment"], name=f"audit-{reward}-seed{seed}", job_type="audit",
                             dir=str(cfg.logger.dir or root), config={"audit": doc["settings"],
                                                                       "reward": reward, "seed": int(seed)})
            for t, it in sorted(s["iterations"].items(), key=lambda kv: int(kv[0])):
                row = {}
                for name, m in it["metrics"].items():
                    for field, key in (("value", f"audit/{name}"), ("ci_low", f"audit/{name}/ci_low"),
                                       ("ci_high", f"audit/{name}/ci_high")):
                        if m[field] is not None:
                            row[key] = m[field]
                row.update({f"audit/counts/{k}": v for k, v in it["counts"].items()})
                run.log(row, step=int(t))
            run.finish()


def _usage_errors() -> tuple[type[BaseException], ...]:
    from selfplay.models import ModelUnavailableError

    return (AuditError, AuditConfigError, CheckpointError, CacheError, ConfigError, EnvLoadError,
            ModelUnavailableError)


def main_cli(cfg: DictConfig) -> dict[str, Any]:
    """Validate, plan and run; usage errors become one line on stderr and exit status 1."""
    try:
        settings = audit_config(cfg)
        return audit(settings, plan(settings))
    except _usage_errors() as e:
        raise SystemExit(f"audit.gap: error: {e}") from None


@hydra.main(config_path="../conf", config_name="audit", version_base="1.3")
def main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    doc = main_cli(cfg)
    n = sum(len(s["iterations"]) for e in doc["rewards"].values() for s in e["seeds"].values())
    print(f"audited {n} checkpoint(s); wrote audit.json, audit.csv and {FIGURES_DIR}/ "
          f"in {Path(str(cfg.ckpt)).expanduser().resolve()}")


if __name__ == "__main__":
    main()
