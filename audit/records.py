"""Per-answer audit records: what the metrics read about one answer at one checkpoint.

`AnswerRow` is everything the metrics need about one answer at one checkpoint: which environment,
whether it is a policy answer or a fixed stress answer, the judge's score of it and of the reference
answer r(e) at that iteration, its validity label and what each verifier said (`accepts`, keyed by
the verifier's role, so a new verifier needs no new field). Labels: policy answers take the primary
oracle's verdict (None when the oracle could not decide); stress answers take the release's
`oracle_validity` label (`partially_valid` included: the metrics leave it out and count it), and the
oracles' verdicts on them are kept to measure the oracles themselves.

The rows are built from the stages of `audit.collect`; their cache is `audit.cache`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from . import stats as S

POLICY, STRESS = "policy", "stress"
LABELLED = "labelled"  # an answer of the labelled on-policy calibration set (data/mini/labelled_answers.jsonl)
# the verifier roles of an audit, primary first; a member of a combined primary oracle is `member(name)`
ORACLE, ORACLE2, CHECKS = "oracle", "oracle2", "checks"


def member(name: str) -> str:
    """The role of member `name` of a combined primary oracle (`any`)."""
    return f"{ORACLE}/{name}"


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
    # role -> that verifier's verdict: True = no violation found, False = a violation, None = undecided;
    # a role with no entry was not run. `oracle` (the primary) is checked against the release label
    # on stress answers and is the label on policy answers; `member(name)` are the members of a
    # combined primary oracle (`any`). Read-only; left out of the hash (a mapping has none).
    accepts: Mapping[str, bool | None] = field(default_factory=dict, hash=False)
    is_reference: bool = False  # the stress answer that is r(e) itself (A = 1 by construction)
    # policy answers: log π_t(a) − log π_0(a) (adapter on minus off) and the answer's token count,
    # when the KL stage ran; the audit's KL(π_t ‖ π_0) estimate averages these
    log_ratio: float | None = None
    tokens: int | None = None
    # labelled answers (stress, and labelled on-policy answers of the audited environments): the
    # preference probe's log π_t(a|x) and log π_0(a|x) at τ = 1 of the answer rendered as the
    # policy's own turn, and that turn's token count (end-of-turn included)
    probe_logp: float | None = None
    probe_logp0: float | None = None
    probe_tokens: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "accepts", MappingProxyType(dict(self.accepts)))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"accepts": dict(self.accepts)}


@dataclass(frozen=True)
class StatsSettings:
    seed: int = 0  # the audit's seed: with the run's seed and t it seeds every bootstrap
    B: int = S.DEFAULT_B  # bootstrap resamples of environments
    alpha: float = 0.05  # 1 − interval level
    max_rel_diff: float = 0.2  # length-matched AUROC: pairs whose lengths differ by less than this

    def __post_init__(self):
        S.check_B(self.B)
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1); got {self.alpha}")


@dataclass(frozen=True)
class MetricValue:
    value: float  # NaN when undefined (e.g. no invalid answer for an FPR)
    ci_low: float
    ci_high: float
    n: int  # the metric's denominator: answers, answer pairs (AUROC) or invalid answers (IBE)
    n_partial: int = 0  # partially_valid answers left out
    n_unscored: int = 0  # answers the judge (or a verifier) did not score, left out
    n_undefined: int = 0  # bootstrap replicates whose statistic was undefined (left out of the interval)


@dataclass(frozen=True)
class IterationAudit:
    metrics: dict[str, MetricValue]
    counts: dict[str, int]
    # kind -> task_id -> per policy sample: 1[A ∧ ¬valid] (the VA-Gap event), None where undefined;
    # paired across rewards by (seed, task_id, sample) for McNemar in the report
    exploit: dict[str, dict[str, list[int | None]]]
    # metrics that are undefined by construction, with the reason (written `undefined`, never a number)
    undefined: dict[str, str] = dataclasses.field(default_factory=dict)
    # metric -> task_id -> the environment's value, for the means over environments (the probe):
    # what a paired contrast between rewards and the seeds' combination read (audit.contrasts)
    per_env: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
