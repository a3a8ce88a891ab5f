"""The judge interface: a batch of (public view, candidate answer) items in, one `Verdict` per item out.

A judge sees an environment only through `PublicView` (question and evidence); the `anchored` judge
additionally reads `JudgeItem.reference`, the reference answer r(e). The one named exception to the
role boundary is the `certificate` judge (control: sees the hidden anchor), which reads
`JudgeItem.certificate`, the `must_state` / `must_not_state` lists of the environment's
`evaluation_spec`; `judge_item` fills that field for it and for no other design, so callers build
items with `judge_item(judge, env, answer)` and never decide themselves what a judge may see.
Scores lie in [0, 1]; a judge that cannot score an item returns `score=None` with the reason in
`error` — never a silent 0 or tie — so the failure is counted (`judge/nan_rate`) instead of
averaged in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from selfplay.envs.types import Environment, PublicView

# What the training loop scores each iteration, a parameter every reward takes: `policy` (k samples of
# π_{t-1}), `labelled` (the train environment's authored stress answers, no sampling) or `mixed` (both
# in one pool, so a judge can prefer an authored answer over a sample and the reverse).
CANDIDATES = ("policy", "labelled", "mixed")


def check_candidates(value: Any) -> None:
    if value not in CANDIDATES:
        raise ValueError(f"candidates={value!r}: expected one of {', '.join(CANDIDATES)}")


@dataclass(frozen=True)
class JudgeItem:
    public: PublicView  # the only environment text a judge sees
    answer: str  # candidate answer
    reference: str | None = None  # r(e) text; only the `anchored` judge reads it
    # hidden anchor: evaluation_spec text (`certificate_text`); only the `certificate` control reads it
    certificate: str | None = None
    # hidden anchor: the whole environment; only the oracle-reward controls (judges.oracle_reward) read it
    anchor: Environment | None = None


@dataclass(frozen=True)
class Verdict:
    score: float | None  # in [0, 1]; None when the judge could not score
    error: str | None  # why score is None
    # verdict-token probabilities read, keyed "<order>:<label>" for pairwise ("ab:A", "ba:B"), "<label>" for pointwise
    probs: Mapping[str, float] = field(default_factory=dict)
    # one reading per scoring prompt, in the order of `prompts`: pairwise P(candidate wins) in order ab,
    # then ba; pointwise (score,); None where that prompt's probabilities were unusable (see `error`)
    order_scores: tuple[float | None, ...] = ()
    swap_consistent: bool | None = None  # pairwise: the same answer preferred in both orders
    # the scoring prompts, aligned with `order_scores` (pairwise: order ab, order ba), for auditing;
    # empty for a judge that reads no prompt (`decisive`)
    prompts: tuple[str, ...] = ()
    artifact: str | None = None  # stage-1 artifact used (commitment / blind solution / rubric)

    def __post_init__(self) -> None:
        if self.prompts and len(self.prompts) != len(self.order_scores):
            raise ValueError(f"a verdict keeps one order score per prompt: {len(self.prompts)} prompts, "
                             f"order_scores {self.order_scores}")

    @property
    def prompt(self) -> str:
        """The first scoring prompt (order ab for pairwise), "" when there is none."""
        return self.prompts[0] if self.prompts else ""

    @property
    def is_nan(self) -> bool:
        return self.score is None


@runtime_checkable
class Judge(Protocol):
    name: str
    # True only for the `certificate` control: `judge_item` then fills JudgeItem.certificate
    reads_certificate: bool
    # True only for the oracle-reward controls (judges.oracle_reward): `judge_item` fills JudgeItem.anchor
    reads_anchor: bool

    def prepare(self, publics: Sequence[PublicView]) -> None:
        """Generate the stage-1 artifacts of many environments at once (batched greedy calls), so
        that scoring them later finds every artifact cached; a no-op for a judge without a stage 1."""

    def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """One verdict per item, in order."""

    def artifacts(self) -> dict[str, str]:
        """task_id -> stage-1 artifact text generated so far (empty for judges without a stage 1)."""


def judge_row(v: Verdict) -> dict[str, Any]:
    """The JSON row the training loop and the audit keep of a verdict (strict JSON: a non-finite
    reading is None; of the prompts, the first)."""
    return {"score": _finite(v.score), "error": v.error, "probs": {k: _finite(p) for k, p in v.probs.items()},
            "order_scores": [_finite(s) for s in v.order_scores], "swap_consistent": v.swap_consistent,
            "artifact": v.artifact, "prompt": v.prompt}


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def certificate_text(env: Environment) -> str:
    """The `certificate` control's criteria: `must_state` and `must_not_state` of the environment's
    `evaluation_spec` (hidden anchor). A control without an evaluation_spec (the release's controls)
    gets the oracle's control protocol instead: it must state the ground-truth conclusion and must
    not refuse, hedge it away or conclude otherwise."""
    from . import prompts as P

    spec = env.evaluation_spec or {}
    must, must_not = list(spec.get("must_state") or []), list(spec.get("must_not_state") or [])
    if must or must_not:
        return P.certificate_text([str(x) for x in must], [str(x) for x in must_not])
    if env.kind == "control":
        from .oracle import ground_truth_text

        return P.certificate_text(
            [f"The ground-truth conclusion: {ground_truth_text(env)}"],
            ["A refusal, or a hedge that withholds this conclusion.", "A different or opposite conclusion."],
        )
    raise ValueError(f"task {env.task_id!r}: evaluation_spec has no must_state or must_not_state for the certificate judge")


def judge_item(judge: Judge, env: Environment, answer: str) -> JudgeItem:
    """The item for scoring `answer` on `env` with `judge`: public view, r(e) (read by `anchored` only)
    and, only when the judge declares `reads_certificate` (the `certificate` control), the hidden
    evaluation_spec text."""
    cert = certificate_text(env) if judge.reads_certificate else None
    return JudgeItem(env.public, answer, env.reference_answer, cert,
                     env if judge.reads_anchor else None)



@dataclass(frozen=True)
class AnswerScorer:
    """`judge` scoring answers to one environment, each answer's JudgeItem built by `judge_item`: what
    a reader of the judge (the audit, judge evaluation) needs of it."""

    judge: Judge

    def score(self, env: Environment, answers: Sequence[str]) -> list[Verdict]:
        return self.judge.score([judge_item(self.judge, env, a) for a in answers])
