"""Environments: records with a public view and a hidden anchor, their loaders, splits and checks.

    envs = load_release("../shared/impossible_rubrics")     # or load_jsonl(...), load_envs(path)
    train, audit = train_audit_split(envs, "../shared/impossible_rubrics")
    ds = to_dataset(train)                                  # public views only

`python -m selfplay.envs PATH` validates a release directory or JSONL export and prints a summary.
"""

from .boundary import hidden_sentences, leaked_sentences, public_strings
from .dataset import public_rows, to_dataset
from .errors import EnvError, EnvLoadError
from .load import (
    LoadResult,
    check_jsonl,
    check_path,
    check_release,
    load_envs,
    load_jsonl,
    load_release,
)
from .schema import SchemaNotFound, find_schema_dir
from .split import Split, check_split, load_split, select, split_files, train_audit_split
from .types import (
    IMPOSSIBILITY_TYPES,
    REFERENCE_TYPES,
    VALIDITY_LABELS,
    Document,
    Environment,
    PublicView,
    StressAnswer,
)

__all__ = [
    "IMPOSSIBILITY_TYPES",
    "REFERENCE_TYPES",
    "VALIDITY_LABELS",
    "Document",
    "Environment",
    "PublicView",
    "StressAnswer",
    "EnvError",
    "EnvLoadError",
    "LoadResult",
    "SchemaNotFound",
    "check_jsonl",
    "check_path",
    "check_release",
    "find_schema_dir",
    "load_envs",
    "load_jsonl",
    "load_release",
    "Split",
    "check_split",
    "load_split",
    "select",
    "split_files",
    "train_audit_split",
    "hidden_sentences",
    "leaked_sentences",
    "public_strings",
    "public_rows",
    "to_dataset",
]
