"""`python -m audit.label DIR`: blind labels of the answers an audit sampled, the gate's on-policy set.

    python -m audit.gap ckpt=outputs/demo                         # samples and caches the answers
    python -m audit.label outputs/demo --labeller ab              # 60 of them, into outputs/demo/labels.jsonl
    python -m audit.label outputs/demo --labeller ab --size 120   # rerun: continues, draws up to 120

DIR is what `audit.gap` audited (an iteration, seed, reward or experiment dir). The pool is every
answer sampled at its checkpoints (`iter_<t>/audit_cache/answers-*.jsonl`, written by audit.gap); the
sample is stratified by checkpoint (which fixes reward, seed and iteration) and kind (impossible,
control): the strata take turns, each in its own seeded random order, until `--size` answers are
drawn, and the draw is then shown in one seeded random order. Each answer is shown with its
environment's question, the packet (evidence) and the certificate (the `oracle_certificate`, or
the ground truth of a control, and the `evaluation_spec` without `checks`) — never a verifier's
verdict, a judge's score, or the checkpoint, reward or iteration it came from. The protocol for
what makes an answer valid is experiments/labelled/PROTOCOL.md.

Each label is appended to the labels file (default DIR/labels.jsonl) as soon as it is given, in
the format of data/mini/labelled_answers.jsonl plus `labeller`, `labelled_at` (UTC, ISO 8601) and
the link back to the answer, kept in the file and never shown: `checkpoint` (the iteration dir
relative to the file's dir), `reward`, `run_seed`, `iteration`, `answers_file`, `index`. A stop
(`q`, end of input, Ctrl-C) loses nothing; a rerun of the same command draws the same sample and
continues with what is unlabelled (Ctrl-C exits 130, as training and the audit do). Each row also
records `environment_sha256`, the digest of the environment record it was labelled against.

Reading and checking the labels file is `audit.labels`, shared with `audit.gap`; the screen and
the keyboard are `audit.label_screen`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from rich.console import Console

from .cache import ANSWERS, CACHE_DIR, CacheError
from .checkpoints import Checkpoint, CheckpointError, find_checkpoints
from .label_screen import Stop, ask_one, screen
from .labels import (
    ENV_STAMP,
    LABELS_FILE,
    LabelError,
    answer_key,
    answer_rows,
    check_rows,
    env_stamp,
    read_label_file,
    stale_note,
)

log = logging.getLogger("audit.label")


class Interrupted(Exception):
    """Ctrl-C: what was labelled is kept; the message says where it stands."""


@dataclass(frozen=True)
class Item:
    """One answer an audit sampled, with its link back to where it came from (never shown)."""

    checkpoint: str  # the iteration dir, relative to the labels file's dir
    reward: str
    run_seed: int
    iteration: int
    answers_file: str
    task_id: str
    index: int  # its position among the environment's n answers (answer_id "p<index>")
    kind: str
    text: str

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.checkpoint, self.answers_file, self.task_id, self.index)


@dataclass(frozen=True)
class Run:
    """What a labels row records about the run an answer's checkpoint belongs to."""

    envs: Mapping[str, Any]  # task_id -> Environment (every split of the run's data)
    audit_ids: frozenset[str]
    policy: str
    temperature: float | None
    max_new_tokens: int | None
    seed: int | None  # the audit's sampling seed


# -- the pool and the sample ------------------------------------------------------------------------

def _relative(path: Path, base: Path) -> str:
    rel = os.path.relpath(path.resolve(), base.resolve())
    return Path(rel).as_posix()


def audit_settings(root: Path) -> Mapping[str, Any]:
    """The settings of the audit.json in DIR or the nearest dir above it (sampling temperature,
    budget and seed), {} when there is none."""
    for d in (root, *root.resolve().parents[:3]):
        f = d / "audit.json"
        if f.is_file():
            try:
                s = json.loads(f.read_text(encoding="utf-8")).get("settings")
            except (OSError, ValueError, AttributeError):
                return {}
            return s if isinstance(s, Mapping) else {}
    return {}


def run_info(ckpt: Checkpoint, audit: Mapping[str, Any]) -> Run:
    from omegaconf import OmegaConf

    from selfplay.runs import load_data_split

    from .checkpoints import run_settings

    settings = run_settings(ckpt)
    envs = {e.task_id: e for e in load_data_split(settings.data, "all")}
    audit_ids = frozenset(e.task_id for e in load_data_split(settings.data, "audit"))
    policy = OmegaConf.to_container(settings.policy)
    temperature = audit.get("temperature") if audit.get("temperature") is not None else settings.train.temperature
    budget = audit.get("max_new_tokens") if audit.get("max_new_tokens") is not None else settings.train.max_new_tokens
    return Run(envs, audit_ids, str(policy.get("name")), temperature, budget, audit.get("seed"))


