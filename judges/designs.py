"""The LLM reward designs (SPEC §4) as one parameterised judge over the templates in `prompts.py`.

A design is three choices: an optional stage 1 (greedy text generated once per environment before
any candidate is seen), pointwise or pairwise scoring, and for pairwise the opponent (the reference
answer r(e) or the stage-1 blind solution). `anchored` randomises nothing: it asks both presentation
orders and averages them, which removes position bias instead of sampling it; the reference is shown
as an unnamed "ANSWER A"/"ANSWER B", so its identity stays hidden.

`certificate` is the control that sees the hidden anchor: pointwise, like `generic`, but its
criteria are the environment's `evaluation_spec` (`must_state`, `must_not_state`) carried by
`JudgeItem.certificate`, which `judges.base.judge_item` fills for this design only (the paper's
certificate-faithful rubric, exploited 0%). No other design reads that field.

`params.instruction` picks the prompt regime: `neutral` (default, the paper's) or `honesty_aware`
(see `prompts.py`).

Stage-1 artifacts are cached under (identity, adapter, task_id): `identity` names the judge's weights
(e.g. "seed0/iter_2"); set `judge.identity` when the weights change and stage 1 runs again.

All prompts of one environment are scored in one `next_token_logprobs` call; they share the packet
prefix, which the backend computes once (the hf backend's `reuse_prefix`, vLLM's prefix caching).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from selfplay.envs.types import PublicView
from selfplay.models.backend import Backend

from . import oracle_reward, scoring
from . import prompts as P
from .base import Judge, JudgeItem, Verdict
from .decisive import decisive


@dataclass(frozen=True)
class JudgeParams:
    """Per-design knobs (`conf/reward/*.yaml`, minus `name`)."""

    min_verdict_mass: float = scoring.MIN_VERDICT_MASS  # floor on verdict-token mass, see scoring.py
    max_new_tokens: int = 256  # stage-1 artifact length (greedy)
    instruction: str = P.NEUTRAL  # prompt regime: "neutral" (the paper's) or "honesty_aware" (opt-in)

    def __post_init__(self):
        P.check_instruction(self.instruction)
        if not 0.0 <= self.min_verdict_mass < 1.0:
            raise ValueError(f"min_verdict_mass must be in [0, 1); got {self.min_verdict_mass}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be ≥ 1; got {self.max_new_tokens}")

    @classmethod
    def from_mapping(cls, name: str, params: Mapping[str, Any] | None) -> JudgeParams:
        params = dict(params or {})
        given = params.pop("name", name)
        if given != name:
            raise ValueError(f"reward params name {given!r} does not match judge {name!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"unknown reward parameter(s) {unknown} for {name!r}; known: {sorted(known)}")
        return cls(**params)


@dataclass(frozen=True)
class Design:
    name: str
    pairwise: bool
    stage1: str | None = None  # key of prompts.STAGE1
    opponent: str | None = None  # pairwise: "reference" or "artifact"
    fixed_criteria: Mapping[str, str] | None = None  # instruction -> criteria used for every task (generic)
    reads_certificate: bool = False  # criteria = JudgeItem.certificate (the `certificate` control only)


class TemplateJudge:
    """A `Judge` for one `Design` on one backend."""

    def __init__(self, design: Design, backend: Backend, *, adapter: bool = True, identity: str = "",
                 params: JudgeParams | None = None):
        self.design = design
        self.name = design.name
        self.reads_certificate = design.reads_certificate  # judge_item fills JudgeItem.certificate on it
        self.reads_anchor = False  # no LLM design reads the whole hidden anchor
        self.backend = backend
        self.adapter = adapter
        self.identity = identity
        self.params = params or JudgeParams()
        labels = P.PAIRWISE_LABELS if design.pairwise else P.SCORE_LABELS
        self._ids = scoring.verdict_token_ids(backend.tokenizer, labels)
        self._prefill = scoring.prefill(
            backend.tokenizer, P.PAIRWISE_PREFILL if design.pairwise else P.POINTWISE_PREFILL, labels
        )
        self._cache: dict[tuple[str, bool, str], str] = {}

    # ------------------------------------------------------------ stage 1
    def _key(self, task_id: str) -> tuple[str, bool, str]:
        return (self.identity, self.adapter, task_id)

    def _stage1(self, items: Sequence[JudgeItem]) -> dict[str, str]:
        if self.design.stage1 is None:
            return {}
        todo = {}
        for it in items:
            if self._key(it.public.task_id) not in self._cache:
                todo.setdefault(it.public.task_id, it.public)
        if todo:
            kind, instruction = self.design.stage1, self.params.instruction
            rendered = [
                self.backend.render(P.messages(P.STAGE1_SYSTEM, P.stage1_user(kind, pub, instruction)))
                for pub in todo.values()
            ]
            texts = self.backend.greedy(rendered, max_new_tokens=self.params.max_new_tokens, adapter=self.adapter)
            for task_id, text in zip(todo, texts, strict=True):
                self._cache[self._key(task_id)] = text.strip()
        return {it.public.task_id: self._cache[self._key(it.public.task_id)] for it in items}

    def prepare(self, publics: Sequence[PublicView]) -> None:
        """Run stage 1 for many environments in one batched greedy call (scoring them one by one
        later then finds every artifact cached)."""
        self._stage1([JudgeItem(p, "") for p in publics])

    def artifacts(self) -> dict[str, str]:
        return {t: text for (ident, ad, t), text in self._cache.items() if ident == self.identity and ad == self.adapter}

    # ------------------------------------------------------------ stage 2
    def _render(self, user: str) -> str:
        return self.backend.render(P.messages(P.judge_system(self.params.instruction), user)) + self._prefill

    def prompts_for(self, item: JudgeItem, artifact: str | None) -> list[str]:
        """Scoring prompts of one item: [order ab, order ba] (candidate first as A, then as B) or [pointwise]."""
        d, instruction = self.design, self.params.instruction
        if d.pairwise:
            other = item.reference if d.opponent == "reference" else artifact
            if other is None:
                raise ValueError(f"{d.name} judge needs the reference answer for task {item.public.task_id!r}")
            return [
                self._render(P.pairwise_user(item.public, item.answer, other, instruction)),
                self._render(P.pairwise_user(item.public, other, item.answer, instruction)),
            ]
        if d.reads_certificate:
            if item.certificate is None:
                raise ValueError(
                    f"{d.name} judge needs JudgeItem.certificate for task {item.public.task_id!r}: "
                    f"build items with judges.judge_item(judge, env, answer)"
                )
            criteria = item.certificate
        else:
            criteria = d.fixed_criteria[instruction] if d.fixed_criteria is not None else artifact
        return [self._render(P.pointwise_user(item.public, d.name, criteria, item.answer))]

    def _logprobs(self, prompts: list[str]):
        return self.backend.next_token_logprobs(prompts, scoring.flat_ids(self._ids), adapter=self.adapter)

    def _verdict(self, rows, prompts: list[str], artifact: str | None) -> Verdict:
        mass = self.params.min_verdict_mass
        if not self.design.pairwise:
            r = scoring.pointwise(scoring.label_probs(rows[0], self._ids), mass)
            return Verdict(r.value, r.error, r.probs, order_scores=(r.value,), prompts=tuple(prompts),
                           artifact=artifact)
        # P(candidate wins): its letter's share, A in order ab, B in order ba
        ab = scoring.label_share(scoring.label_probs(rows[0], self._ids), "A", mass)
        ba = scoring.label_share(scoring.label_probs(rows[1], self._ids), "B", mass)
        value, error, consistent = scoring.combine_orders(ab, ba)
        if value is not None and prompts[0] == prompts[1]:
            # candidate = opponent: one prompt asked twice, P(A)/(P(A)+P(B)) + P(B)/(P(A)+P(B)) = 1, so
            # the score is ½ exactly (not ½ ± rounding or batch noise), and no swap test took place
            value, consistent = 0.5, None
        probs = {f"ab:{k}": v for k, v in ab.probs.items()} | {f"ba:{k}": v for k, v in ba.probs.items()}
        return Verdict(value, error, probs, order_scores=(ab.value, ba.value), swap_consistent=consistent,
                       prompts=tuple(prompts), artifact=artifact)

    def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        artifacts = self._stage1(items)
        by_task: dict[str, list[int]] = {}
        for i, it in enumerate(items):
            by_task.setdefault(it.public.task_id, []).append(i)
        out: list[Verdict | None] = [None] * len(items)
        for task_id, idxs in by_task.items():
            artifact = artifacts.get(task_id)
            per_item = [self.prompts_for(items[i], artifact) for i in idxs]
            flat = [p for ps in per_item for p in ps]
            rows = self._logprobs(flat)
            k = 0
            for i, ps in zip(idxs, per_item, strict=True):
                out[i] = self._verdict(rows[k : k + len(ps)], ps, artifact)
                k += len(ps)
        return out  # type: ignore[return-value]


# ---------------------------------------------------------------- one factory per design


def anchored(backend: Backend, **kw) -> TemplateJudge:
    return TemplateJudge(Design("anchored", pairwise=True, opponent="reference"), backend, **kw)


def commit_first(backend: Backend, **kw) -> TemplateJudge:
    return TemplateJudge(Design("commit_first", pairwise=False, stage1="commitment"), backend, **kw)


def blind_solve(backend: Backend, **kw) -> TemplateJudge:
    return TemplateJudge(Design("blind_solve", pairwise=True, stage1="blind_solution", opponent="artifact"), backend, **kw)


def rubric(backend: Backend, **kw) -> TemplateJudge:
    return TemplateJudge(Design("rubric", pairwise=False, stage1="rubric"), backend, **kw)


def generic(backend: Backend, **kw) -> TemplateJudge:
    return TemplateJudge(Design("generic", pairwise=False, fixed_criteria=P.GENERIC_RUBRIC), backend, **kw)


def certificate(backend: Backend, **kw) -> TemplateJudge:
    """Control: sees the hidden anchor. Pointwise 1-5 adherence to the evaluation_spec's
    must_state / must_not_state; the one named exception to the role boundary."""
    return TemplateJudge(Design("certificate", pairwise=False, reads_certificate=True), backend, **kw)


JUDGES: dict[str, Callable[..., Judge]] = {
    f.__name__: f for f in (anchored, commit_first, blind_solve, rubric, generic, certificate)
}
JUDGES["decisive"] = decisive  # the no-model positive control (judges/decisive.py)
# controls that read the hidden anchor, no model (judges/oracle_reward.py): the negative control and
# the preference probe's check
OFFLINE = ("oracle_verdict", "label_gold", "label_anti")
JUDGES.update({name: oracle_reward.factory(name) for name in OFFLINE})


def build_judge(name: str, backend: Backend, *, adapter: bool = True, identity: str = "",
                params: Mapping[str, Any] | None = None) -> Judge:
    """The judge `name` on `backend`; `adapter=False` runs it with the LoRA adapter off (judge.model=frozen)."""
    if name not in JUDGES:
        raise ValueError(f"unknown reward {name!r}; choose one of {sorted(JUDGES)}")
    if name == "decisive" or name in OFFLINE:
        return JUDGES[name](backend, adapter=adapter, identity=identity, params=params)
    return JUDGES[name](backend, adapter=adapter, identity=identity, params=JudgeParams.from_mapping(name, params))
