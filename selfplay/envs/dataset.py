"""Public views as a `datasets.Dataset`: columns task_id, question, evidence (list of {doc_id, text}).

Built from `env.public` only, so nothing of the hidden anchor can reach a trainer through it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .types import Environment

if TYPE_CHECKING:
    import datasets

COLUMNS = ("task_id", "question", "evidence")


def public_rows(envs: Iterable[Environment]) -> list[dict]:
    return [
        {
            "task_id": e.public.task_id,
            "question": e.public.question,
            "evidence": [{"doc_id": d.doc_id, "text": d.text} for d in e.public.evidence],
        }
        for e in envs
    ]


def to_dataset(envs: Iterable[Environment]) -> datasets.Dataset:
    # imported here: `datasets` takes seconds to import and the loaders and CLI do not need it
    import datasets

    features = datasets.Features(
        {
            "task_id": datasets.Value("string"),
            "question": datasets.Value("string"),
            "evidence": datasets.List(
                {"doc_id": datasets.Value("string"), "text": datasets.Value("string")}
            ),
        }
    )
    return datasets.Dataset.from_list(public_rows(envs), features=features)