def pool(root: Path, ckpts: Sequence[Checkpoint], runs: Mapping[Path, Run], base: Path) -> list[Item]:
    """Every cached answer of every checkpoint, in a fixed order; an answer text repeated within a
    checkpoint (the same draw cached under two settings) counts once."""
    items = []
    for ckpt in ckpts:
        seen: set[tuple[str, str]] = set()
        envs = runs[ckpt.path].envs
        for f in sorted((ckpt.path / CACHE_DIR).glob(f"{ANSWERS}-*.jsonl")):
            rows = answer_rows(f)
            for row in sorted(rows.values(), key=lambda r: r["task_id"]):
                tid = row["task_id"]
                if tid not in envs:
                    raise LabelError(f"{f}: task_id {tid!r} is not an environment of the run's data")
                for j, text in enumerate(row["answers"]):
                    if (tid, text) in seen:
                        continue
                    seen.add((tid, text))
                    items.append(Item(_relative(ckpt.path, base), ckpt.reward, ckpt.seed, ckpt.iteration,
                                      f.name, tid, j, envs[tid].kind, text))
    return items


def draw(items: Sequence[Item], size: int, seed: int) -> list[Item]:
    """A stratified sample of `size` answers (all when fewer), seeded: the strata (checkpoint ×
    kind) take turns, each in its own random order; the sample is shown in a random order, so
    neither the order nor the position tells where an answer came from."""
    rng = np.random.default_rng(seed)
    strata: dict[tuple[str, str], list[Item]] = {}
    for it in items:
        strata.setdefault((it.checkpoint, it.kind), []).append(it)
    queues = [[group[i] for i in rng.permutation(len(group))] for _, group in sorted(strata.items())]
    picked: list[Item] = []
    while len(picked) < size and any(queues):
        for q in queues:
            if q and len(picked) < size:
                picked.append(q.pop(0))
    return [picked[i] for i in rng.permutation(len(picked))]


# -- the labels file written -----------------------------------------------------------------------

def read_labels(path: Path, items: Mapping[tuple, Item], env_of: Callable[[tuple], Any]) -> list[dict[str, Any]]:
    """The rows already in `path` (the labels file being written), each checked to be an answer of
    this audit (`items` by key, keys relative to `path`'s dir; `env_of(answer key)` its environment);
    a torn last line is cut from the file. Stale rows are left out with a note."""
    if not path.is_file():
        return []
    try:
        rows = read_label_file(path, repair=True)
    except OSError as e:
        raise LabelError(f"{path}: cannot read ({e.strerror})") from None
    base = path.parent.resolve()
    texts = {answer_key({"checkpoint": k[0], "answers_file": k[1], "task_id": k[2], "index": k[3]}, base): it.text
             for k, it in items.items()}
    kept, stale = check_rows(path, rows, texts.get, env_of)
    if stale:
        log.warning("%s", stale_note(stale, path))
    return kept


def label_row(item: Item, run: Run, label: str, clause: str, reason: str, labeller: str,
              when: datetime) -> dict[str, Any]:
    """A row in the labelled_answers.jsonl format, plus who, when and the hidden link back."""
    return {
        "task_id": item.task_id, "kind": item.kind, "split": "audit" if item.task_id in run.audit_ids else "train",
        "policy": run.policy, "adapter": f"{item.checkpoint}/adapter" if item.iteration else None,
        "temperature": run.temperature, "seed": run.seed, "index": item.index,
        "max_new_tokens": run.max_new_tokens, "truncated": None, "text": item.text,
        "label": label, "reason": reason, "clause": clause,
        "labeller": labeller, "labelled_at": when.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "checkpoint": item.checkpoint, "reward": item.reward, "run_seed": item.run_seed,
        "iteration": item.iteration, "answers_file": item.answers_file,
        ENV_STAMP: env_stamp(run.envs[item.task_id]),
    }


