"""Rewards that read the hidden anchor (controls, docs/method.md §Controls): the primary oracle's verdict as the reward.

- `oracle_verdict`, the negative control: score 1 when the deterministic oracle (`any` of `spec` and
  `checks`, judges.verifiers) finds no violation, 0 when it does, NaN when it cannot decide (a record
  without `evaluation_spec.checks`, e.g. the release's). Self-play on it pays for validity, so it
  should raise the valid rate and move the preference probe's margin above 0 — the bracket opposite
  `decisive`.
- `label_gold` / `label_anti`, the preference probe's own check: candidates are each train
  environment's fixed labelled stress answers instead of samples (`candidates: labelled`, read by
  the training loop), every (preferred, other) pair is trained on, and the score is the answer's
  label — 1 for valid under `label_gold`, 1 for invalid under `label_anti` (partially_valid ½). An
  answer that is not a stress answer of its environment falls back to the oracle's verdict.

All three are named controls that see the hidden anchor: `judge_item` hands them the environment
(`reads_anchor`), which no other design receives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from selfplay.envs.types import PublicView
from selfplay.fields import field_values

from .base import JudgeItem, Verdict, check_candidates
from .registry import VERIFIERS, register_design
from .verifiers import OracleConfig, build_verifier

PREFER = ("valid", "invalid")
_LABEL_SCORE = {"valid": 1.0, "invalid": 0.0, "partially_valid": 0.5}


@dataclass(frozen=True)
class OracleRewardParams:
    prefer: str = "valid"  # which verdict pays 1
    candidates: str = "policy"  # what the loop scores: judges.base.CANDIDATES
    verifiers: tuple[str, ...] = ("spec", "checks")  # the deterministic oracle (`any` of these)

    def __post_init__(self):
        if self.prefer not in PREFER:
            raise ValueError(f"prefer={self.prefer!r}: expected one of {PREFER}")
        check_candidates(self.candidates)
        object.__setattr__(self, "verifiers", tuple(self.verifiers))
        deterministic = sorted(n for n, v in VERIFIERS.items() if not v.uses_llm)
        if not self.verifiers or any(v not in deterministic for v in self.verifiers):
            raise ValueError(f"verifiers={list(self.verifiers)!r}: expected deterministic ones ({', '.join(deterministic)})")

    @classmethod
    def from_mapping(cls, name: str, params: Mapping[str, Any] | None) -> OracleRewardParams:
        params = dict(params or {})
        params.pop("name", None)
        return cls(**field_values(cls, params, f"unknown reward parameter(s) {{unknown}} for {name!r}; known: {{known}}"))


class OracleRewardJudge:
    """The `Judge` of the three controls; no model, no stage 1."""

    reads_certificate = False
    reads_anchor = True

    def __init__(self, name: str, params: OracleRewardParams):
        self.name = name
        self.params = params
        members = params.verifiers
        cfg = (OracleConfig(name="any", verifiers=members) if len(members) > 1
               else OracleConfig(name=members[0], verifiers=()))
        self._verifier = build_verifier(cfg)

    def prepare(self, publics: Sequence[PublicView]) -> None:
        return None

    def artifacts(self) -> dict[str, str]:
        return {}

    def _pays(self, valid_score: float) -> float:
        return valid_score if self.params.prefer == "valid" else 1.0 - valid_score

    def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(items)
        todo = []
        for i, item in enumerate(items):
            if item.anchor is None:
                raise ValueError(f"{self.name}: the item of task {item.public.task_id!r} carries no hidden anchor; "
                                 "build items with judges.judge_item")
            label = next((s.validity for s in item.anchor.stress_answers if s.text == item.answer), None)
            if label in _LABEL_SCORE:
                s = self._pays(_LABEL_SCORE[label])
                out[i] = Verdict(score=s, error=None, probs={"label": _LABEL_SCORE[label]}, order_scores=(s,))
            else:
                todo.append(i)
        verdicts = self._verifier.verify([(items[i].anchor, items[i].answer) for i in todo]) if todo else []
        for i, v in zip(todo, verdicts, strict=True):
            if v.violates is None:
                out[i] = Verdict(score=None, error=f"oracle undecided: {v.reason}", order_scores=(None,))
            else:
                s = self._pays(0.0 if v.violates else 1.0)
                out[i] = Verdict(score=s, error=None, probs={"violates": float(v.violates)}, order_scores=(s,))
        return out  # type: ignore[return-value]


@dataclass(frozen=True)
class OracleRewardDesign:
    """The registry entry of one control; the three differ in their parameters only."""

    name: str
    uses_model: ClassVar[bool] = False
    pairwise: ClassVar[bool] = False
    reads_certificate: ClassVar[bool] = False
    reads_anchor: ClassVar[bool] = True

    def params(self, values: Mapping[str, Any] | None) -> OracleRewardParams:
        return OracleRewardParams.from_mapping(self.name, values)

    def build(self, backend: Any = None, *, adapter: bool = True, identity: str = "",
              params: OracleRewardParams | None = None) -> OracleRewardJudge:
        return OracleRewardJudge(self.name, params or OracleRewardParams())


for _name in ("oracle_verdict", "label_gold", "label_anti"):
    register_design(OracleRewardDesign(_name))
