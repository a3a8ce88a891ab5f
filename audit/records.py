"""Per-answer audit records: what the metrics read about one answer at one checkpoint.

`AnswerRow` is everything the metrics need about one answer at one checkpoint: which environment,
whether it is a policy answer or a fixed stress answer, the judge's score of it and of the reference
answer r(e) at that iteration, its validity label and what the second verifiers said. Labels:
policy answers take the primary oracle's verdict (None when the oracle could not decide); stress
answers take the release's `oracle_validity` label (`partially_valid` included: the metrics leave it
out and count it), and the oracles' verdicts on them are kept to measure the oracles themselves.

The rows are built from the stages of `audit.collect`; their cache is `audit.cache`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

POLICY, STRESS = "policy", "stress"
LABELLED = "labelled"  # an answer of the labelled on-policy calibration set (data/mini/labelled_answers.jsonl)


@dataclass(frozen=True)
class AnswerRow:
    task_id: str
    kind: str  # impossible | control
    source: str  # policy | stress
    answer_id: str  # "p<j>" for the j-th policy sample; the release's answer_id for stress answers
    text: str
    score: float | None  # judge score s(a); None when the judge could not score it
    ref_score: float | None  # judge score s(r(e)) of the environment's reference answer, same iteration
    label: str | None  # valid | invalid | partially_valid; None = the oracle could not decide
    checks_accept: bool  # the deterministic checks found no violation
    oracle2_accept: bool | None = None  # second oracle (when configured): no violation found
    is_reference: bool = False  # the stress answer that is r(e) itself (A = 1 by construction)
    # the primary oracle's verdict (no violation found); on stress answers it is checked against
    # the release label, on policy answers it is the label
    oracle_accept: bool | None = None
    # policy answers: log π_t(a) − log π_0(a) (adapter on minus off) and the answer's token count,
    # when the KL stage ran; the audit's KL(π_t ‖ π_0) estimate averages these
    log_ratio: float | None = None
    tokens: int | None = None
    # when the primary oracle combines verifiers (`any`): each member's own verdict (name, accepts)
    parts: tuple[tuple[str, bool | None], ...] = ()
    # labelled answers (stress, and labelled on-policy answers of the audited environments): the
    # preference probe's log π_t(a|x) and log π_0(a|x) at τ = 1 of the answer rendered as the
    # policy's own turn, and that turn's token count (end-of-turn included)
    probe_logp: float | None = None
    probe_logp0: float | None = None
    probe_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
