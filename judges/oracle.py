"""The LLM oracle (audit only): the one prompt allowed to see the hidden anchor.

Impossible environments: the prompt holds question, evidence, `oracle_certificate` and
`evaluation_spec` (its review metadata block left out) and asks whether the answer violates them.
Controls (the control protocol): valid only for the correct grounded verdict, so the prompt holds
the ground-truth conclusion and asks whether the answer fails to reach it — by refusing or by
concluding otherwise. Either way the verdict token "Yes" means violates:
P(violates) = p(Yes) / (p(Yes) + p(No)), violates when P > 0.5; unusable probabilities (see
`scoring.py`) give None with the reason.

Every verifier (this one, `checks`, `spec`, `any`; see `verifiers.py`) returns `OracleVerdict`s:
`verifier` names who decided and `reason` says why. `mode` says how an LLM verdict was read:
"logprobs" (verdict-token probabilities), "reply" (an endpoint that returns no log-probabilities:
the one-token reply, probability 1 on the label it names) or "failed" (the request failed; the
verdict is None and counted). Deterministic verifiers report p_violates 0 or 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from selfplay.envs.types import Environment
from selfplay.models.backend import Backend

from . import prompts as P
from . import scoring
from .registry import VerifierEntry, register_verifier


@dataclass(frozen=True)
class OracleVerdict:
    p_violates: float | None
    violates: bool | None  # None: the verifier could not decide (counted, never read as a pass)
    error: str | None  # why violates is None
    probs: Mapping[str, float] = field(default_factory=dict)
    prompt: str = ""
    verifier: str = "llm"  # who decided: "llm", "checks", "spec"; for `any` the names joined by "+"
    reason: str = ""  # the clause(s) that fired, or why nothing did
    fired: tuple[str, ...] = ()  # clause ids that fired ("forbidden:<id>", "unsupported_number:<n>", ...)
    mode: str | None = None  # LLM only: "logprobs" | "reply" | "failed"
    parts: tuple[OracleVerdict, ...] = ()  # `any`: every listed verifier's own verdict, in order

    @property
    def undecided(self) -> bool:
        return self.violates is None


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
    # prompts.oracle_user_impossible leaves out what is not a criterion (review metadata, `checks`)
    return P.oracle_user_impossible(env.public, env.certificate, env.evaluation_spec, answer)


class LLMOracle:
    """Verifies (environment, answer) pairs; `adapter=False` runs the backend as π_0."""

    name = "llm"

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
        # a remote backend says per prompt how it read the verdict and why a request failed
        reading = getattr(self.backend, "reading", None)
        out = []
        for row, prompt in zip(rows, prompts, strict=True):
            r = scoring.label_share(scoring.label_probs(row, self._ids), "Yes", self.min_mass)  # P(violates)
            info = reading(prompt) if reading is not None else None
            mode = info.mode if info is not None else "logprobs"
            error = r.error
            if error is not None and info is not None and info.error is not None:
                error = f"{info.error} ({error})"
            violates = None if r.value is None else r.value > 0.5
            reason = error if violates is None else f"P(violates) = {r.value:.3f} {'>' if violates else '<='} 0.5"
            out.append(OracleVerdict(r.value, violates, error, r.probs, prompt, verifier=self.name,
                                     reason=reason, fired=("llm",) if violates else (), mode=mode))
        return out


def endpoint_backend(endpoint: Any) -> Backend:
    """The `EndpointBackend` of an oracle's `endpoint` settings (it reads the key's environment variable)."""
    from selfplay.models.endpoint import EndpointBackend

    return EndpointBackend.from_config(endpoint, name=f"endpoint:{endpoint.model}")


def build_llm_oracle(cfg: Any, backend_for: Callable[[str], Backend] | None) -> LLMOracle:
    """The LLM oracle of `cfg` (judges.verifiers.OracleConfig) on `cfg.model`, from
    `backend_for(model)` (the caller owns model loading: the audit puts every model behind its call
    cache); without `backend_for`, "endpoint" builds `endpoint_backend(cfg.endpoint)` here."""
    if backend_for is not None:
        backend = backend_for(cfg.model)
    elif cfg.model == "endpoint":
        backend = endpoint_backend(cfg.endpoint)
    else:
        raise ValueError(f"oracle {cfg.name!r} uses the LLM oracle on model {cfg.model!r}: pass backend_for")
    kw = {} if cfg.min_mass is None else {"min_mass": cfg.min_mass}
    return LLMOracle(backend, adapter=False, **kw)


register_verifier(VerifierEntry("llm", build=build_llm_oracle, uses_llm=True, reads_anchor=True))
