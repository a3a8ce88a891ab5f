"""`python -m audit.gap ckpt=PATH`: the hidden-anchor audit of training checkpoints (SPEC §6).

    python -m audit.gap ckpt=outputs/selfplay/anchored/seed0/iter_2     # one iteration (+ t = 0)
    python -m audit.gap ckpt=outputs/selfplay/anchored/seed0            # t = 0..T of one seed
    python -m audit.gap ckpt=outputs/selfplay                           # every reward × seed
    python -m audit.gap ckpt=... n=2 bootstrap.B=1000 logger=none        # a quick look

Recipe: plan — find and validate every checkpoint under PATH and read each run's saved config
(nothing is computed or written before all of them pass) → per reward × seed, per checkpoint t: the
policy with t's adapter (π_t; adapter off, π_0), then sample → judge (the run's own judge as it
stood at t) → verify (every verifier role) → KL → probe (audit.collect's stages) → rows joined by
each answer's key → the verifiers' calibration on labelled answers and the gate (audit.calibration)
→ every metric of audit.metric_table with environment-bootstrap intervals per seed and iteration,
means over seeds, oracle-dependent ones `unverified` where the gate fails → `audit.json`,
`audit.csv` and `figures/*.png` in PATH, one wandb run per seed.

Every model sits behind `audit.cache.CachedBackend` (`Models`): a call is answered from
`seed<s>/audit_cache/calls-*.jsonl` when the same request was made before, and the model is loaded
on the first call that was not, so a complete rerun loads none and writes the same bytes. What each
checkpoint sampled is also written to `iter_<t>/audit_cache/answers-*.jsonl` for `audit.label`.

Settings: conf/audit.yaml, documented in `audit.config.AuditConfig` (including why the oracle
defaults to the run's own initial weights).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import hydra
from omegaconf import DictConfig, OmegaConf

from selfplay.config import ConfigError, Settings, comparable, resolve_data_path, train_settings
from selfplay.envs import EnvLoadError
from selfplay.envs.types import Environment
from selfplay.runs import load_data_split, run_judge

from . import calibration as C
from .cache import (
    ANSWERS,
    CALLS,
    CachedBackend,
    CacheError,
    JsonlCache,
    adapter_sha256,
    cache_dir,
    cached_policy,
    digest,
)
from .checkpoints import Checkpoint, CheckpointError, Discovery, find_checkpoints
from .collect import (
    CHECKS,
    LABELLED,
    ORACLE,
    ORACLE2,
    POLICY,
    SampleSettings,
    answers_of,
    build_rows,
    chunk_size,
    judge_scores,
    kl_terms,
    labelled_answers,
    probe_terms,
    sample_answers,
    verdicts,
)
from .config import AuditConfig, AuditConfigError, audit_config
from .records import STRESS, AnswerRow
from .results import build_results, dumps, to_csv, write_text_atomic
from .summary import IterationAudit, StatsSettings, seed_metrics

log = logging.getLogger("audit.gap")
FIGURES_DIR = "figures"


class AuditError(RuntimeError):
    """A problem with the input (checkpoint, data, settings): reported in one line."""


@dataclass(frozen=True)
class Plan:
    discovery: Discovery
    runs: Mapping[Path, Settings]  # the saved config of each checkpoint, validated
    envs: Mapping[tuple[str, int], tuple[Environment, ...]]  # audit split of each reward × seed
    # labelled on-policy answers of each reward × seed's data (environments by id, rows); None = none
    labelled: Mapping[tuple[str, int], Any] = None
    oracles: Mapping[tuple[str, int], Mapping[str, Any]] = None  # verifier role -> OracleConfig


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
    audit = load_data_split(settings.data, "audit")
    if max_envs is not None:
        kept = {"impossible": 0, "control": 0}
        capped = []
        for e in audit:
            if kept[e.kind] < max_envs:
                kept[e.kind] += 1
                capped.append(e)
        audit = capped
    if not audit:
        raise AuditError(f"{settings.data.path}: the audit split is empty")
    return tuple(audit)


class LabelledSet(NamedTuple):
    envs: dict[str, Environment]  # the environments of the run's data, by task id
    rows: list[dict]  # the labelled answers; a row of `python -m audit.label` has its `iteration`
    where: str  # names the on-policy set (its files) in the gate's reasons


def labelled_set(settings: Settings, ckpt: Checkpoint | None = None) -> LabelledSet | None:
    """The run's on-policy set: the data set's labelled answers (labelled_answers.jsonl, mini) and
    the labels `python -m audit.label` made for the run of `ckpt` (audit.label.run_labels), with the
    environments they belong to; None when there are none."""
    from .label import run_labels

    files, rows = [], []
    path = C.labelled_path(resolve_data_path(settings.data.path))
    if path is not None:
        files.append(f"{settings.data.path}/{path.name}")
        rows += C.read_labelled(path)
    if ckpt is not None:
        found, labels = run_labels(ckpt.path.parent)
        files += [_relative(f, ckpt.path.parent.parent.parent) for f in found]
        rows += labels
    if not rows:
        return None
    envs = {e.task_id: e for e in load_data_split(settings.data, "all")}
    unknown = sorted({r["task_id"] for r in rows} - set(envs))
    if unknown:
        raise AuditError(f"{', '.join(files)}: task_id {unknown[0]!r} is not an environment of {settings.data.path}")
    return LabelledSet(envs, rows, f"on-policy set ({', '.join(files)})")


def plan(cfg: AuditConfig) -> Plan:
    from selfplay.models.config import PolicyConfig

    discovery = find_checkpoints(cfg.ckpt)
    runs = {c.path: run_settings(c) for c in discovery.checkpoints}
    check_one_experiment(cfg, discovery)
    envs: dict[tuple[str, int], tuple[Environment, ...]] = {}
    labelled: dict[tuple[str, int], Any] = {}
    oracles: dict[tuple[str, int], dict[str, Any]] = {}
    for c in discovery.checkpoints:
        if (c.reward, c.seed) not in envs:
            try:
                envs[(c.reward, c.seed)] = audit_envs(runs[c.path], cfg.max_envs)
                labelled[(c.reward, c.seed)] = labelled_set(runs[c.path], c) if cfg.labelled else None
            except (EnvLoadError, FileNotFoundError, ValueError) as e:
                raise AuditError(f"{c.path}: cannot load the run's audit environments: {e}") from None
            oracles[(c.reward, c.seed)] = oracle_configs(cfg, envs[(c.reward, c.seed)])
    for roles in oracles.values():
        for o in roles.values():
            if o.uses_llm and o.model not in ("initial", "endpoint"):
                try:
                    PolicyConfig.named(o.model)
                except ValueError as e:
                    raise AuditConfigError(f"oracle model: {e}") from None
            if o.uses_llm and o.model == "endpoint":
                check_api_key(o.endpoint)
    check_prompt_lengths(cfg, discovery, runs, envs)
    return Plan(discovery, runs, envs, labelled, oracles)


def _sweep_settings(config: Mapping[str, Any], with_reward: bool) -> dict[str, Any]:
    """What the runs one audit compares must share: the run config but its seed (and its reward,
    between rewards) and what a resumed run may change (selfplay.config.comparable)."""
    drop = {"seed"} | (set() if with_reward else {"reward"})
    return {k: v for k, v in comparable(dict(config)).items() if k not in drop}


def check_one_experiment(cfg: AuditConfig, discovery: Discovery) -> None:
    """One audit averages seeds and compares rewards: a tree holding runs of different experiments
    or settings (k, max_new_tokens, data, experiment_name, ...) is refused, never averaged."""
    from selfplay.artifacts import config_differences

    first: dict[str, Checkpoint] = {}
    for c in discovery.checkpoints:
        for ref in dict.fromkeys([first.setdefault(c.reward, c), discovery.checkpoints[0]]):
            same = ref.reward == c.reward
            diffs = config_differences(_sweep_settings(ref.config, same), _sweep_settings(c.config, same))
            if diffs:
                a, b = ref.path.parent, c.path.parent
                apart = (a, b) if same else (a.parent, b.parent)
                more = f" and {len(diffs) - 3} more" if len(diffs) > 3 else ""
                raise AuditError(
                    f"ckpt={cfg.ckpt}: {a} and {b} are runs of different experiments or settings "
                    f"({'; '.join(diffs[:3])}{more}), which one audit would average into one figure; "
                    f"nothing was written; audit them apart: python -m audit.gap ckpt={apart[0]}, then "
                    f"ckpt={apart[1]}")


def check_api_key(endpoint: Any) -> None:
    """An endpoint oracle's key variable must be set before anything is computed (it is read when
    the oracle is first built, after answers and judge scores are cached)."""
    import os

    name = endpoint.api_key_env
    if name is not None and not os.environ.get(name):
        raise AuditConfigError(f"oracle.endpoint.api_key_env={name}: the environment variable {name} is not "
                               f"set; export {name}=<the API key>, or set oracle.endpoint.api_key_env=null "
                               "for a server that needs no key")


def check_prompt_lengths(cfg: AuditConfig, discovery: Discovery, runs: Mapping[Path, Settings],
                         envs: Mapping[tuple[str, int], Sequence[Environment]]) -> None:
    """Each audit environment's policy prompt plus the answer budget must fit the policy's context
    (as selfplay.train.check_prompt_lengths does for training): found here, naming the task, not by
    the sampler in the middle of the audit. Loads each policy's tokenizer, no weights."""
    from selfplay.envs.prompt import policy_messages
    from selfplay.models.chat import render
    from selfplay.models.config import PolicyConfig
    from selfplay.models.loading import load_tokenizer

    tokenizers: dict[str, Any] = {}
    checked = set()
    for c in discovery.checkpoints:
        settings = runs[c.path]
        policy = PolicyConfig.from_mapping(settings.policy)
        budget = sample_settings(cfg, settings).max_new_tokens
        key = json.dumps(OmegaConf.to_container(settings.policy), sort_keys=True, default=str)
        if (key, budget, c.reward, c.seed) in checked:
            continue
        checked.add((key, budget, c.reward, c.seed))
        if key not in tokenizers:
            tokenizers[key] = load_tokenizer(policy)
        tok = tokenizers[key]
        run_envs = list(envs[(c.reward, c.seed)])
        prompts = [render(tok, policy, policy_messages(e.public)) for e in run_envs]
        for e, ids in zip(run_envs, tok(prompts, add_special_tokens=False)["input_ids"], strict=True):
            if len(ids) + budget > policy.max_context:
                raise AuditError(
                    f"{e.source}: task {e.task_id}: its audit prompt is {len(ids)} tokens + max_new_tokens="
                    f"{budget} > max_context {policy.max_context} of policy {policy.name} (run {c.path.parent}); "
                    "nothing was written; shorten the record's evidence or lower max_new_tokens")


