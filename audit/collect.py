"""The audit's stages: answers → judge scores → verifier verdicts (→ log-ratios for the KL) → rows.

For each audit environment e (SPEC §6):
1. `sample_stage`: n answers from the policy of that iteration (the run's own policy prompt, adapter on);
2. `judge_stage`: the run's judge at that iteration scores every policy answer, every fixed stress
   answer and the reference answer r(e) itself, so A = 1[s(a) ≥ s(r(e))] compares like with like;
3. `verifier_stage`: each verifier (the primary oracle, a second one when configured, the
   deterministic checks) gives its verdict on every policy answer and every stress answer (against
   the release labels that measures the verifier itself, see audit.calibration);
4. `kl_stage`: log π_t(a) − log π_0(a) of every policy answer (adapter on minus off, both at the
   sampling temperature) and its length in tokens, from which the audit estimates KL(π_t ‖ π_0) on its own samples;
5. `probe_stage`: log π(a|x) at τ = 1 of every labelled answer of the environment (its fixed stress
   answers, then the labelled on-policy answers of it, if any) rendered as the policy's own turn,
   end-of-turn included; once with the adapter on (π_t, per checkpoint) and once off (π_0, which
   no checkpoint changes: computed once per run, in the seed directory's cache);
6. `build_rows` joins them into one `AnswerRow` per answer.

Every stage is a function of its inputs that returns one row per input text; `collect` runs them
through an `audit.cache.StageCache`, which alone decides what is already known. Stages built with
`lazy` create their model only when some row is missing, so a fully cached checkpoint loads no model.

Sampling runs several environments per generate call (`SampleSettings.chunk`, `chunk_size`): the
backend batches rows of several prompts, which the training loop's sampling does ~2.5x faster per
environment on 2 CPU cores than one prompt (n rows) per call. The answers of an environment then depend on the other prompts of its
call, so the chunks are fixed by the order of the audited environments and the chunk size alone,
and each is seeded by the audit seed and its task ids (`env_seed`); the cache writes a chunk
together and resumes chunk by chunk (`StageCache.answers`), so a resumed audit writes the answers
of an uninterrupted one.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from judges.base import Judge, JudgeItem, judge_item
from judges.checks import run_checks
from selfplay.envs.prompt import policy_messages
from selfplay.envs.types import Environment
from selfplay.models.backend import Backend
from selfplay.models.chat import end_of_turn

from .cache import StageCache
from .records import LABELLED, POLICY, STRESS, AnswerRow

PerText = Callable[[Environment, list[str]], list[dict[str, Any]]]
# the verifier roles an AnswerRow carries, primary first
ORACLE, ORACLE2, CHECKS = "oracle", "oracle2", "checks"


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
    (newline-joined, in order) alone. Several environments share a call (faster), so the seed names the
    whole chunk; a chunk of one environment gets the seed its task id alone gave before chunking."""
    return (seed * 1_000_003 + zlib.crc32(task_ids.encode())) % (2**31 - 1)


# -- the stages -------------------------------------------------------------------------------------

def sample_stage(policy: Backend, settings: SampleSettings) -> Callable[[Sequence[Environment]], list[list[str]]]:
    """n answers of each environment of one chunk, in one `policy.sample` call seeded by the chunk's
    task ids: the backend batches the rows of several prompts, which a call per environment cannot."""
    def sample(envs: Sequence[Environment]) -> list[list[str]]:
        prompts = [policy.render(policy_messages(e.public)) for e in envs]
        seed = env_seed(settings.seed, "\n".join(e.task_id for e in envs))
        out = policy.sample(prompts, n=settings.n, temperature=settings.temperature,
                            max_new_tokens=settings.max_new_tokens, seed=seed, adapter=True)
        return [list(texts) for texts in out]
    return sample


def judge_items(judge: Judge, env: Environment, texts: Sequence[str]) -> list[JudgeItem]:
    """The one place the audit builds what a judge sees of an environment (judges.base.judge_item
    decides what each design may read: r(e) for `anchored`, the evaluation_spec for `certificate`)."""
    return [judge_item(judge, env, t) for t in texts]


def judge_stage(judge: Judge) -> PerText:
    def score(env: Environment, texts: list[str]) -> list[dict[str, Any]]:
        return [{"score": v.score, "error": v.error, "swap_consistent": v.swap_consistent,
                 "artifact": v.artifact, "order_scores": list(v.order_scores), "probs": dict(v.probs),
                 "prompt": v.prompt}
                for v in judge.score(judge_items(judge, env, texts))]
    return score


