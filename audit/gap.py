"""`python -m audit.gap ckpt=PATH`: the hidden-anchor audit of training checkpoints (docs/method.md §Audit).

    python -m audit.gap ckpt=outputs/selfplay/anchored/seed0/iter_2     # one iteration (+ t = 0)
    python -m audit.gap ckpt=outputs/selfplay/anchored/seed0            # t = 0..T of one seed
    python -m audit.gap ckpt=outputs/selfplay                           # every reward × seed
    python -m audit.gap ckpt=outputs/selfplay 'iterations=[-1]'         # t = 0 and the last of each run
    python -m audit.gap ckpt=... n=2 bootstrap.B=1000 logger=none        # a quick look

Recipe: plan — find and validate every checkpoint under PATH, read each run through its handle
(settings, environments, prompts, each prompt's length against its model) and the labelled rows its
gate reads (nothing is computed or written before all of them pass) → per reward × seed, per checkpoint t: the
policy with t's adapter (π_t; adapter off, π_0), then sample → judge (the run's own judge as it
stood at t) → verify (every verifier role) → KL → probe (audit.collect's stages) → rows joined by
each answer's key → the verifiers' calibration on labelled answers and the gate (audit.calibration)
→ every metric of audit.metric_table with environment-bootstrap intervals per seed and iteration,
means over seeds, oracle-dependent ones `unverified` where the gate fails → `audit.json`,
`audit.csv`, `audit_answers.jsonl` and `figures/*.png` in PATH, one wandb run per seed.

Every model sits behind `audit.cache.CachedBackend` (`audit.cache.Models`): a call is answered from
`seed<s>/audit_cache/calls-*.jsonl` when the same request was made before, and the model is loaded
on the first call that was not, so a complete rerun loads none and writes the same bytes. What each
checkpoint sampled is also written to `iter_<t>/audit_cache/answers-*.jsonl` for `audit.label`.

Settings: conf/audit.yaml, documented in `audit.config.AuditConfig` (including why the oracle
defaults to the run's own initial weights).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from judges.base import AnswerScorer
from selfplay.artifacts import AUDIT_LOCK, no_done
from selfplay.cli import hydra_main, os_error_line
from selfplay.config import ConfigError
from selfplay.envs import EnvLoadError
from selfplay.models import ModelUnavailableError

from . import calibration as C
from .cache import CacheError, Models, build_verifiers, cache_dir, write_answers
from .checkpoints import Checkpoint, CheckpointError, run_settings  # noqa: F401  (run_settings: re-export)
from .collect import (
    CHECKS,
    LABELLED,
    ORACLE,
    POLICY,
    answers_of,
    build_rows,
    judge_scores,
    kl_terms,
    labelled_answers,
    labelled_by_env,
    probe_terms,
    sample_answers,
    verdicts,
)
from .config import AuditConfigError, audit_config
from .plan import (  # noqa: F401  (re-exported for callers of audit.gap)
    AuditError,
    Plan,
    _relative,
    labelled_set,
    plan,
)
from .probe_sets import plan_probe_sets, probe_set_rows, with_probe_set
from .records import STRESS, AnswerRow, StatsSettings
from .results import FIGURES_DIR, build_results, log_wandb, write_outputs
from .summary import seed_metrics
from .view import ANSWERS_FILE, audit_answers_text, wandb_answer_table

log = logging.getLogger("audit.gap")
USAGE_ERRORS = (AuditError, AuditConfigError, CheckpointError, CacheError, ConfigError, EnvLoadError,
                ModelUnavailableError, C.LabelledError)


@dataclass
class Progress:
    checkpoint: Checkpoint | None = None  # the checkpoint being audited


def audit_checkpoint(cfg, p: Plan, ckpt: Checkpoint, models: Models) -> list[AnswerRow]:
    """Every AnswerRow of one checkpoint: sample → judge → verify → KL → probe → rows."""
    run, key = p.runs[ckpt.path], (ckpt.reward, ckpt.seed)
    envs, show = p.envs[key], cfg.progress
    by_id = {e.task_id: e for e in envs}
    policy = models.policy(run.settings, ckpt)
    judge = AnswerScorer(run.judge(ckpt.iteration, policy=lambda: policy, other=lambda name: models.other(run, name)))
    verifiers = build_verifiers(p.oracles[key], policy, models, run.dir)
    sample, prompts = p.sample[key], p.prompts[key]

    sampled = sample_answers(policy, envs, prompts, sample, show_progress=show) if sample.n else {}
    labelled = labelled_by_env(p.labelled.get(key), envs) if cfg.probe and cfg.probe_labelled else {}
    answers = [a for e in envs for a in answers_of(e, sampled.get(e.task_id, ()), labelled.get(e.task_id, ()))]
    judged = [a for a in answers if a.source != LABELLED]  # policy and stress answers
    probed = [a for a in answers if a.source != POLICY]  # stress and labelled answers

    scores = judge_scores(judge, by_id, judged, show_progress=show)
    # the checks need no model: they read every answer, the labelled ones too
    verified = {role: verdicts(v, by_id, answers if role == CHECKS else judged, desc=role, show_progress=show)
                for role, v in verifiers.items()}
    kl = (kl_terms(policy, prompts, [a for a in answers if a.source == POLICY], sample.temperature,
                   show_progress=show) if cfg.kl else None)
    probe = probe_terms(policy, prompts, probed, adapter=True, show_progress=show) if cfg.probe else None
    probe0 = probe_terms(policy, prompts, probed, adapter=False, show_progress=show) if cfg.probe else None
    # the sampled answers are kept for audit.label only once every stage has read them
    write_answers(ckpt.path, OmegaConf.to_container(run.settings.policy), sample, sampled)
    return build_rows(answers, judged=scores, verdicts=verified, kl=kl, probe=probe, probe0=probe0)


def calibration_rows(cfg, p: Plan, ckpt: Checkpoint, models: Models, labelled: Any = None) -> list[AnswerRow] | None:
    """The verifiers' verdicts on the run's labelled on-policy answers (the oracle's π_0 is the run's
    base weights, whichever checkpoint names them), or None without a labelled set."""
    key = (ckpt.reward, ckpt.seed)
    labelled = labelled if labelled is not None else p.labelled.get(key)
    if labelled is None:
        return None
    answers = labelled_answers(labelled.envs, labelled.rows)
    used = {a.task_id: labelled.envs[a.task_id] for a in answers}
    verifiers = build_verifiers(p.oracles[key], models.policy(p.runs[ckpt.path].settings, ckpt), models,
                                ckpt.path.parent)
    verified = {role: verdicts(v, used, answers, desc=f"{role} (labelled)", show_progress=cfg.progress)
                for role, v in verifiers.items()}
    return build_rows(answers, verdicts=verified)


def audit(cfg, the_plan: Plan | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Run the audit `cfg` (an AuditConfig) describes and write its outputs; returns the audit.json
    document."""
    p = the_plan or plan(cfg)
    progress = progress or Progress()
    probes = plan_probe_sets(cfg, p)  # a second held-out probe set, checked before anything is computed
    models = Models(cfg)
    stats = StatsSettings(seed=cfg.seed, B=cfg.bootstrap.B, alpha=cfg.bootstrap.alpha, max_rel_diff=cfg.length_match)
    groups: dict[tuple[str, int], list[Checkpoint]] = defaultdict(list)
    for c in p.discovery.checkpoints:
        groups[(c.reward, c.seed)].append(c)

    audits, where, experiments, calibrations, answers = {}, {}, {}, {}, {}
    for (reward, seed), ckpts in groups.items():
        key, oracles = (reward, seed), p.oracles[(reward, seed)]
        rows_by_t, probe_by_t = {}, {}
        for c in ckpts:
            progress.checkpoint = c
            rows_by_t[c.iteration] = audit_checkpoint(cfg, p, c, models)
            if key in probes:
                probe_by_t[c.iteration] = probe_set_rows(probes[key], models.policy(p.runs[c.path].settings, c),
                                                         show_progress=cfg.progress)
            where[(reward, seed, c.iteration)] = _relative(c.path, p.discovery.root)
        answers[key] = rows_by_t
        on_policy = p.gate_sets.get(key)
        labelled = calibration_rows(cfg, p, ckpts[0], models, on_policy) if on_policy else None
        experiments[key] = p.runs[ckpts[0].path].settings.train.experiment_name
        audits[key] = seed_metrics(rows_by_t, run_seed=seed, settings=stats,
                                   second_oracle=cfg.second_oracle is not None,
                                   primary_members=oracles[ORACLE].members)
        if key in probes:  # under their own names, never pooled with the audit split
            audits[key] = with_probe_set(audits[key], probe_by_t, probes[key], run_seed=seed, settings=stats)
        stress = [r for r in rows_by_t[min(rows_by_t)] if r.source == STRESS]
        roles = C.roles(stress + list(labelled or []), oracles)
        # the gate reads the on-policy set alone, per checkpoint where its own labels suffice
        calibrations[key] = C.run_calibration(
            stress, labelled, [a.get("iteration") for a in on_policy.rows] if on_policy else [],
            {t: [r for r in rows if r.source == POLICY] for t, rows in rows_by_t.items()}, roles, cfg.gate,
            on_policy.where if on_policy else "on-policy set") | {
            "oracles": {r: o.fingerprint() for r, o in oracles.items()},
            "read": dict(on_policy.read) if on_policy else {}}
    doc = build_results(cfg.fingerprint(), audits, where, experiments,
                        [_relative(s, p.discovery.root) for s in p.discovery.skipped], calibrations)
    # every answer, for audit.view, written with the audit.json it belongs to
    write_outputs(p.discovery.root, doc, {ANSWERS_FILE: audit_answers_text(answers, where)})
    if cfg.logger.kind == "wandb":
        log_wandb(cfg.logger, doc, p.discovery.root, tables=wandb_answer_table)
    return doc


@contextlib.contextmanager
def audit_lock(p: Plan):
    """Hold `.audit.lock` (pid, host, start time) in every seed dir audited, as training holds its run
    lock: a second audit of the same checkpoints is refused naming the holder, never let to append
    to the same caches. An audit may still read the finished iterations of a run still training."""
    with contextlib.ExitStack() as stack:
        for _, run in sorted({r.dir: r for r in p.runs.values()}.items()):
            stack.enter_context(run.lock(AUDIT_LOCK, "audit"))
        yield


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
    p, progress = None, Progress()
    try:
        settings = audit_config(cfg)
        p = plan(settings)
        for path in p.discovery.skipped:  # on stderr too, not only inside audit.json
            print(f"audit.gap: warning: skipped {no_done(path)}", file=sys.stderr)
        with audit_lock(p):
            return audit(settings, p, progress)
    except USAGE_ERRORS as e:
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
    hydra_main(_main, "audit.gap")


if __name__ == "__main__":
    main()