def oracle_configs(cfg: AuditConfig, envs: Sequence[Environment]) -> dict[str, Any]:
    """Verifier role -> judges.verifiers.OracleConfig: the primary oracle (the `oracle` group, or
    the data's default), the second LLM oracle when configured, and the public-view checks (the
    second verifier of the judge × checks IBE)."""
    from judges.verifiers import OracleConfig, default_oracle_name

    primary = (OracleConfig.named(default_oracle_name(envs)) if cfg.oracle is None
               else OracleConfig.from_mapping(cfg.oracle))
    roles = {ORACLE: primary}
    if cfg.second_oracle is not None:
        roles[ORACLE2] = OracleConfig(name="llm", verifiers=(), model=cfg.second_oracle,
                                      min_mass=primary.min_mass)
    roles[CHECKS] = OracleConfig(name="checks", verifiers=())
    return roles


# -- models ----------------------------------------------------------------------------------------

class Models:
    """The audit's model backends. Every model is reached through an `audit.cache.CachedBackend` whose
    file sits in the run's seed directory; a model is loaded on the first call its cache cannot
    answer, once per (policy config, LoRA shape), and a checkpoint's adapter is loaded into it then."""

    def __init__(self, cfg: AuditConfig):
        self.cfg = cfg
        self._loaded: dict[str, Any] = {}  # policy + LoRA shape -> the hf backend
        self._adapter: dict[str, Path | None] = {}  # ... -> the adapter it holds now
        self._files: dict[Path, Any] = {}  # one JsonlCache per cache file
        self._tokenizers: dict[str, Any] = {}
        self._endpoints: dict[str, Any] = {}  # endpoint fingerprint digest -> its client

    def _backend(self, policy: Mapping[str, Any], lora: Mapping[str, Any] | None, adapter: Path | None):
        from selfplay.models import load_backend

        key = json.dumps([dict(policy), dict(lora or {})], sort_keys=True, default=str)
        if key not in self._loaded:
            log.info("audit: loading %s", policy.get("name"))
            # hf: the audit swaps one adapter per checkpoint into the same weights
            self._loaded[key] = load_backend(dict(policy), backend="hf", lora=lora, device=self.cfg.device,
                                             batch_size=self.cfg.batch_size, progress=self.cfg.progress)
            self._adapter[key] = None
        backend = self._loaded[key]
        if adapter is not None and self._adapter[key] != adapter:
            backend.load_adapter(adapter)
            self._adapter[key] = adapter
        return backend

    def _cache(self, seed_dir: Path, identity: Mapping[str, Any]):
        path = cache_dir(seed_dir) / f"{CALLS}-{digest(identity, 16)}.jsonl"
        if path not in self._files:
            self._files[path] = JsonlCache(path)
        return self._files[path]

    def _cached(self, policy: Mapping[str, Any], seed_dir: Path, adapter_id: str | None, load) -> CachedBackend:
        from selfplay.models.config import PolicyConfig
        from selfplay.models.loading import load_tokenizer

        name = json.dumps(dict(policy), sort_keys=True, default=str)
        if name not in self._tokenizers:
            self._tokenizers[name] = load_tokenizer(PolicyConfig.from_mapping(policy))
        return cached_policy(policy, cache_dir(seed_dir), load, adapter_id=adapter_id, files=self._files,
                             tokenizer=self._tokenizers[name])

    def policy(self, settings: Settings, ckpt: Checkpoint) -> CachedBackend:
        """The run's policy at checkpoint `ckpt`: adapter on = π_t, off = π_0. A no-op adapter (iter_0)
        is run as π_0 itself: its calls are π_0's, computed once (its KL and probe are exactly 0)."""
        policy = OmegaConf.to_container(settings.policy)
        adapter_id = None if ckpt.adapter_is_noop else adapter_sha256(ckpt.path)
        return self._cached(policy, ckpt.path.parent, adapter_id,
                            lambda: self._backend(policy, settings.train.lora, ckpt.adapter_path))

    def named(self, name: str, seed_dir: Path) -> CachedBackend:
        """A `conf/policy` model by name, base weights only (a judge's or an oracle's own model)."""
        from selfplay.models.config import PolicyConfig

        policy = dataclasses.asdict(PolicyConfig.named(name))
        return self._cached(policy, seed_dir, None, lambda: self._backend(policy, None, None))

    def endpoint(self, endpoint: Any, seed_dir: Path) -> CachedBackend:
        """An OpenAI-compatible server (an oracle's `endpoint` settings), built now: building it sends
        no request (the key's variable was checked when the audit was planned). Its prompts key
        themselves and its candidate tokens by their label text."""
        from judges.oracle import endpoint_backend

        identity = {"endpoint": endpoint.fingerprint()}
        key = digest(identity)
        if key not in self._endpoints:  # one client per server for the whole audit, as for the models
            self._endpoints[key] = endpoint_backend(endpoint)
        backend = self._endpoints[key]
        tok = backend.tokenizer
        return CachedBackend(name=backend.name, tokenizer=tok, render=backend.render, identity=identity,
                             adapter_id=None, cache=self._cache(seed_dir, identity), load=lambda: backend,
                             prompt_ids=lambda p: p, token_key=lambda i: tok.decode([i]))


