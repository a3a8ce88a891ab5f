"""The LLM oracle (audit only): the one prompt allowed to see the hidden anchor.

Impossible environments: the prompt holds question, evidence, `oracle_certificate` and
`evaluation_spec` (its review metadata block left out) and asks whether the answer violates them.
Controls (the control protocol): valid only for the correct grounded verdict, so the prompt holds
the ground-truth conclusion and asks whether the answer fails to reach it — by refusing or by
concluding otherwise. Either way the verdict token "Yes" means violates:
P(violates) = p(Yes) / (p(Yes) + p(No)), violates when P > 0.5; unusable probabilities (see
`scoring.py`) give None with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from selfplay.envs.types import Environment
from selfplay.models.backend import Backend

from . import prompts as P
from . import scoring


@dataclass(frozen=True)
class OracleVerdict:
    p_violates: float | None
    violates: bool | None
    error: str | None
    probs: Mapping[str, float] = field(default_factory=dict)
    prompt: str = ""


def ground_truth_text(env: Environment) -> str:
    gt = env.ground_truth or {}
    text = gt.get("answer") or env.record.get("expected_correct_answer_summary")
    if not text:
        raise ValueError(f"control {env.task_id!r} has no ground_truth.answer for the oracle")
    return str(text)


def oracle_user(env: Environment, answer: str) -> str:
    if env.kind == "control":
        return P.oracle_user_control(env.public, ground_truth_text(env), answer)
    if env.certificate is None or env.evaluation_spec is None:
        raise ValueError(f"impossible environment {env.task_id!r} lacks certificate or evaluation_spec")
    return P.oracle_user_impossible(env.public, env.certificate, env.evaluation_spec, answer)


class LLMOracle:
    """Verifies (environment, answer) pairs; `adapter=False` runs the backend as π_0."""

    def __init__(self, backend: Backend, *, adapter: bool = False, min_mass: float = scoring.MIN_VERDICT_MASS):
        self.backend = backend
        self.adapter = adapter
        self.min_mass = min_mass
        self._ids = scoring.verdict_token_ids(backend.tokenizer, P.ORACLE_LABELS)
        self._prefill = scoring.prefill(backend.tokenizer, P.ORACLE_PREFILL, P.ORACLE_LABELS)

    def prompt(self, env: Environment, answer: str) -> str:
        return self.backend.render(P.messages(P.ORACLE_SYSTEM, oracle_user(env, answer))) + self._prefill

    def verify(self, pairs: Sequence[tuple[Environment, str]]) -> list[OracleVerdict]:
        prompts = [self.prompt(env, answer) for env, answer in pairs]
        if not prompts:
            return []
        rows = self.backend.next_token_logprobs(prompts, scoring.flat_ids(self._ids), adapter=self.adapter)
        out = []
        for row, prompt in zip(rows, prompts, strict=True):
            r = scoring.pairwise_order(scoring.label_probs(row, self._ids), "Yes", self.min_mass)
            violates = None if r.value is None else r.value > 0.5
            out.append(OracleVerdict(r.value, violates, r.error, r.probs, prompt))
        return out
