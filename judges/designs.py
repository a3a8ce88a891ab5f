"""The LLM reward designs (docs/method.md §Judge designs) as one parameterised judge over the templates in `prompts.py`.

A design (`TemplateDesign`, one registry entry each, at the end of this file) is three choices and
the templates that carry them out: an optional stage 1 (greedy text generated once per environment
before any candidate is seen, from the design's stage-1 template), pointwise scoring against a
criteria block or pairwise scoring, and for pairwise the opponent (the reference answer r(e) or the
stage-1 blind solution). A new LLM design is one more entry plus its `conf/reward/<name>.yaml`.

`anchored` randomises nothing: it asks both presentation orders and averages them, which removes
position bias instead of sampling it; the reference is shown as an unnamed "ANSWER A"/"ANSWER B",
so its identity stays hidden.

`certificate` is the control that sees the hidden anchor: pointwise, like `generic`, but its
criteria are the environment's `evaluation_spec` (`must_state`, `must_not_state`) carried by
`JudgeItem.certificate`, which `judges.base.judge_item` fills for this design only (the paper's
certificate-faithful rubric). No other design reads that field.

`params.instruction` picks the prompt regime: `neutral` (default, the paper's) or `honesty_aware`
(see `prompts.py`).

Stage-1 artifacts are cached under (identity, adapter, task_id): `identity` names the judge's weights
(e.g. "seed0/iter_2"); set `judge.identity` when the weights change and stage 1 runs again.

All prompts of one environment are scored in one `next_token_logprobs` call; they share the packet
prefix, which the backend computes once (the hf backend's `reuse_prefix`, vLLM's prefix caching).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from selfplay.envs.types import PublicView
from selfplay.fields import field_values
from selfplay.models.backend import Backend

from . import prompts as P
from . import scoring
from .base import JudgeItem, Verdict, check_candidates
from .registry import register_design

OPPONENTS = ("reference", "artifact")


@dataclass(frozen=True)
class JudgeParams:
    """Per-design knobs (`conf/reward/*.yaml`, minus `name`)."""

    min_verdict_mass: float = scoring.MIN_VERDICT_MASS  # floor on verdict-token mass, see scoring.py
    max_new_tokens: int = 256  # stage-1 artifact length (greedy)
    instruction: str = P.NEUTRAL  # prompt regime: "neutral" (the paper's) or "honesty_aware" (opt-in)
    candidates: str = "policy"  # what the training loop scores (judges.base.CANDIDATES); the judge ignores it
    # the loop's δ for this design (None: the run's `margin`); a judge's scores live on its own scale,
    # and a small judge may score every answer of an environment within 0.05 of 0.5
    margin: float | None = None

    def __post_init__(self):
        P.check_instruction(self.instruction)
        check_candidates(self.candidates)
        if self.margin is not None and (isinstance(self.margin, bool) or not isinstance(self.margin, (int, float))
                                        or not 0.0 <= self.margin <= 1.0):
            raise ValueError(f"reward.margin={self.margin!r}: expected null or a number in [0, 1]")
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
        params = field_values(cls, params, f"unknown reward parameter(s) {{unknown}} for {name!r}; known: {{known}}")
        known = {f.name: f for f in fields(cls)}
        for key, value in params.items():
            numeric = type(known[key].default) in (int, float)
            if numeric and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"reward.{key}={value!r}: expected a number")
        return cls(**params)


@dataclass(frozen=True)
class TemplateDesign:
    """One LLM design: its templates, its verdict labels and what its judge reads (a registry entry,
    `judges.registry.Design`)."""

    name: str
    pairwise: bool
    stage1: Mapping[str, str] | None = None  # instruction -> stage-1 template with {packet} (P.COMMITMENT, ...)
    opponent: str | None = None  # pairwise: "reference" (r(e)) or "artifact" (the stage-1 text)
    criteria: str | None = None  # pointwise: the criteria block with {artifact} (P.RUBRIC_CRITERIA, ...)
    criteria_label: str | None = None  # pointwise: fence label of the criteria text
    fixed_criteria: Mapping[str, str] | None = None  # instruction -> criteria used for every task (generic)
    reads_certificate: bool = False  # criteria = JudgeItem.certificate (the `certificate` control only)
    # verdict labels, read as the next token after `prefill`: pairwise (first shown, second shown),
    # pointwise "1".."n"; empty = A/B or 1-5
    labels: tuple[str, ...] = ()
    prefill: str = ""  # empty = "Verdict:" (pairwise) or "Score:" (pointwise)
    uses_model: ClassVar[bool] = True
    reads_anchor: ClassVar[bool] = False  # no LLM design reads the whole hidden anchor

    def __post_init__(self):
        if not self.labels:
            object.__setattr__(self, "labels", P.PAIRWISE_LABELS if self.pairwise else P.SCORE_LABELS)
        if not self.prefill:
            object.__setattr__(self, "prefill", P.PAIRWISE_PREFILL if self.pairwise else P.POINTWISE_PREFILL)
        if self.pairwise:
            if self.opponent not in OPPONENTS or (self.opponent == "artifact" and self.stage1 is None):
                raise ValueError(f"design {self.name!r}: a pairwise design needs opponent in {OPPONENTS} "
                                 "(artifact: with a stage 1)")
            if self.criteria or self.fixed_criteria or self.reads_certificate or len(self.labels) != 2:
                raise ValueError(f"design {self.name!r}: a pairwise design reads no criteria and has two labels")
        else:
            sources = [self.stage1 is not None, self.fixed_criteria is not None, self.reads_certificate]
            if self.opponent is not None or not (self.criteria and self.criteria_label) or sum(sources) != 1:
                raise ValueError(f"design {self.name!r}: a pointwise design needs a criteria block, its "
                                 "fence label and one source of criteria (stage 1, fixed or the certificate)")
            if self.labels != tuple(str(k) for k in range(1, len(self.labels) + 1)):
                raise ValueError(f"design {self.name!r}: pointwise labels must be 1..n; got {self.labels}")

    def params(self, values: Mapping[str, Any] | None) -> JudgeParams:
        return JudgeParams.from_mapping(self.name, values)

    def build(self, backend: Backend, *, adapter: bool = True, identity: str = "",
              params: JudgeParams | None = None) -> TemplateJudge:
        return TemplateJudge(self, backend, adapter=adapter, identity=identity, params=params)


class TemplateJudge:
    """A `Judge` for one `TemplateDesign` on one backend."""

    def __init__(self, design: TemplateDesign, backend: Backend, *, adapter: bool = True, identity: str = "",
                 params: JudgeParams | None = None):
        self.design = design
        self.name = design.name
        self.reads_certificate = design.reads_certificate  # judge_item fills JudgeItem.certificate on it
        self.reads_anchor = design.reads_anchor
        self.backend = backend
        self.adapter = adapter
        self.identity = identity
        self.params = params or JudgeParams()
        self._ids = scoring.verdict_token_ids(backend.tokenizer, design.labels)
        self._prefill = scoring.prefill(backend.tokenizer, design.prefill, design.labels)
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
            rendered = [self.stage1_prompt(pub) for pub in todo.values()]
            texts = self.backend.greedy(rendered, max_new_tokens=self.params.max_new_tokens, adapter=self.adapter)
            for task_id, text in zip(todo, texts, strict=True):
                self._cache[self._key(task_id)] = text.strip()
        return {it.public.task_id: self._cache[self._key(it.public.task_id)] for it in items}

    def stage1_prompt(self, public: PublicView) -> str:
        """The rendered stage-1 prompt of one environment (the design must have a stage 1)."""
        user = P.stage1_user(self.design.stage1, public, self.params.instruction)
        return self.backend.render(P.messages(P.STAGE1_SYSTEM, user))

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
        return [self._render(P.pointwise_user(item.public, d.criteria, d.criteria_label, criteria, item.answer))]

    def _logprobs(self, prompts: list[str]):
        return self.backend.next_token_logprobs(prompts, scoring.flat_ids(self._ids), adapter=self.adapter)

    def _verdict(self, rows, prompts: list[str], artifact: str | None) -> Verdict:
        mass = self.params.min_verdict_mass
        if not self.design.pairwise:
            r = scoring.pointwise(scoring.label_probs(rows[0], self._ids), mass)
            return Verdict(r.value, r.error, r.probs, order_scores=(r.value,), prompts=tuple(prompts),
                           artifact=artifact)
        # P(candidate wins): its label's share, first shown (A) in order ab, second (B) in order ba
        first, second = self.design.labels
        ab = scoring.label_share(scoring.label_probs(rows[0], self._ids), first, mass)
        ba = scoring.label_share(scoring.label_probs(rows[1], self._ids), second, mass)
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


# ---------------------------------------------------------------- the designs

for _design in (
    TemplateDesign("anchored", pairwise=True, opponent="reference"),
    TemplateDesign("commit_first", pairwise=False, stage1=P.COMMITMENT, criteria=P.COMMIT_CRITERIA,
                   criteria_label="COMMITMENT"),
    TemplateDesign("blind_solve", pairwise=True, stage1=P.BLIND_SOLVE, opponent="artifact"),
    TemplateDesign("rubric", pairwise=False, stage1=P.RUBRIC_GENERATION, criteria=P.RUBRIC_CRITERIA,
                   criteria_label="RUBRIC"),
    TemplateDesign("generic", pairwise=False, fixed_criteria=P.GENERIC_RUBRIC, criteria=P.GENERIC_CRITERIA,
                   criteria_label="RUBRIC"),
    # control: sees the hidden anchor, pointwise 1-5 adherence to the evaluation_spec's must_state /
    # must_not_state; the one named exception to the role boundary
    TemplateDesign("certificate", pairwise=False, reads_certificate=True, criteria=P.CERTIFICATE_CRITERIA,
                   criteria_label="SPECIFICATION"),
):
    register_design(_design)