def build_verifiers(oracles: Mapping[str, Any], policy: CachedBackend, models: Models, seed_dir: Path) -> dict[str, Any]:
    """Every verifier role's verifier; "initial" is the run's π_0 (the policy, adapter off)."""
    from judges.verifiers import build_verifier

    def backend_for(o: Any):
        def get(model: str):
            if model == "endpoint":
                return models.endpoint(o.endpoint, seed_dir)
            return policy if model == "initial" else models.named(model, seed_dir)
        return get

    return {role: build_verifier(o, backend_for=backend_for(o)) for role, o in oracles.items()}


def sample_settings(cfg: AuditConfig, settings: Settings) -> SampleSettings:
    return SampleSettings(
        n=cfg.n, seed=cfg.seed, chunk=chunk_size(cfg.batch_size, cfg.n),
        temperature=cfg.temperature if cfg.temperature is not None else settings.train.temperature,
        max_new_tokens=cfg.max_new_tokens if cfg.max_new_tokens is not None else settings.train.max_new_tokens,
    )


def labelled_by_env(labelled: LabelledSet | None, envs: Sequence[Environment]) -> dict[str, list[dict]]:
    """The labelled on-policy answers of the audited environments, by task id (the probe scores them)."""
    if labelled is None:
        return {}
    ids = {e.task_id for e in envs}
    out: dict[str, list[dict]] = {}
    for a in labelled.rows:
        if a["task_id"] in ids:
            out.setdefault(a["task_id"], []).append(a)
    return out


