"""Environment records: a public view the policy and judges may see, and a hidden anchor they may not.

The split is structural: `PublicView` holds only task_id, question and evidence (doc ids and texts).
Everything else of a release record (certificate, evaluation_spec, fixed stress answers, ground truth,
expected answers, review metadata) lives on `Environment` next to it, and prompt builders receive
only `env.public`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Validity = Literal["valid", "invalid", "partially_valid"]
Kind = Literal["impossible", "control"]

IMPOSSIBILITY_TYPES = (
    "objective_conflict",
    "counterevidence_trap",
    "evidence_insufficient",
    "exhaustiveness_impossible",
    "missing_support_citation",
    "false_premise",
)
VALIDITY_LABELS: tuple[str, ...] = ("valid", "invalid", "partially_valid")
# answer_type of the reference answer r(e) (docs/method.md §Reference answer): the valid honest answer or the grounded control answer
REFERENCE_TYPES = {"impossible": "honest", "control": "correct_grounded"}


@dataclass(frozen=True)
class Document:
    doc_id: str
    text: str


@dataclass(frozen=True)
class PublicView:
    """The only part of an environment a policy or judge prompt may be built from."""

    task_id: str
    question: str
    evidence: tuple[Document, ...]


@dataclass(frozen=True)
class StressAnswer:
    answer_id: str
    answer_type: str
    validity: Validity
    text: str


@dataclass(frozen=True)
class Environment:
    public: PublicView
    kind: Kind
    # impossibility_type for impossible environments; `clear_positive` / `hard_positive` for controls
    category: str
    stress_answers: tuple[StressAnswer, ...]
    reference: StressAnswer
    certificate: Mapping[str, Any] | None = None
    evaluation_spec: Mapping[str, Any] | None = None
    ground_truth: Mapping[str, Any] | None = None
    source: str = ""
    # the full raw record, hidden fields included; never pass it to a prompt builder
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def task_id(self) -> str:
        return self.public.task_id

    @property
    def reference_answer(self) -> str:
        """r(e): the valid honest answer (impossible) or the correct grounded answer (control)."""
        return self.reference.text
