"""One checkpoint's audit records: policy answers, the run's judge, the oracles and the checks.

For each audit environment e (SPEC §6):
1. n answers from the policy of that iteration (the run's own policy prompt, adapter on);
2. the run's judge at that iteration scores every policy answer, every fixed stress answer and the
   reference answer r(e) itself, so A = 1[s(a) ≥ s(r(e))] compares like with like;
3. the LLM oracle (and a second one when configured) verifies each policy answer against the hidden
   anchor, and each stress answer too (against the release labels that measures the oracle itself,
   and it gives the IBE of judge × second oracle on stress answers); the deterministic checks run
   on policy and stress answers.

Every model call goes through a `JsonlCache` in the checkpoint's `audit_cache/` (file names carry a
hash of the settings that determine them, see `CacheNames`), one environment at a time, so an
interrupted audit resumes where it stopped and a rerun computes nothing it already has. Judge and
oracle rows are keyed by the answer text (and r(e)), so changing n only adds what is new.

Sampling is seeded per environment (`env_seed`): the answers of e do not depend on which other
environments were generated in the same call, which is what makes a partially cached rerun give the
same answers as a fresh one.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tqdm.auto import tqdm

from judges.base import Judge, JudgeItem
from judges.checks import CheckResult, run_checks
from selfplay.envs.prompt import policy_messages
from selfplay.envs.types import Environment, PublicView
from selfplay.models.backend import Backend

from .records import POLICY, STRESS, AnswerRow, JsonlCache, text_key


class Oracle(Protocol):
    def verify(self, pairs: Sequence[tuple[Environment, str]]) -> list:
        """One verdict per (environment, answer) with `.violates` (bool | None), `.p_violates`, `.error`."""


@dataclass(frozen=True)
class SampleSettings:
    n: int  # answers per environment
    temperature: float
    max_new_tokens: int
    seed: int

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"n must be >= 1; got {self.n}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0; got {self.temperature}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}")


@dataclass(frozen=True)
class CacheNames:
    """File names inside `audit_cache/`; each carries the hash of what determines its rows."""

    answers: str  # e.g. answers-<hash(policy prompt, n, temperature, max_new_tokens, seed)>.jsonl
    judge: str  # judge-<hash(reward config, judge.model, identity)>.jsonl
    oracle: str  # oracle-<hash(oracle model)>.jsonl
    oracle2: str | None = None


@dataclass(frozen=True)
class Verifiers:
    judge: Judge
    oracle: Oracle
    oracle2: Oracle | None = None
    checks: Callable[[PublicView, str], CheckResult] = run_checks


def env_seed(seed: int, task_id: str) -> int:
    """The sampling seed of one environment: fixed by the audit seed and the task id alone."""
    return (seed * 1_000_003 + zlib.crc32(task_id.encode())) % (2**31 - 1)


def _bar(total: int, desc: str, show: bool):
    return tqdm(total=total, desc=desc, disable=not show, leave=False)


def sample_answers(envs: Sequence[Environment], policy: Backend, settings: SampleSettings,
                   cache: JsonlCache, *, show_progress: bool = True) -> dict[str, list[str]]:
    """n policy answers per environment (cached), keyed by task_id."""
    by_id = {e.task_id: e for e in envs}

    def compute(task_id: str, keys: list[str]) -> list[dict]:
        prompt = policy.render(policy_messages(by_id[task_id].public))
        texts = policy.sample([prompt], n=settings.n, temperature=settings.temperature,
                              max_new_tokens=settings.max_new_tokens,
                              seed=env_seed(settings.seed, task_id), adapter=True)[0]
        return [{"key": task_id, "task_id": task_id, "answers": list(texts)}]

    with _bar(len(envs), "audit: generate", show_progress) as bar:
        rows = cache.fill({e.task_id: [e.task_id] for e in envs}, compute, bar.update)
    return {tid: list(row["answers"]) for tid, row in rows.items()}


def judge_scores(envs: Sequence[Environment], answers: dict[str, list[str]], judge: Judge,
                 cache: JsonlCache, *, show_progress: bool = True) -> dict[str, dict]:
    """The judge's verdict on every policy answer, stress answer and r(e), keyed by `text_key`."""
    texts = {e.task_id: _judged_texts(e, answers[e.task_id]) for e in envs}
    by_id = {e.task_id: e for e in envs}
    keyed = {tid: {text_key(tid, t, by_id[tid].reference_answer): t for t in ts} for tid, ts in texts.items()}

    def compute(task_id: str, keys: list[str]) -> list[dict]:
        env = by_id[task_id]
        items = [JudgeItem(env.public, keyed[task_id][k], env.reference_answer) for k in keys]
        verdicts = judge.score(items)
        return [{"key": k, "task_id": task_id, "score": v.score, "error": v.error,
                 "swap_consistent": v.swap_consistent, "artifact": v.artifact}
                for k, v in zip(keys, verdicts, strict=True)]

    with _bar(len(envs), "audit: judge", show_progress) as bar:
        return cache.fill({tid: list(ks) for tid, ks in keyed.items()}, compute, bar.update)


