"""The audits `python -m audit.report DIR` reads: DIR/audit.json, or the audits of its parts below it
(a reward or seed dir audited on its own), and any audit named by `--include` (e.g. the merged
audit.json of an experiment's earlier runs, committed from another machine), merged into one
document with the `metrics.json` the training loop wrote beside each audited checkpoint. One
reward × seed audited twice is an error rather than a silent choice."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .contrasts import reward_contrasts
from .results import across_seeds, load_results


class ReportError(ValueError):
    pass


def find_audits(root: Path, required: bool = True) -> list[Path]:
    """DIR/audit.json, or else every audit.json below DIR (reward and seed dirs audited apart); none is
    an error unless not `required` (audits named by --include are read instead)."""
    if (root / "audit.json").is_file():
        return [root / "audit.json"]
    found = sorted(p for p in root.rglob("audit.json") if "audit_cache" not in p.parts)
    if not found and required:
        raise ReportError(f"{root}: no audit.json found; run `python -m audit.gap ckpt={root}` first")
    return found


def merge(docs: Sequence[tuple[Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """One document from several audits; the same reward × seed in two of them is an error."""
    rewards: dict[str, Any] = {}
    seen: dict[tuple[str, str], Path] = {}
    settings = []
    for path, doc in docs:
        given = doc.get("settings", {})  # a merged document's may already list several
        settings.extend(given if isinstance(given, list) else [given])
        for reward, entry in doc["rewards"].items():
            for seed, s in entry["seeds"].items():
                if not s.get("iterations"):  # every checkpoint skipped: nothing to report for it
                    print(f"audit.report: warning: {path}: {reward} seed {seed} has no audited iteration; left out",
                          file=sys.stderr)
                    continue
                if (reward, seed) in seen:
                    raise ReportError(f"{reward} seed {seed} is audited in both {seen[(reward, seed)]} and "
                                      f"{path}; remove one of them")
                seen[(reward, seed)] = path
                rewards.setdefault(reward, {"seeds": {}})["seeds"][seed] = s
    for entry in rewards.values():
        entry["across_seeds"] = across_seeds(entry["seeds"])
    distinct = [s for i, s in enumerate(settings) if s not in settings[:i]]
    return {"version": docs[0][1]["version"], "settings": distinct[0] if len(distinct) == 1 else distinct,
            "rewards": rewards, "contrasts": reward_contrasts(rewards, settings[0].get("baseline") if settings else None)}


def train_metrics(audit_path: Path, doc: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """reward -> seed -> t -> the `metrics.json` the training loop wrote for that checkpoint
    (checkpoints are relative to the audit's directory); t = 0 (π_0, nothing trained) and a checkpoint
    whose metrics.json is not beside the audit are left out."""
    from selfplay.artifacts import CorruptIteration, read_verified_json

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for reward, entry in doc["rewards"].items():
        for seed, s in entry["seeds"].items():
            for t, it in s["iterations"].items():
                f = audit_path.parent / str(it.get("checkpoint", "")) / "metrics.json"
                if int(t) == 0 or not f.is_file():
                    continue
                try:  # the file as training wrote it, or nothing: resume and the audit refuse an edited one too
                    m = read_verified_json(f.parent, "metrics.json")
                except CorruptIteration as e:
                    raise ReportError(str(e)) from None
                out.setdefault(reward, {}).setdefault(seed, {})[t] = m
    return out


def _rebase(doc: Mapping[str, Any], part: Path, root: Path) -> None:
    """Checkpoints named relative to `root` instead of the part's own directory, so that the merged
    document names each one the same way whichever part audited it (an included audit outside
    `root` too: its names climb out of `root` and back down)."""
    if part == root:
        return
    via = os.path.relpath(part, root)  # as written, like report._checkpoints_from: a symlink is not followed
    for entry in doc["rewards"].values():
        for s in entry["seeds"].values():
            for it in s["iterations"].values():
                if it.get("checkpoint"):
                    it["checkpoint"] = Path(os.path.normpath(os.path.join(via, it["checkpoint"]))).as_posix()


def load_dir(root: Path, include: Sequence[Path] = ()) -> dict[str, Any]:
    paths = find_audits(root, required=not include)
    if include and not paths:
        print(f"audit.report: warning: {root}: no audit.json below it; reporting the --include audits alone",
              file=sys.stderr)
    for p in include:
        if not p.is_file():
            raise ReportError(f"{p}: --include names no audit.json file")
        if any(p.resolve() == q.resolve() for q in paths):
            raise ReportError(f"{p}: --include names an audit.json already read (below {root}, or named twice)")
        paths.append(p)
    docs = []
    train: dict[str, Any] = {}
    for p in paths:
        try:
            docs.append((p, load_results(p)))
        except ValueError as e:
            raise ReportError(str(e)) from None
        for reward, seeds in train_metrics(p, docs[-1][1]).items():
            train.setdefault(reward, {}).update(seeds)
        _rebase(docs[-1][1], p.parent, root)
    doc = merge(docs)
    doc["train"] = train
    return doc
