"""The audit's stages for one checkpoint: answers → judge scores → verifier verdicts → KL → probe → rows.

For each audit environment e (docs/method.md §Audit):
1. `sample_answers`: n answers from the policy of that iteration (the run's own policy prompt, adapter on);
2. `judge_scores`: the run's judge at that iteration scores every policy answer, every fixed stress
   answer and the reference answer r(e) itself, so A = 1[s(a) ≥ s(r(e))] compares like with like;
3. `verdicts`: each verifier (the primary oracle, a second one when configured, the deterministic
   checks) gives its verdict on every policy answer and every stress answer (against the release
   labels that measures the verifier itself, see audit.calibration);
4. `kl_terms`: log π_t(a) − log π_0(a) of every policy answer, scored on the token ids that were
   sampled (the end-of-turn token included when the answer ended on it), both at the sampling
   temperature, and its token count, from which the audit estimates KL(π_t ‖ π_0) on its own samples;
5. `probe_terms`: log π(a|x) at τ = 1 of every labelled answer of the environment (its fixed stress
   answers, then the labelled on-policy answers of it, if any) rendered as the policy's own turn,
   end-of-turn included, with the adapter on (π_t) or off (π_0);
6. `build_rows` joins them by each answer's key into one `AnswerRow` per answer.

Every stage calls models through the backends it is given; in the audit those are
`audit.cache.CachedBackend`s, so a stage is simply rerun and only the model calls it makes are
replayed (or made, on a miss).

Sampling runs several environments per generate call (`SampleSettings.chunk`, `chunk_size`): the
backend batches rows of several prompts. The answers of an environment then depend on the other
prompts of its call, so the chunks are fixed by the order of the audited environments and the chunk
size alone, and each is seeded by the audit seed and its task ids (`env_seed`).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tqdm.auto import tqdm

from selfplay.envs.types import Environment
from selfplay.runs import Prompts

# the verifier roles are imported from here by the audit
from .records import CHECKS, LABELLED, ORACLE, ORACLE2, POLICY, STRESS, AnswerRow, member  # noqa: F401


class Model(Protocol):
    """What a stage asks of a model (`audit.cache.CachedBackend` in the audit): the stages see
    rendered prompts only, so they need no chat template and no environment's messages."""

    name: str
    tokenizer: Any

    def sample(self, prompts: Sequence[str], *, n: int, temperature: float, max_new_tokens: int, seed: int,
               adapter: bool = True) -> list[list[Any]]: ...

    def sequence_logprobs(self, prompts: Sequence[str], completions: Sequence[str | Sequence[int]], *,
                          adapter: bool = True, temperature: float = 1.0) -> list[float]: ...


class Scorer(Protocol):
    """A judge that scores answers to one environment (`judges.base.AnswerScorer`)."""

    def score(self, env: Environment, answers: Sequence[str]) -> list[Any]: ...


class Verifier(Protocol):
    def verify(self, items: Sequence[tuple[Environment, str]]) -> list[Any]: ...


@dataclass(frozen=True)
class SampleSettings:
    n: int
    temperature: float
    max_new_tokens: int
    seed: int
    chunk: int = 1  # environments per generate call (`chunk_size`); part of what the answers are

    def __post_init__(self):
        if self.n < 0:
            raise ValueError(f"n must be >= 0; got {self.n}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0; got {self.temperature}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}")
        if self.chunk < 1:
            raise ValueError(f"chunk must be >= 1; got {self.chunk}")