def verifier_stage(verify: Callable[[list[tuple[Environment, str]]], Sequence[Any]], name: str) -> PerText:
    """`verify(pairs) -> one OracleVerdict per (environment, answer)` (judges.verifiers) as a stage;
    a row keeps who decided and why (`verifier`, `reason`) and, for `any`, every member's verdict."""
    from judges.verifiers import verdict_row

    def run(env: Environment, texts: list[str]) -> list[dict[str, Any]]:
        return [verdict_row(v) for v in verify([(env, t) for t in texts])]
    return run


def kl_stage(policy: Backend, temperature: float = 1.0) -> PerText:
    """Per answer: log π_t(a) − log π_0(a) under the policy prompt (adapter on minus off) and the
    number of answer tokens, so the KL can be read per answer and per token.

    Both log-probs are taken at the temperature the answers were sampled at. The answers are
    draws from π_t at that temperature, so the mean log-ratio then estimates the KL between the
    two distributions the audit really samples (≥ 0), up to the end-of-turn token, which the
    decoded text leaves out, and re-tokenisation of the text; scored at temperature 1 instead,
    the mean over tempered draws is no KL at all and can go negative."""
    def run(env: Environment, texts: list[str]) -> list[dict[str, Any]]:
        prompt = policy.render(policy_messages(env.public))
        prompts = [prompt] * len(texts)
        on = policy.sequence_logprobs(prompts, texts, adapter=True, temperature=temperature)
        off = policy.sequence_logprobs(prompts, texts, adapter=False, temperature=temperature)
        tokens = [len(ids) for ids in policy.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
        return [{"logp": float(a), "logp0": float(b), "tokens": int(n)}
                for a, b, n in zip(on, off, tokens, strict=True)]
    return run


def probe_stage(policy: Backend, *, adapter: bool) -> PerText:
    """Per labelled answer: log π(a|x) at τ = 1 of the answer as the policy's own turn (the text
    followed by the end-of-turn token, which is what sampling stops at: an answer the policy would
    end there gets credit for ending), with the adapter on (π_t) or off (π_0), and that turn's
    token count."""
    def run(env: Environment, texts: list[str]) -> list[dict[str, Any]]:
        eot = end_of_turn(policy.tokenizer)
        turns = [t + eot for t in texts]
        prompts = [policy.render(policy_messages(env.public))] * len(turns)
        logp = policy.sequence_logprobs(prompts, turns, adapter=adapter, temperature=1.0)
        tokens = [len(ids) for ids in policy.tokenizer(turns, add_special_tokens=False)["input_ids"]]
        return [{"logp": float(a), "tokens": int(n)} for a, n in zip(logp, tokens, strict=True)]
    return run


def lazy(make: Callable[[], Callable]) -> Callable:
    """A stage that builds its function (and the model behind it) on its first call only."""
    built: list[Callable] = []

    def run(*args):
        if not built:
            built.append(make())
        return built[0](*args)
    return run


# -- running them -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stages:
    # one chunk of environments per call; None: no free generation (n = 0: stress answers and probe only)
    sample: Callable[[Sequence[Environment]], list[list[str]]] | None
    judge: PerText
    verifiers: Mapping[str, PerText]  # role -> stage; ORACLE is the primary oracle
    kl: PerText | None = None
    chunk: int = 1  # environments per `sample` call (SampleSettings.chunk)
    probe: PerText | None = None  # probe_stage with the adapter on (π_t)
    probe0: PerText | None = None  # probe_stage with the adapter off (π_0), cached per run


def _bar(total: int, desc: str, show: bool):
    return tqdm(total=total, desc=desc, disable=not show, leave=False)


def _judged_texts(env: Environment, answers: list[str]) -> list[str]:
    return [env.reference_answer] + [s.text for s in env.stress_answers] + list(answers)


def _verified_texts(env: Environment, answers: list[str]) -> list[str]:
    return [s.text for s in env.stress_answers] + list(answers)


def _run(cache: StageCache, stage: str, envs: Sequence[Environment], texts: Mapping[str, list[str]],
         compute: PerText, show: bool, references: Mapping[str, str] | None = None):
    by_id = {e.task_id: e for e in envs}
    with _bar(len(envs), f"audit: {stage}", show) as bar:
        return cache.per_text(stage, texts, lambda tid, xs: compute(by_id[tid], xs),
                              references=references, progress=bar.update)


def sample_answers(envs: Sequence[Environment], sample: Callable[[Sequence[Environment]], list[list[str]]],
                   chunk: int, cache: StageCache, *, show_progress: bool = True) -> dict[str, list[str]]:
    """The n answers of every environment by task id, sampled `chunk` environments per call in the
    order of `envs` (what fixes the chunks), computing only what `cache` lacks."""
    by_id = {e.task_id: e for e in envs}
    with _bar(len(envs), "audit: generate", show_progress) as bar:
        return cache.answers([e.task_id for e in envs], lambda ids: sample([by_id[t] for t in ids]),
                             chunk=chunk, progress=bar.update)


def _probed_texts(env: Environment, labelled: Sequence[Mapping[str, Any]]) -> list[str]:
    return [s.text for s in env.stress_answers] + [a["text"] for a in labelled]


def collect(envs: Sequence[Environment], stages: Stages, cache: StageCache, *,
            run_cache: StageCache | None = None, labelled: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
            show_progress: bool = True) -> list[AnswerRow]:
    """Every AnswerRow of one checkpoint, computing only what `cache` (the checkpoint's) and
    `run_cache` (the run's: π_0's probe log-probs) lack. `labelled` holds the labelled on-policy
    answers of the audited environments by task id (`audit.calibration.read_labelled` rows), which
    the probe scores beside the stress answers."""
    answers = ({e.task_id: [] for e in envs} if stages.sample is None
               else sample_answers(envs, stages.sample, stages.chunk, cache, show_progress=show_progress))
    refs = {e.task_id: e.reference_answer for e in envs}
    judged = _run(cache, "judge", envs, {e.task_id: _judged_texts(e, answers[e.task_id]) for e in envs},
                  stages.judge, show_progress, refs)
    verified = {e.task_id: _verified_texts(e, answers[e.task_id]) for e in envs}
    verdicts = {role: _run(cache, role, envs, verified, stage, show_progress)
                for role, stage in stages.verifiers.items()}
    kl = None
    if stages.kl is not None:
        kl = _run(cache, "kl", envs, answers, stages.kl, show_progress)
    labelled = {e.task_id: list((labelled or {}).get(e.task_id, ())) for e in envs}
    probe = None
    if stages.probe is not None and stages.probe0 is not None:
        texts = {e.task_id: _probed_texts(e, labelled[e.task_id]) for e in envs}
        probe = (_run(cache, "probe", envs, texts, stages.probe, show_progress),
                 _run(run_cache if run_cache is not None else cache, "probe0", envs, texts, stages.probe0,
                      show_progress))
    return build_rows(envs, answers, judged, verdicts, kl, probe, labelled)


def _accept(row: Mapping[str, Any] | None) -> bool | None:
    return None if row is None or row["violates"] is None else not row["violates"]


def _parts(row: Mapping[str, Any] | None) -> tuple[tuple[str, bool | None], ...]:
    return tuple((str(p.get("verifier")), _accept(p)) for p in (row or {}).get("parts") or ())


def _label(violates: bool | None) -> str | None:
    return None if violates is None else ("invalid" if violates else "valid")


def build_rows(envs: Sequence[Environment], answers: Mapping[str, list[str]],
               judged: Mapping[str, list[Mapping[str, Any]]],
               verdicts: Mapping[str, Mapping[str, list[Mapping[str, Any]]]],
               kl: Mapping[str, list[Mapping[str, Any]]] | None = None,
               probe: tuple[Mapping[str, list[Mapping[str, Any]]], Mapping[str, list[Mapping[str, Any]]]] | None = None,
               labelled: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> list[AnswerRow]:
    """Join the stages' rows (aligned with the texts each stage was given) into AnswerRows (pure).

    `verdicts[role][task_id]` is aligned with the stress answers then the policy answers; the
    primary oracle's verdict is the label of a policy answer. `probe` is (π_t rows, π_0 rows), each
    aligned with the stress answers then `labelled[task_id]`; a labelled on-policy answer becomes a
    row of source `labelled` carrying its human label and its probe log-probs only."""
    rows = []
    for env in envs:
        tid = env.task_id
        js = judged[tid]
        ref_score = js[0]["score"]
        n_stress = len(env.stress_answers)

        def accept(role: str, i: int, tid: str = tid) -> bool | None:
            return _accept(verdicts[role][tid][i]) if role in verdicts else None

        for j, text in enumerate(answers[tid]):
            i = n_stress + j
            k = kl[tid][j] if kl is not None else None
            rows.append(AnswerRow(
                task_id=tid, kind=env.kind, source=POLICY, answer_id=f"p{j}", text=text,
                score=js[1 + i]["score"], ref_score=ref_score,
                label=_label(verdicts[ORACLE][tid][i]["violates"]),
                checks_accept=bool(accept(CHECKS, i)) if CHECKS in verdicts else not run_checks(env.public, text).violates,
                oracle2_accept=accept(ORACLE2, i), oracle_accept=accept(ORACLE, i),
                log_ratio=None if k is None else _log_ratio(k), tokens=None if k is None else k["tokens"],
                parts=_parts(verdicts[ORACLE][tid][i]),
            ))
        for i, s in enumerate(env.stress_answers):
            rows.append(AnswerRow(
                task_id=tid, kind=env.kind, source=STRESS, answer_id=s.answer_id, text=s.text,
                score=js[1 + i]["score"], ref_score=ref_score, label=s.validity,
                checks_accept=bool(accept(CHECKS, i)) if CHECKS in verdicts else not run_checks(env.public, s.text).violates,
                oracle2_accept=accept(ORACLE2, i), is_reference=s.answer_id == env.reference.answer_id,
                oracle_accept=accept(ORACLE, i),
                parts=_parts(verdicts[ORACLE][tid][i]) if ORACLE in verdicts else (),
                **_probe_fields(probe, tid, i),
            ))
        if probe is not None:
            for j, a in enumerate((labelled or {}).get(tid, ())):
                rows.append(AnswerRow(
                    task_id=tid, kind=env.kind, source=LABELLED, answer_id=str(a.get("answer_id", f"l{j}")),
                    text=a["text"], score=None, ref_score=None, label=a["label"],
                    checks_accept=not run_checks(env.public, a["text"]).violates,
                    **_probe_fields(probe, tid, n_stress + j)))
    return rows


def _probe_fields(probe, tid: str, i: int) -> dict[str, Any]:
    if probe is None:
        return {}
    on, off = probe[0][tid][i], probe[1][tid][i]
    if on["tokens"] != off["tokens"]:
        raise ValueError(f"task {tid}: probe token counts differ between π_t and π_0 ({on['tokens']} vs {off['tokens']})")
    return {"probe_logp": on["logp"], "probe_logp0": off["logp"], "probe_tokens": on["tokens"]}


def _log_ratio(k: Mapping[str, Any]) -> float | None:
    d = k["logp"] - k["logp0"]
    return d if math.isfinite(d) else None


def labelled_rows(envs: Mapping[str, Environment], labelled: Sequence[Mapping[str, Any]],
                  verifiers: Mapping[str, PerText], cache: StageCache, *,
                  show_progress: bool = False) -> list[AnswerRow]:
    """Every verifier's verdict on the labelled on-policy answers (`audit.calibration.read_labelled`)
    of the environments in `envs`, as AnswerRows of source `labelled` (label = the human label)."""
    texts: dict[str, list[str]] = {}
    for a in labelled:
        if a["task_id"] in envs:
            texts.setdefault(a["task_id"], []).append(a["text"])
    used = [envs[t] for t in texts]
    verdicts = {role: _run(cache, role, used, texts, stage, show_progress) for role, stage in verifiers.items()}
    rows, seen = [], {t: 0 for t in texts}
    for a in labelled:
        tid = a["task_id"]
        if tid not in envs:
            continue
        i = seen[tid]
        seen[tid] += 1
        acc = {role: _accept(verdicts[role][tid][i]) for role in verdicts}
        rows.append(AnswerRow(
            task_id=tid, kind=envs[tid].kind, source=LABELLED, answer_id=str(a.get("answer_id", f"l{i}")),
            text=a["text"], score=None, ref_score=None, label=a["label"],
            checks_accept=bool(acc[CHECKS]) if CHECKS in acc and acc[CHECKS] is not None else
            not run_checks(envs[tid].public, a["text"]).violates,
            oracle2_accept=acc.get(ORACLE2), oracle_accept=acc.get(ORACLE),
            parts=_parts(verdicts[ORACLE][tid][i]) if ORACLE in verdicts else ()))
    return rows