def write_answers(ckpt: Checkpoint, policy: Mapping[str, Any], sample: SampleSettings,
                  answers: Mapping[str, Sequence[Any]]) -> None:
    """The answers sampled at `ckpt`, one row per environment, for `python -m audit.label`, merged
    into what earlier audits with the same settings wrote there (an audit of fewer environments
    keeps the others' rows, which labels may point at)."""
    if not answers:
        return
    path = cache_dir(ckpt.path) / f"{ANSWERS}-{digest({'policy': dict(policy), 'sample': vars(sample)}, 12)}.jsonl"
    rows = dict(JsonlCache(path).rows)
    rows.update({tid: {"key": tid, "task_id": tid, "answers": [str(t) for t in texts],
                       "finished": [bool(getattr(t, "finished", True)) for t in texts]}
                 for tid, texts in answers.items()})
    path.parent.mkdir(exist_ok=True)
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows.values()))


# -- the audit --------------------------------------------------------------------------------------

def audit_checkpoint(cfg: AuditConfig, p: Plan, ckpt: Checkpoint, models: Models) -> list[AnswerRow]:
    """Every AnswerRow of one checkpoint: sample → judge → verify → KL → probe → rows."""
    settings, run = p.runs[ckpt.path], (ckpt.reward, ckpt.seed)
    envs = p.envs[run]
    by_id = {e.task_id: e for e in envs}
    show = cfg.progress
    policy = models.policy(settings, ckpt)
    sample = sample_settings(cfg, settings)

    sampled = sample_answers(policy, envs, sample, show_progress=show) if sample.n else {}
    write_answers(ckpt, OmegaConf.to_container(settings.policy), sample, sampled)
    labelled = labelled_by_env(p.labelled.get(run), envs) if cfg.probe and cfg.probe_labelled else {}
    answers = [a for e in envs for a in answers_of(e, sampled.get(e.task_id, ()), labelled.get(e.task_id, ()))]
    judged = [a for a in answers if a.source != LABELLED]  # policy and stress answers
    policy_answers = [a for a in answers if a.source == POLICY]
    probed = [a for a in answers if a.source != POLICY]  # stress and labelled answers

    judge = run_judge(settings.reward, settings.judge.model, policy=lambda: policy,
                      other=lambda name: models.named(name, ckpt.path.parent), seed=ckpt.seed, iteration=ckpt.iteration)
    scores = judge_scores(judge, by_id, judged, show_progress=show)
    verifiers = build_verifiers(p.oracles[run], policy, models, ckpt.path.parent)
    verified = {role: verdicts(v, by_id, judged, desc=role, show_progress=show) for role, v in verifiers.items()}
    kl = kl_terms(policy, by_id, policy_answers, sample.temperature, show_progress=show) if cfg.kl else None
    probe = probe0 = None
    if cfg.probe:
        probe = probe_terms(policy, by_id, probed, adapter=True, show_progress=show)
        probe0 = probe_terms(policy, by_id, probed, adapter=False, show_progress=show)
    return build_rows(by_id, answers, judged=scores, verdicts=verified, kl=kl,
                      probe=probe, probe0=probe0)


