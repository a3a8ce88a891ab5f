"""`python -m selfplay.envs PATH [--schema-dir DIR]`: validate environments, print one JSON summary.

PATH is a release directory (data/, data_control/, splits/) or a `.jsonl` export. The summary gives
the schema directory used, impossible environments by type, controls (clear / hard positives), each
split manifest under `splits/` with its size and how many of its ids are present, the train/audit
sizes, and every error. Exit status 1 when there is any error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from .errors import EnvLoadError
from .load import check_path
from .split import check_split, select, split_files, train_audit_split
from .types import IMPOSSIBILITY_TYPES, Environment


def summarize(path: str | Path, schema_dir: str | Path | None = None) -> dict:
    path = Path(path)
    result = check_path(path, schema_dir)
    envs, errors = result.envs, list(result.errors)
    root = path if path.is_dir() else path.parent

    splits = []
    for f in split_files(root):
        split, split_errors = check_split(f)
        errors += split_errors
        if split is not None:
            present, missing = select(envs, split)
            splits.append(
                {
                    "file": f.name,
                    "name": split.name,
                    "size": len(split.task_ids),
                    "present": len(present),
                    "missing": len(missing),
                }
            )

    train_audit = None
    if envs:
        try:
            train, audit = train_audit_split(envs, root)
            train_audit = {"train": len(train), "audit": len(audit)}
        except EnvLoadError as e:
            errors += e.errors
        except FileNotFoundError:
            pass  # no split scheme here (e.g. a lone JSONL export): nothing to report

    return {
        "path": str(path),
        "schema_dir": None if result.schema_dir is None else str(result.schema_dir),
        "impossible": _impossible(envs),
        "controls": _controls(envs),
        "splits": splits,
        "train_audit": train_audit,
        "errors": [str(e) for e in dict.fromkeys(errors)],  # a bad split is met by two checks
    }


def _impossible(envs: list[Environment]) -> dict:
    counts = Counter(e.category for e in envs if e.kind == "impossible")
    return {
        "total": sum(counts.values()),
        "by_type": {t: counts.get(t, 0) for t in IMPOSSIBILITY_TYPES},
    }


def _controls(envs: list[Environment]) -> dict:
    counts = Counter(e.category for e in envs if e.kind == "control")
    return {
        "total": sum(counts.values()),
        "clear_positive": counts.get("clear_positive", 0),
        "hard_positive": counts.get("hard_positive", 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m selfplay.envs", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "path", help="release directory (data/, data_control/, splits/) or .jsonl export"
    )
    parser.add_argument(
        "--schema-dir",
        default=None,
        help="directory holding the release's JSON Schemas (default: PATH/schema, "
        "then ../shared/impossible_rubrics/schema next to this repository)",
    )
    args = parser.parse_args(argv)
    summary = summarize(args.path, args.schema_dir)
    print(json.dumps(summary, indent=2))
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
