"""`random`, the null control: a seeded reward that reads nothing.

Self-play moves the policy even when the reward carries no signal (the samples it trains on are its
own, DPO sharpens whatever it is shown, LoRA drifts), so a judge design's effect on the audit is read
as its difference from this reward trained with the same recipe and seeds.

The score of an answer is a uniform draw keyed by (seed, task_id, answer text): it depends on the
text only through its identity, never its content, and the same answer on the same environment gets
the same score at every call, so the audit can rescore a run's answers and a rerun gives the same
pairs. On `candidates: labelled` this is a fixed random orientation of every pair of authored answers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from selfplay.envs.types import PublicView
from selfplay.fields import field_values

from .base import JudgeItem, Verdict, check_candidates
from .registry import register_design


def uniform_score(seed: int, task_id: str, answer: str) -> float:
    """A draw from U[0, 1) fixed by its key; 53 bits of a SHA-256, as many as a float carries."""
    digest = hashlib.sha256(f"{seed}\x00{task_id}\x00{answer}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") >> 11) / float(1 << 53)


@dataclass(frozen=True)
class RandomParams:
    seed: int = 0  # conf/reward/random.yaml ties it to the run's seed
    candidates: str = "policy"  # what the loop scores: judges.base.CANDIDATES

    def __post_init__(self):
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"reward.seed={self.seed!r}: expected an integer >= 0")
        check_candidates(self.candidates)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> RandomParams:
        values = dict(values or {})
        values.pop("name", None)
        return cls(**field_values(cls, values, "unknown reward parameter(s) {unknown} for 'random'; known: {known}"))


class RandomJudge:
    name = "random"
    reads_certificate = False
    reads_anchor = False

    def __init__(self, params: RandomParams):
        self.params = params

    def prepare(self, publics: Sequence[PublicView]) -> None:
        return None

    def artifacts(self) -> dict[str, str]:
        return {}

    def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        out = []
        for item in items:
            s = uniform_score(self.params.seed, item.public.task_id, item.answer)
            out.append(Verdict(score=s, error=None, order_scores=(s,)))
        return out


class RandomDesign:
    name = "random"
    uses_model: ClassVar[bool] = False
    pairwise: ClassVar[bool] = False
    reads_certificate: ClassVar[bool] = False
    reads_anchor: ClassVar[bool] = False

    def params(self, values: Mapping[str, Any] | None) -> RandomParams:
        return RandomParams.from_mapping(values)

    def build(self, backend: Any = None, *, adapter: bool = True, identity: str = "",
              params: RandomParams | None = None) -> RandomJudge:
        return RandomJudge(params or RandomParams())


register_design(RandomDesign())
