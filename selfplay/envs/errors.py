"""Load errors that say where a record went wrong.

Every problem found while loading environments or split manifests becomes one `EnvError` naming the
file (and line, for JSONL), the record's `task_id` and the field, as a dotted path such as
`fixed_stress_answers[2].oracle_validity`. Loaders collect all of them and raise a single
`EnvLoadError`, so a user sees every problem at once and no caller ever gets a half-loaded set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvError(Exception):
    file: str
    task_id: str | None
    field: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        task = "?" if self.task_id is None else repr(self.task_id)
        return f"{where}: task_id={task} field={self.field or '(record)'}: {self.message}"


SHOWN = 5  # errors a message lists before it counts the rest


def summarise(errors: Sequence[object], shown: int = SHOWN) -> list[str]:
    """The first `shown` errors, then one line counting the rest: thousands of bad records must not
    print thousands of lines (`python -m selfplay.envs PATH` lists every one)."""
    lines = [str(e) for e in errors[:shown]]
    if len(errors) > shown:
        lines.append(f"... and {len(errors) - shown} more; `python -m selfplay.envs PATH` lists every one")
    return lines


class EnvLoadError(Exception):
    """Raised once per load with every `EnvError` found; nothing was loaded."""

    def __init__(self, errors: Sequence[EnvError]):
        self.errors = tuple(errors)
        lines = "\n".join(f"  {e}" for e in summarise(self.errors))
        if len(self.errors) == 1:  # one problem: one line
            super().__init__(f"cannot load environments: {self.errors[0]}")
        else:
            super().__init__(f"{len(self.errors)} error(s) while loading environments:\n{lines}")