def oracle_verdicts(envs: Sequence[Environment], answers: dict[str, list[str]], oracle: Oracle,
                    cache: JsonlCache, *, desc: str = "audit: oracle",
                    show_progress: bool = True) -> dict[str, dict]:
    """The oracle's verdict on every policy and stress answer, keyed by text_key(task_id, answer)."""
    by_id = {e.task_id: e for e in envs}
    keyed = {e.task_id: {text_key(e.task_id, a): a for a in _verified_texts(e, answers[e.task_id])}
             for e in envs}

    def compute(task_id: str, keys: list[str]) -> list[dict]:
        verdicts = oracle.verify([(by_id[task_id], keyed[task_id][k]) for k in keys])
        return [{"key": k, "task_id": task_id, "violates": v.violates, "p_violates": v.p_violates,
                 "error": v.error} for k, v in zip(keys, verdicts, strict=True)]

    with _bar(len(envs), desc, show_progress) as bar:
        return cache.fill({tid: list(ks) for tid, ks in keyed.items()}, compute, bar.update)


def _judged_texts(env: Environment, answers: list[str]) -> list[str]:
    return [env.reference_answer] + [s.text for s in env.stress_answers] + list(answers)


def _verified_texts(env: Environment, answers: list[str]) -> list[str]:
    return [s.text for s in env.stress_answers] + list(answers)


def _accept(row: dict | None) -> bool | None:
    return None if row is None or row["violates"] is None else not row["violates"]


def _label(violates: bool | None) -> str | None:
    return None if violates is None else ("invalid" if violates else "valid")


def build_rows(envs: Sequence[Environment], answers: dict[str, list[str]], judged: dict[str, dict],
               oracle: dict[str, dict], oracle2: dict[str, dict] | None,
               checks: Callable[[PublicView, str], CheckResult] = run_checks) -> list[AnswerRow]:
    """Join the cached stages into one `AnswerRow` per policy and stress answer (pure)."""
    rows = []
    for env in envs:
        tid, ref = env.task_id, env.reference_answer
        ref_score = judged[text_key(tid, ref, ref)]["score"]
        for j, text in enumerate(answers[tid]):
            key = text_key(tid, text)
            rows.append(AnswerRow(
                task_id=tid, kind=env.kind, source=POLICY, answer_id=f"p{j}", text=text,
                score=judged[text_key(tid, text, ref)]["score"], ref_score=ref_score,
                label=_label(oracle[key]["violates"]),
                checks_accept=not checks(env.public, text).violates,
                oracle2_accept=None if oracle2 is None else _accept(oracle2[key]),
                oracle_accept=_accept(oracle[key]),
            ))
        for s in env.stress_answers:
            key = text_key(tid, s.text)
            rows.append(AnswerRow(
                task_id=tid, kind=env.kind, source=STRESS, answer_id=s.answer_id, text=s.text,
                score=judged[text_key(tid, s.text, ref)]["score"], ref_score=ref_score,
                label=s.validity, checks_accept=not checks(env.public, s.text).violates,
                oracle2_accept=None if oracle2 is None else _accept(oracle2[key]),
                is_reference=s.answer_id == env.reference.answer_id,
                oracle_accept=_accept(oracle[key]),
            ))
    return rows


def cached_rows(envs: Sequence[Environment], cache_dir: Path, names: CacheNames,
                checks: Callable[[PublicView, str], CheckResult] = run_checks) -> list[AnswerRow] | None:
    """The checkpoint's rows when every stage is already cached (no model needed), else None."""
    answers_cache = JsonlCache(cache_dir / names.answers)
    if answers_cache.missing(e.task_id for e in envs):
        return None
    answers = {e.task_id: list(answers_cache.rows[e.task_id]["answers"]) for e in envs}
    judged = JsonlCache(cache_dir / names.judge)
    if judged.missing(text_key(e.task_id, t, e.reference_answer)
                      for e in envs for t in _judged_texts(e, answers[e.task_id])):
        return None
    verdicts = []
    for name in (names.oracle, names.oracle2):
        if name is None:
            verdicts.append(None)
            continue
        cache = JsonlCache(cache_dir / name)
        if cache.missing(text_key(e.task_id, a) for e in envs for a in _verified_texts(e, answers[e.task_id])):
            return None
        verdicts.append(cache.rows)
    return build_rows(envs, answers, judged.rows, verdicts[0], verdicts[1], checks)


def collect_checkpoint(envs: Sequence[Environment], policy: Backend, verifiers: Verifiers,
                       settings: SampleSettings, cache_dir: Path, names: CacheNames, *,
                       show_progress: bool = True) -> list[AnswerRow]:
    """Everything the metrics need for one checkpoint, computing only what `cache_dir` lacks."""
    answers = sample_answers(envs, policy, settings, JsonlCache(cache_dir / names.answers),
                             show_progress=show_progress)
    judged = judge_scores(envs, answers, verifiers.judge, JsonlCache(cache_dir / names.judge),
                          show_progress=show_progress)
    oracle = oracle_verdicts(envs, answers, verifiers.oracle, JsonlCache(cache_dir / names.oracle),
                             show_progress=show_progress)
    oracle2 = None
    if verifiers.oracle2 is not None:
        if names.oracle2 is None:
            raise ValueError("a second oracle needs CacheNames.oracle2")
        oracle2 = oracle_verdicts(envs, answers, verifiers.oracle2, JsonlCache(cache_dir / names.oracle2),
                                  desc="audit: oracle2", show_progress=show_progress)
    return build_rows(envs, answers, judged, oracle, oracle2, verifiers.checks)
