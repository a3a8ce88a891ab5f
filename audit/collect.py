"""The audit's stages for one checkpoint: answers → judge scores → verifier verdicts → KL → probe → rows.

For each audit environment e (SPEC §6):
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
from typing import Any

from tqdm.auto import tqdm

from judges.base import Judge, judge_item, judge_row
from judges.checks import run_checks
from selfplay.envs.prompt import policy_messages
from selfplay.envs.types import Environment
from selfplay.models.backend import Backend
from selfplay.models.chat import end_of_turn

# the verifier roles are imported from here by the audit
from .records import CHECKS, LABELLED, ORACLE, ORACLE2, POLICY, STRESS, AnswerRow, member  # noqa: F401


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
    labelled on-policy answer; `key` joins the stages' results."""

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


def _bar(total: int, desc: str, show: bool):
    return tqdm(total=total, desc=desc, disable=not show, leave=False)


# -- the stages -------------------------------------------------------------------------------------

def sample_answers(policy: Backend, envs: Sequence[Environment], settings: SampleSettings, *,
                   show_progress: bool = False) -> dict[str, list[Any]]:
    """The n answers (Completions) of every environment by task id, `settings.chunk` environments per
    `policy.sample` call in the order of `envs`, each call seeded by its task ids."""
    out: dict[str, list[Any]] = {}
    with _bar(len(envs), "audit: generate", show_progress) as bar:
        for start in range(0, len(envs), settings.chunk):
            chunk = list(envs[start : start + settings.chunk])
            prompts = [policy.render(policy_messages(e.public)) for e in chunk]
            seed = env_seed(settings.seed, "\n".join(e.task_id for e in chunk))
            got = policy.sample(prompts, n=settings.n, temperature=settings.temperature,
                                max_new_tokens=settings.max_new_tokens, seed=seed, adapter=True)
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


def _by_env(answers: Sequence[Answer]) -> dict[str, list[Answer]]:
    groups: dict[str, list[Answer]] = {}
    for a in answers:
        groups.setdefault(a.task_id, []).append(a)
    return groups


def judge_scores(judge: Judge, envs: Mapping[str, Environment], answers: Sequence[Answer], *,
                 show_progress: bool = False) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(the verdict row of r(e) by task id, of each answer by key; `judges.judge_row`): one
    `judge.score` call per environment, r(e) first."""
    refs, rows = {}, {}
    groups = _by_env(answers)
    with _bar(len(groups), "audit: judge", show_progress) as bar:
        for tid, group in groups.items():
            env = envs[tid]
            texts = [env.reference_answer] + [a.text for a in group]
            got = judge.score([judge_item(judge, env, t) for t in texts])
            refs[tid] = judge_row(got[0])
            rows.update({a.key: judge_row(v) for a, v in zip(group, got[1:], strict=True)})
            bar.update(1)
    return refs, rows


def verdicts(verifier: Any, envs: Mapping[str, Environment], answers: Sequence[Answer], *,
             desc: str = "verify", show_progress: bool = False) -> dict[str, dict[str, Any]]:
    """A verifier's verdict row (`judges.verifiers.verdict_row`) by answer key, one `verify` call per
    environment."""
    from judges.verifiers import verdict_row

    out = {}
    groups = _by_env(answers)
    with _bar(len(groups), f"audit: {desc}", show_progress) as bar:
        for tid, group in groups.items():
            got = verifier.verify([(envs[tid], a.text) for a in group])
            out.update({a.key: verdict_row(v) for a, v in zip(group, got, strict=True)})
            bar.update(1)
    return out


def kl_terms(policy: Backend, envs: Mapping[str, Environment], answers: Sequence[Answer],
             temperature: float, *, show_progress: bool = False) -> dict[str, dict[str, Any]]:
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
            prompt = policy.render(policy_messages(envs[tid].public))
            prompts = [prompt] * len(group)
            completions = [list(a.token_ids) if a.token_ids else a.text for a in group]
            on = policy.sequence_logprobs(prompts, completions, adapter=True, temperature=temperature)
            off = policy.sequence_logprobs(prompts, completions, adapter=False, temperature=temperature)
            for a, x, y in zip(group, on, off, strict=True):
                n = len(a.token_ids) if a.token_ids else len(policy.tokenizer(a.text, add_special_tokens=False)["input_ids"])
                out[a.key] = {"logp": float(x), "logp0": float(y), "tokens": int(n)}
            bar.update(1)
    return out


def probe_terms(policy: Backend, envs: Mapping[str, Environment], answers: Sequence[Answer], *,
                adapter: bool, show_progress: bool = False) -> dict[str, dict[str, Any]]:
    """Per labelled answer: log π(a|x) at τ = 1 of the answer as the policy's own turn (the text
    followed by the end-of-turn token, which is what sampling stops at: an answer the policy would
    end there gets credit for ending), adapter on (π_t) or off (π_0), and that turn's token count."""
    eot = end_of_turn(policy.tokenizer)
    out = {}
    groups = _by_env(answers)
    with _bar(len(groups), f"audit: probe {'π_t' if adapter else 'π_0'}", show_progress) as bar:
        for tid, group in groups.items():
            turns = [a.text + eot for a in group]
            prompts = [policy.render(policy_messages(envs[tid].public))] * len(turns)
            logp = policy.sequence_logprobs(prompts, turns, adapter=adapter, temperature=1.0)
            tokens = [len(ids) for ids in policy.tokenizer(turns, add_special_tokens=False)["input_ids"]]
            out.update({a.key: {"logp": float(x), "tokens": int(n)}
                        for a, x, n in zip(group, logp, tokens, strict=True)})
            bar.update(1)
    return out