def calibration_rows(cfg: AuditConfig, p: Plan, ckpt: Checkpoint, models: Models) -> list[AnswerRow] | None:
    """The verifiers' verdicts on the run's labelled on-policy answers (the oracle's π_0 is the run's
    base weights, whichever checkpoint names them), or None without a labelled set."""
    run = (ckpt.reward, ckpt.seed)
    labelled = p.labelled.get(run)
    if labelled is None:
        return None
    answers = labelled_answers(labelled.envs, labelled.rows)
    used = {a.task_id: labelled.envs[a.task_id] for a in answers}
    policy = models.policy(p.runs[ckpt.path], ckpt)
    verifiers = build_verifiers(p.oracles[run], policy, models, ckpt.path.parent)
    verified = {role: verdicts(v, used, answers, desc=f"{role} (labelled)", show_progress=cfg.progress)
                for role, v in verifiers.items()}
    return build_rows(used, answers, verdicts=verified)


@dataclass
class Progress:
    checkpoint: Checkpoint | None = None  # the checkpoint being audited


def audit(cfg: AuditConfig, the_plan: Plan | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Run the audit `cfg` describes and write its outputs; returns the audit.json document."""
    p = the_plan or plan(cfg)
    progress = progress or Progress()
    models = Models(cfg)
    stats = StatsSettings(seed=cfg.seed, B=cfg.bootstrap.B, alpha=cfg.bootstrap.alpha, max_rel_diff=cfg.length_match)
    groups: dict[tuple[str, int], list[Checkpoint]] = defaultdict(list)
    for c in p.discovery.checkpoints:
        groups[(c.reward, c.seed)].append(c)

    audits: dict[tuple[str, int], dict[int, IterationAudit]] = {}
    where: dict[tuple[str, int, int], str] = {}
    experiments: dict[tuple[str, int], str] = {}
    calibrations: dict[tuple[str, int], dict[str, Any]] = {}
    for (reward, seed), ckpts in groups.items():
        run, oracles = (reward, seed), p.oracles[(reward, seed)]
        rows_by_t = {}
        for c in ckpts:
            progress.checkpoint = c
            rows_by_t[c.iteration] = audit_checkpoint(cfg, p, c, models)
        labelled = calibration_rows(cfg, p, ckpts[0], models)
        for ckpt in ckpts:
            where[(reward, seed, ckpt.iteration)] = _relative(ckpt.path, p.discovery.root)
        experiments[run] = p.runs[ckpts[0].path].train.experiment_name
        audits[run] = seed_metrics(rows_by_t, run_seed=seed, settings=stats,
                                   second_oracle=cfg.second_oracle is not None,
                                   primary_members=oracles[ORACLE].members)
        stress = [r for r in rows_by_t[min(rows_by_t)] if r.source == STRESS]
        roles = C.roles(stress + list(labelled or []), oracles)
        # the gate reads the on-policy set alone, per checkpoint where its own labels suffice
        on_policy = p.labelled.get(run)
        calibrations[run] = C.run_calibration(
            stress, labelled, [a.get("iteration") for a in on_policy.rows] if on_policy else [],
            {t: [r for r in rows if r.source == POLICY] for t, rows in rows_by_t.items()}, roles, cfg.gate,
            on_policy.where if on_policy else "on-policy set") | {
            "oracles": {r: o.fingerprint() for r, o in oracles.items()}}
    doc = build_results(cfg.fingerprint(), audits, where, experiments,
                        [_relative(s, p.discovery.root) for s in p.discovery.skipped], calibrations)
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
            ModelUnavailableError, C.LabelledError)


@contextlib.contextmanager
def audit_lock(discovery: Discovery):
    """Hold `.audit.lock` (pid, host, start time) in every seed dir audited, as training holds its run
    lock: a second audit of the same checkpoints is refused naming the holder, never let to append
    to the same caches. An audit may still read the finished iterations of a run still training."""
    from selfplay.artifacts import AUDIT_LOCK, run_lock

    with contextlib.ExitStack() as stack:
        for seed_dir in sorted({c.path.parent for c in discovery.checkpoints}):
            stack.enter_context(run_lock(seed_dir, AUDIT_LOCK, "audit"))
        yield


def warn_skipped(discovery: Discovery) -> None:
    """Each iteration dir the audit leaves out (no DONE), on stderr: not only inside audit.json."""
    from selfplay.artifacts import no_done

    for path in discovery.skipped:
        print(f"audit.gap: warning: skipped {no_done(path)}", file=sys.stderr)


def interrupted(p: Plan | None, at: Checkpoint | None) -> str:
    """Where a Ctrl-C stopped the audit: the checkpoint it was auditing (every model call made so far
    is kept in the run's cache), and that the same command resumes."""
    if p is None:
        return "audit.gap: interrupted (Ctrl-C) before the audit started; nothing was written"
    where = (f"while auditing {at.path} (every model call made so far is kept in "
             f"{cache_dir(at.path.parent)}/)" if at is not None else "before any checkpoint was audited")
    return f"audit.gap: interrupted (Ctrl-C) {where}; rerun the same command to resume"


def main_cli(cfg: DictConfig) -> dict[str, Any]:
    """Validate, plan and run; usage errors become one line on stderr and exit status 1 (a Ctrl-C:
    one line saying where it stopped, status 130)."""
    from selfplay.cli import os_error_line

    p, progress = None, Progress()
    try:
        settings = audit_config(cfg)
        p = plan(settings)
        warn_skipped(p.discovery)
        with audit_lock(p.discovery):
            return audit(settings, p, progress)
    except _usage_errors() as e:
        raise SystemExit(f"audit.gap: error: {e}") from None
    except KeyboardInterrupt:
        print(interrupted(p, progress.checkpoint), file=sys.stderr)
        raise SystemExit(130) from None
    except OSError as e:  # a read-only file system, a full disk: the path and what to do
        raise SystemExit(f"audit.gap: error: {os_error_line(e)}") from None


@hydra.main(config_path="../conf", config_name="audit", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    doc = main_cli(cfg)
    n = sum(len(s["iterations"]) for e in doc["rewards"].values() for s in e["seeds"].values())
    print(f"audited {n} checkpoint(s); wrote audit.json, audit.csv and {FIGURES_DIR}/ "
          f"in {Path(str(cfg.ckpt)).expanduser().resolve()}")


def main() -> None:
    """`python -m audit.gap`: Hydra's own errors (a bad group value, a key typo) in one line too."""
    from selfplay.cli import hydra_main

    hydra_main(_main, "audit.gap")


if __name__ == "__main__":
    main()