def chunk_size(batch_size: int, n: int) -> int:
    """Environments per `policy.sample` call: the HF backend generates `batch_size // n` prompts (n
    rows each) per batch, so a chunk of that many fills one batch (n = 4, batch_size = 32 → 8)."""
    return max(1, batch_size // max(n, 1))


def env_seed(seed: int, task_ids: str) -> int:
    """The sampling seed of one generate call: fixed by the audit seed and the task ids it samples
    (newline-joined, in order) alone. Several environments share a call, so the seed names the whole
    chunk; a chunk of one environment is seeded by its task id alone."""
    return (seed * 1_000_003 + zlib.crc32(task_ids.encode())) % (2**31 - 1)


@dataclass(frozen=True)
class Answer:
    """One answer the audit reads at a checkpoint: a policy sample, a fixed stress answer, or a
    labelled on-policy answer; the stages' results are keyed by it."""

    task_id: str
    kind: str
    source: str  # POLICY | STRESS | LABELLED
    answer_id: str
    text: str
    label: str | None = None  # stress and labelled answers: the human label
    is_reference: bool = False
    token_ids: tuple[int, ...] = ()  # policy answers: the sampled ids (end-of-turn included if it ended)

    @property
    def key(self) -> str:
        return f"{self.task_id}/{self.source}/{self.answer_id}"


@dataclass(frozen=True)
class Judged:
    """The judge stage: its verdict (`judges.base.Verdict`) on r(e) by task id, and on each answer."""

    reference: Mapping[str, Any]
    answers: Mapping[Answer, Any]


@dataclass(frozen=True)
class LogProbs:
    """One answer's log-probability under π_t (`logp`) and π_0 (`logp0`, the KL stage only) and its
    token count."""

    logp: float
    tokens: int
    logp0: float | None = None


def _bar(total: int, desc: str, show: bool):
    return tqdm(total=total, desc=desc, disable=not show, leave=False)


# -- the stages -------------------------------------------------------------------------------------

def sample_answers(policy: Model, envs: Sequence[Environment], prompts: Prompts, settings: SampleSettings, *,
                   show_progress: bool = False) -> dict[str, list[Any]]:
    """The n answers (Completions) of every environment by task id, `settings.chunk` environments per
    `policy.sample` call in the order of `envs`, each call seeded by its task ids."""
    out: dict[str, list[Any]] = {}
    with _bar(len(envs), "audit: generate", show_progress) as bar:
        for start in range(0, len(envs), settings.chunk):
            chunk = list(envs[start : start + settings.chunk])
            seed = env_seed(settings.seed, "\n".join(e.task_id for e in chunk))
            got = policy.sample([prompts.text[e.task_id] for e in chunk], n=settings.n,
                                temperature=settings.temperature, max_new_tokens=settings.max_new_tokens,
                                seed=seed, adapter=True)
            if len(got) != len(chunk):
                raise ValueError(f"{policy.name}: {len(got)} answer lists for the {len(chunk)} prompts of one call")
            for e, texts in zip(chunk, got, strict=True):
                out[e.task_id] = list(texts)
            bar.update(len(chunk))
    return out


def answers_of(env: Environment, sampled: Sequence[Any] = (),
               labelled: Sequence[Mapping[str, Any]] = ()) -> list[Answer]:
    """The answers the audit reads on `env`: its policy samples, its stress answers, then its
    labelled on-policy answers (`audit.calibration.read_labelled` rows)."""
    tid, kind = env.task_id, env.kind
    out = [Answer(tid, kind, POLICY, f"p{j}", str(t), token_ids=tuple(getattr(t, "token_ids", None) or ()))
           for j, t in enumerate(sampled)]
    out += [Answer(tid, kind, STRESS, s.answer_id, s.text, label=s.validity,
                   is_reference=s.answer_id == env.reference.answer_id) for s in env.stress_answers]
    out += [Answer(tid, kind, LABELLED, str(a.get("answer_id", f"l{j}")), a["text"], label=a["label"])
            for j, a in enumerate(labelled)]
    return out


def labelled_by_env(labelled: Any, envs: Sequence[Environment]) -> dict[str, list[dict]]:
    """The labelled on-policy answers of the audited environments, by task id (the probe scores them)."""
    if labelled is None:
        return {}
    ids = {e.task_id for e in envs}
    out: dict[str, list[dict]] = {}
    for a in labelled.rows:
        if a["task_id"] in ids:
            out.setdefault(a["task_id"], []).append(a)
    return out


def _by_env(answers: Sequence[Answer]) -> dict[str, list[Answer]]:
    groups: dict[str, list[Answer]] = {}
    for a in answers:
        groups.setdefault(a.task_id, []).append(a)
    return groups


def judge_scores(judge: Scorer, envs: Mapping[str, Environment], answers: Sequence[Answer], *,
                 show_progress: bool = False) -> Judged:
    """The judge's verdicts on r(e) and on every answer: one `judge.score` call per environment, r(e)
    first, each distinct text scored once. A judge scores each item on its own, so an answer that is
    r(e) word for word gets r(e)'s own verdict: A = 1[s(a) ≥ s(r(e))] is then the exact tie the
    definition counts as success, which two forward passes of the same text in different batch rows
    (float sums in another order) can break by ~1e-6."""
    refs, out = {}, {}
    groups = _by_env(answers)
    with _bar(len(groups), "audit: judge", show_progress) as bar:
        for tid, group in groups.items():
            env = envs[tid]
            texts = list(dict.fromkeys([env.reference_answer] + [a.text for a in group]))
            got = dict(zip(texts, judge.score(env, texts), strict=True))
            refs[tid] = got[env.reference_answer]
            out.update((a, got[a.text]) for a in group)
            bar.update(1)
    return Judged(refs, out)


def verdicts(verifier: Verifier, envs: Mapping[str, Environment], answers: Sequence[Answer], *,
             desc: str = "verify", show_progress: bool = False) -> dict[Answer, Any]:
    """A verifier's verdict (`judges.oracle.OracleVerdict`) on each answer, one `verify` call per
    environment."""
    out = {}
    groups = _by_env(answers)
    with _bar(len(groups), f"audit: {desc}", show_progress) as bar:
        for tid, group in groups.items():
            out.update(zip(group, verifier.verify([(envs[tid], a.text) for a in group]), strict=True))
            bar.update(1)
    return out


def kl_terms(policy: Model, prompts: Prompts, answers: Sequence[Answer], temperature: float, *,
             show_progress: bool = False) -> dict[Answer, LogProbs]:
    """Per policy answer: log π_t(a) and log π_0(a) (adapter on, off) of the token ids sampled, both
    at the temperature the answers were drawn at, and the token count.

    The answers are draws from π_t at that temperature, so the mean log-ratio estimates the KL between
    the two distributions the audit samples (≥ 0); an answer that ended on the end-of-turn token has
    that token scored too, as it was drawn like any other. Scored at temperature 1 instead, the mean
    over tempered draws is no KL and can go negative. An answer without ids (a backend that returns
    plain text) is scored on its re-encoded text."""
    out = {}
    groups = _by_env(answers)
    with _bar(len(groups), "audit: kl", show_progress) as bar:
        for tid, group in groups.items():
            batch = [prompts.text[tid]] * len(group)
            completions = [list(a.token_ids) if a.token_ids else a.text for a in group]
            on = policy.sequence_logprobs(batch, completions, adapter=True, temperature=temperature)
            off = policy.sequence_logprobs(batch, completions, adapter=False, temperature=temperature)
            for a, x, y in zip(group, on, off, strict=True):
                n = len(a.token_ids) if a.token_ids else len(policy.tokenizer(a.text, add_special_tokens=False)["input_ids"])
                out[a] = LogProbs(logp=float(x), logp0=float(y), tokens=int(n))
            bar.update(1)
    return out


def probe_terms(policy: Model, prompts: Prompts, answers: Sequence[Answer], *,
                adapter: bool, show_progress: bool = False) -> dict[Answer, LogProbs]:
    """Per labelled answer: log π(a|x) at τ = 1 of the answer as the policy's own turn (the text
    followed by the end-of-turn token, which is what sampling stops at: an answer the policy would
    end there gets credit for ending), adapter on (π_t) or off (π_0), and that turn's token count."""
    out = {}
    groups = _by_env(answers)
    with _bar(len(groups), f"audit: probe {'π_t' if adapter else 'π_0'}", show_progress) as bar:
        for tid, group in groups.items():
            turns = [a.text + prompts.end_of_turn for a in group]
            logp = policy.sequence_logprobs([prompts.text[tid]] * len(turns), turns, adapter=adapter,
                                            temperature=1.0)
            tokens = [len(ids) for ids in policy.tokenizer(turns, add_special_tokens=False)["input_ids"]]
            out.update({a: LogProbs(logp=float(x), tokens=int(n)) for a, x, n in zip(group, logp, tokens, strict=True)})
            bar.update(1)
    return out


# -- joining them -----------------------------------------------------------------------------------

def _accept(v: Any) -> bool | None:
    return None if v is None or v.violates is None else not v.violates


def _accepts(v: Mapping[str, Any]) -> dict[str, bool | None]:
    """role -> accept of one answer's verdicts (`v[role]`, None where the role gave none), the
    members of a combined primary oracle after it. An undecided checks verdict is a rejection."""
    out: dict[str, bool | None] = {}
    for role, verdict in v.items():
        out[role] = _accept(verdict)
        if role == ORACLE and verdict is not None:
            out |= {member(str(p.verifier)): _accept(p) for p in verdict.parts}
    if CHECKS in out:
        out[CHECKS] = bool(out[CHECKS])
    return out


def _label(violates: bool | None) -> str | None:
    return None if violates is None else ("invalid" if violates else "valid")


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def build_rows(answers: Sequence[Answer], *, judged: Judged | None = None,
               verdicts: Mapping[str, Mapping[Answer, Any]] | None = None,
               kl: Mapping[Answer, LogProbs] | None = None,
               probe: Mapping[Answer, LogProbs] | None = None,
               probe0: Mapping[Answer, LogProbs] | None = None) -> list[AnswerRow]:
    """One AnswerRow per answer, each stage's result looked up by the answer (pure).

    A policy answer's label is the primary oracle's verdict; a stress or labelled answer keeps its
    human label, and the verifiers' verdicts on it measure the verifiers. `verdicts[role][answer]`."""
    verdicts = verdicts or {}
    judged = judged or Judged({}, {})
    seen: set[str] = set()
    rows = []
    for a in answers:
        if a.key in seen:
            raise ValueError(f"answer {a.key} appears twice (answer ids must be unique per environment)")
        seen.add(a.key)
        v = {role: got.get(a) for role, got in verdicts.items()}
        k = (kl or {}).get(a)
        on, off = (probe or {}).get(a), (probe0 or {}).get(a)
        if (on is None) != (off is None):
            raise ValueError(f"{a.key}: probe log-probs under only one of π_t and π_0")
        if on is not None and on.tokens != off.tokens:
            raise ValueError(f"task {a.task_id}: probe token counts differ between π_t and π_0 "
                             f"({on.tokens} vs {off.tokens})")
        scored = a.source != LABELLED
        score, ref = judged.answers.get(a), judged.reference.get(a.task_id)
        oracle = v.get(ORACLE)
        rows.append(AnswerRow(
            task_id=a.task_id, kind=a.kind, source=a.source, answer_id=a.answer_id, text=a.text,
            score=_finite(score.score) if scored and score is not None else None,
            ref_score=_finite(ref.score) if scored and ref is not None else None,
            label=_label(None if oracle is None else oracle.violates) if a.source == POLICY else a.label,
            accepts=_accepts(v), is_reference=a.is_reference,
            log_ratio=None if k is None else _log_ratio(k), tokens=None if k is None else k.tokens,
            probe_logp=None if on is None else on.logp, probe_logp0=None if off is None else off.logp,
            probe_tokens=None if on is None else on.tokens,
        ))
    return rows


def _log_ratio(k: LogProbs) -> float | None:
    d = k.logp - k.logp0
    return d if math.isfinite(d) else None


def labelled_answers(envs: Mapping[str, Environment], labelled: Sequence[Mapping[str, Any]]) -> list[Answer]:
    """The labelled on-policy answers (`audit.calibration.read_labelled` rows) of the environments in
    `envs`, as Answers of source `labelled`, in file order."""
    out, seen = [], {}
    for a in labelled:
        tid = a["task_id"]
        if tid not in envs:
            continue
        j = seen.get(tid, 0)
        seen[tid] = j + 1
        out.append(Answer(tid, envs[tid].kind, LABELLED, str(a.get("answer_id", f"l{j}")), a["text"],
                          label=a["label"]))
    return out
