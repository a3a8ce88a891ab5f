"""Checks beyond the release's JSON Schema, and turning a checked record into an `Environment`.

A record is first validated against its schema; only a schema-valid record gets the checks below, so
one fault yields one error rather than a cascade. Our checks:
  - `question` is a non-empty string (not just whitespace);
  - `evidence` is non-empty, every item has non-empty `text`, and `doc_id`s are non-empty and unique;
  - every fixed stress answer has a known label (`valid` / `invalid` / `partially_valid`), non-empty
    text and a unique `answer_id`;
  - exactly one reference answer r(e) (docs/method.md §Reference answer): an `honest` answer labelled `valid` (impossible) or a
    `correct_grounded` answer labelled `valid` (control). A record may hold several valid answers of
    that type (a paraphrase of r(e), worded differently); then r(e) is the one whose `answer_id`
    equals the type (`honest` / `correct_grounded`) — the release's control schema admits only three
    answer types, so a control's paraphrase must share `correct_grounded`.
  - `evaluation_spec.checks`, when present, is well formed (`checks_schema.py`).
Uniqueness of `task_id` across files is a property of a whole load and lives in `load.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .checks_schema import checks_errors
from .schema import Schemas
from .types import (
    REFERENCE_TYPES,
    VALIDITY_LABELS,
    Document,
    Environment,
    Kind,
    PublicView,
    StressAnswer,
)

CONTROL_ENV_TYPE = "answerable_control"


def detect_kind(record: Mapping[str, Any]) -> Kind | None:
    """Kind of a record seen without its directory (JSONL): None when it cannot be told."""
    impossible = "impossibility_type" in record
    control = record.get("env_type") == CONTROL_ENV_TYPE or "ground_truth" in record
    if impossible == control:
        return None
    return "impossible" if impossible else "control"


def _nonblank(x: Any) -> bool:
    return isinstance(x, str) and x.strip() != ""


def own_errors(record: Mapping[str, Any], kind: Kind) -> list[tuple[str, str]]:
    errs: list[tuple[str, str]] = []
    if not _nonblank(record.get("question")):
        errs.append(("question", "question must be a non-empty string"))

    evidence = record.get("evidence")
    if not isinstance(evidence, list) or not evidence:
        errs.append(("evidence", "evidence must be a non-empty list of documents"))
        evidence = []
    seen_docs: set[str] = set()
    for i, doc in enumerate(evidence):
        doc_id = doc.get("doc_id")
        if not _nonblank(doc_id):
            errs.append((f"evidence[{i}].doc_id", "doc_id must be a non-empty string"))
        elif doc_id in seen_docs:
            errs.append((f"evidence[{i}].doc_id", f"duplicate doc_id {doc_id!r}"))
        else:
            seen_docs.add(doc_id)
        if not _nonblank(doc.get("text")):
            errs.append((f"evidence[{i}].text", "evidence text must be non-empty"))

    answers = record.get("fixed_stress_answers") or []
    seen_answers: set[str] = set()
    for i, ans in enumerate(answers):
        if ans.get("oracle_validity") not in VALIDITY_LABELS:
            errs.append(
                (
                    f"fixed_stress_answers[{i}].oracle_validity",
                    f"unknown label {ans.get('oracle_validity')!r}; expected one of {VALIDITY_LABELS}",
                )
            )
        if not _nonblank(ans.get("text")):
            errs.append((f"fixed_stress_answers[{i}].text", "stress answer text must be non-empty"))
        if ans.get("answer_id") in seen_answers:
            errs.append(
                (
                    f"fixed_stress_answers[{i}].answer_id",
                    f"duplicate answer_id {ans.get('answer_id')!r}",
                )
            )
        seen_answers.add(ans.get("answer_id"))
    want = REFERENCE_TYPES[kind]
    refs = reference_candidates(answers, want)
    if len(refs) != 1:
        typed = [a for a in answers if a.get("answer_type") == want and a.get("oracle_validity") == "valid"]
        errs.append(
            (
                "fixed_stress_answers",
                f"expected exactly one reference answer (answer_type {want!r}, oracle_validity "
                f"'valid', answer_id {want!r} when there are several), found {len(refs) or len(typed)}",
            )
        )
    return errs


def reference_candidates(answers, want: str) -> list:
    """The answers that qualify as r(e): valid ones of type `want`, narrowed by answer_id when several."""
    def get(a, key):
        return a.get(key) if isinstance(a, Mapping) else getattr(a, key)

    valid = [a for a in answers if get(a, "answer_type") == want
             and get(a, "oracle_validity" if isinstance(a, Mapping) else "validity") == "valid"]
    if len(valid) > 1:
        valid = [a for a in valid if get(a, "answer_id") == want]
    return valid


def record_errors(record: Any, kind: Kind, schemas: Schemas) -> list[tuple[str, str]]:
    """(field, message) pairs for one record; empty means it can be built."""
    if not isinstance(record, dict):
        return [("", f"a record must be a JSON object, got {type(record).__name__}")]
    return schemas.errors(record, kind) or own_errors(record, kind) or checks_errors(record, kind)


def category(record: Mapping[str, Any], kind: Kind) -> str:
    if kind == "impossible":
        return record["impossibility_type"]
    # a hard positive is an answerable question dressed up as one of the impossibility types
    return "hard_positive" if record.get("looks_like_impossibility_type") else "clear_positive"


def build_environment(record: Mapping[str, Any], kind: Kind, source: str) -> Environment:
    """An `Environment` from a record that passed `record_errors`."""
    public = PublicView(
        task_id=record["task_id"],
        question=record["question"],
        evidence=tuple(Document(d["doc_id"], d["text"]) for d in record["evidence"]),
    )
    answers = tuple(
        StressAnswer(a["answer_id"], a["answer_type"], a["oracle_validity"], a["text"])
        for a in record["fixed_stress_answers"]
    )
    want = REFERENCE_TYPES[kind]
    (reference,) = reference_candidates(answers, want)
    return Environment(
        public=public,
        kind=kind,
        category=category(record, kind),
        stress_answers=answers,
        reference=reference,
        certificate=record.get("oracle_certificate"),
        evaluation_spec=record.get("evaluation_spec"),
        ground_truth=record.get("ground_truth"),
        source=source,
        record=record,
    )
