"""The judge interface: a batch of (public view, candidate answer) items in, one `Verdict` per item out.

A judge sees an environment only through `PublicView` (question and evidence); the `anchored` judge
additionally reads `JudgeItem.reference`, the reference answer text r(e). Scores lie in [0, 1]; a judge
that cannot score an item returns `score=None` with the reason in `error` — never a silent 0 or tie —
so the failure is counted (`judge/nan_rate`) instead of averaged in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from selfplay.envs.types import PublicView


@dataclass(frozen=True)
class JudgeItem:
    public: PublicView  # the only environment text a judge sees
    answer: str  # candidate answer
    reference: str | None = None  # r(e) text; only the `anchored` judge reads it


@dataclass(frozen=True)
class Verdict:
    score: float | None  # in [0, 1]; None when the judge could not score
    error: str | None  # why score is None
    # verdict-token probabilities read, keyed "<order>:<label>" for pairwise ("ab:A", "ba:B"), "<label>" for pointwise
    probs: Mapping[str, float] = field(default_factory=dict)
    order_scores: tuple[float, ...] = ()  # pairwise: P(candidate wins) per order; pointwise: (score,)
    swap_consistent: bool | None = None  # pairwise: the same answer preferred in both orders
    prompt: str = ""  # the (first) prompt, for auditing
    artifact: str | None = None  # stage-1 artifact used (commitment / blind solution / rubric)

    @property
    def is_nan(self) -> bool:
        return self.score is None


@runtime_checkable
class Judge(Protocol):
    name: str

    def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """One verdict per item, in order."""

    def artifacts(self) -> dict[str, str]:
        """task_id -> stage-1 artifact text generated so far (empty for judges without a stage 1)."""


def build_judge(name, backend, *, adapter=True, identity="", params=None) -> Judge:
    """See `judges.designs.build_judge` (imported lazily: the designs module imports this one)."""
    from .designs import build_judge as _build

    return _build(name, backend, adapter=adapter, identity=identity, params=params)