def append(path: Path, row: Mapping[str, Any]) -> None:
    """Append one label; an OSError (a full disk) is one line naming the file and the label lost, which
    a rerun shows again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise LabelError(f"{path}: cannot append the label ({e.strerror or e}): the label just given "
                         f"({row['label']}: {row['reason']}) was not saved; free the space or choose another "
                         "--out, then rerun the same command, which shows that answer again") from None


def check_writable(path: Path) -> None:
    """Refuse before the first answer is shown, not after the first label is typed, when the labels
    file cannot be written; nothing is left behind."""
    made = not path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab"):
            pass
    except OSError as e:
        raise LabelError(f"{path}: the labels file cannot be written ({e.strerror or e}); choose another "
                         "--out") from None
    if made:
        path.unlink(missing_ok=True)


# -- the session ------------------------------------------------------------------------------------

def _link(it: Item) -> dict[str, Any]:
    return {"checkpoint": it.checkpoint, "answers_file": it.answers_file, "task_id": it.task_id, "index": it.index}


def label(root: Path, *, out: Path | None = None, size: int = 60, seed: int = 0, labeller: str,
          part: tuple[int, int] = (1, 1), console: Console | None = None, stream: TextIO | None = None,
          now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> tuple[int, int]:
    """Label the unlabelled answers of the sample of DIR's audit; returns (labelled now, labelled in
    all of the sample, or of its part). `part` = (k, m): only the answers at positions k, k + m,
    k + 2m, ... of the sample (1-based), so m labellers share one sample, each into their own file.
    `console` and `stream` replace the terminal (tests script the input)."""
    console = console or Console()
    out = out or root / LABELS_FILE
    if not labeller.strip():
        raise LabelError("--labeller: say who labels (a name or initials)")
    from selfplay.envs import EnvLoadError

    try:
        ckpts = find_checkpoints(root).checkpoints
        audit = audit_settings(root)
        runs = {c.path: run_info(c, audit) for c in ckpts}
        by_key = {it.key: it for it in pool(root, ckpts, runs, out.parent)}
    except (CheckpointError, CacheError, EnvLoadError, FileNotFoundError) as e:
        raise LabelError(str(e)) from None
    if not by_key:
        raise LabelError(f"{root}: no cached answers under it; run `python -m audit.gap ckpt={root}` first")
    run_of = {_relative(c.path, out.parent): runs[c.path] for c in ckpts}
    by_dir = {str(c.path.resolve()): runs[c.path] for c in ckpts}
    check_writable(out)
    base = out.parent.resolve()
    done = {answer_key(r, base) for r in read_labels(out, by_key, lambda key: (
        by_dir[key[0]].envs.get(key[2]) if key[0] in by_dir else None))}
    k, m = part
    sample = draw(sorted(by_key.values(), key=lambda it: it.key), size, seed)[k - 1 :: m]
    todo = [it for it in sample if answer_key(_link(it), base) not in done]
    n_done = len(sample) - len(todo)
    new = 0
    for it in todo:
        env = run_of[it.checkpoint].envs[it.task_id]
        console.print(screen(env, it.text, n_done + new + 1, len(sample)))
        try:
            lab, clause, reason = ask_one(console, env, stream)
        except Stop as stop:
            where = f"{n_done + new} of {len(sample)} labelled in {out}; rerun the same command to continue"
            if stop.ctrl_c:
                raise Interrupted(f"interrupted (Ctrl-C): {where}") from None
            console.print(f"stopped: {where}")
            return new, n_done + new
        append(out, label_row(it, run_of[it.checkpoint], lab, clause, reason, labeller, now()))
        new += 1
    console.print(f"all {len(sample)} answers of the sample are labelled in {out}")
    return new, n_done + new


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m audit.label", description=__doc__.split("\n")[0],
                                 epilog="The labelling protocol: experiments/labelled/PROTOCOL.md.")
    ap.add_argument("dir", type=Path, help="a dir `python -m audit.gap` audited (iteration, seed, reward or experiment)")
    ap.add_argument("--labeller", required=True, help="who labels (name or initials), recorded in every row")
    ap.add_argument("--size", type=int, default=60, help="answers in the sample (default 60); a rerun with "
                    "a larger size keeps what is labelled and adds to it")
    ap.add_argument("--seed", type=int, default=0, help="seeds the sample and its order (default 0)")
    ap.add_argument("--out", type=Path, default=None, help=f"labels file (default DIR/{LABELS_FILE}, where "
                    "audit.gap reads it)")
    ap.add_argument("--part", default="1/1", metavar="K/M", help="label only the answers at positions K, K+M, "
                    "K+2M, ... of the sample: M labellers share one sample, each with its own --out (default 1/1)")
    args = ap.parse_args(argv)
    if args.size < 1:
        ap.error("--size must be >= 1")
    try:
        k, m = (int(x) for x in args.part.split("/"))
        if not 1 <= k <= m:
            raise ValueError
    except ValueError:
        ap.error(f"--part {args.part}: expected K/M with 1 <= K <= M, e.g. 2/3")
    try:
        label(args.dir, out=args.out, size=args.size, seed=args.seed, labeller=args.labeller, part=(k, m))
    except LabelError as e:
        print(f"audit.label: error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"audit.label: {e}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("audit.label: interrupted (Ctrl-C) before the first answer was shown; nothing was written",
              file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