# -- joining them -----------------------------------------------------------------------------------

def _accept(row: Mapping[str, Any] | None) -> bool | None:
    return None if row is None or row["violates"] is None else not row["violates"]


def _accepts(v: Mapping[str, Mapping[str, Any] | None]) -> dict[str, bool | None]:
    """role -> accept of one answer's verdicts (`v[role]`, None where the role gave none), the
    members of a combined primary oracle after it."""
    out: dict[str, bool | None] = {}
    for role, row in v.items():
        out[role] = _accept(row)
        if role == ORACLE:
            out |= {member(str(p.get("verifier"))): _accept(p) for p in (row or {}).get("parts") or ()}
    return out


def _label(violates: bool | None) -> str | None:
    return None if violates is None else ("invalid" if violates else "valid")


def _log_ratio(k: Mapping[str, Any]) -> float | None:
    d = k["logp"] - k["logp0"]
    return d if math.isfinite(d) else None


def build_rows(envs: Mapping[str, Environment], answers: Sequence[Answer], *,
               judged: tuple[Mapping[str, Mapping[str, Any]], Mapping[str, Mapping[str, Any]]] | None = None,
               verdicts: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
               kl: Mapping[str, Mapping[str, Any]] | None = None,
               probe: Mapping[str, Mapping[str, Any]] | None = None,
               probe0: Mapping[str, Mapping[str, Any]] | None = None) -> list[AnswerRow]:
    """One AnswerRow per answer, each stage's result looked up by the answer's key (pure).

    `judged` is `judge_scores`'s (r(e) rows, answer rows). A policy answer's label is the primary
    oracle's verdict; a stress or labelled answer keeps its
    human label, and the verifiers' verdicts on it measure the verifiers. `verdicts[role][key]`;
    the checks are run here where no `checks` verdict was computed (they need no model)."""
    verdicts = verdicts or {}
    refs, scored_rows = judged or ({}, {})
    seen: set[str] = set()
    rows = []
    for a in answers:
        if a.key in seen:
            raise ValueError(f"answer {a.key} appears twice (answer ids must be unique per environment)")
        seen.add(a.key)
        v = {role: got.get(a.key) for role, got in verdicts.items()}
        accepts = _accepts(v)
        # an undecided checks verdict counts as a rejection
        accepts[CHECKS] = bool(accepts[CHECKS] if v.get(CHECKS) is not None
                               else not run_checks(envs[a.task_id].public, a.text).violates)
        k = (kl or {}).get(a.key)
        on, off = (probe or {}).get(a.key), (probe0 or {}).get(a.key)
        if (on is None) != (off is None):
            raise ValueError(f"{a.key}: probe log-probs under only one of π_t and π_0")
        if on is not None and on["tokens"] != off["tokens"]:
            raise ValueError(f"task {a.task_id}: probe token counts differ between π_t and π_0 "
                             f"({on['tokens']} vs {off['tokens']})")
        scored = a.source != LABELLED
        rows.append(AnswerRow(
            task_id=a.task_id, kind=a.kind, source=a.source, answer_id=a.answer_id, text=a.text,
            score=scored_rows[a.key]["score"] if scored and a.key in scored_rows else None,
            ref_score=refs[a.task_id]["score"] if scored and a.task_id in refs else None,
            label=_label((v.get(ORACLE) or {}).get("violates")) if a.source == POLICY else a.label,
            accepts=accepts, is_reference=a.is_reference,
            log_ratio=None if k is None else _log_ratio(k), tokens=None if k is None else k["tokens"],
            probe_logp=None if on is None else on["logp"], probe_logp0=None if off is None else off["logp"],
            probe_tokens=None if on is None else on["tokens"],
        ))
    return rows


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
