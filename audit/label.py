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
continues with what is unlabelled. A labels file with a row that is not an answer of this DIR's
audit is refused. `audit.gap` reads the labels of a run from `labels.jsonl` in its experiment,
reward, seed or iteration dirs (`run_labels`) as that run's on-policy calibration set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from rich.console import Console, Group
from rich.panel import Panel
from rich.prompt import Prompt
from rich.text import Text

from . import calibration as C
from . import metrics as M
from .cache import ANSWERS, CACHE_DIR, CacheError, JsonlCache
from .checkpoints import ITER_RE, Checkpoint, CheckpointError, find_checkpoints

LABELS_FILE = "labels.jsonl"
LABEL_KEYS = {"v": M.VALID, "i": M.INVALID, "p": M.PARTIAL}
STOP = "q"
# the certificate lists a label's `clause` names (the item an answer violates), in the order shown
CLAUSE_LISTS = (("certificate", "required_honest_behavior"), ("certificate", "reward_hacking_behaviors"),
                ("evaluation_spec", "must_state"), ("evaluation_spec", "must_not_state"))
HIDDEN = ("checkpoint", "reward", "run_seed", "iteration", "answers_file", "index")


class LabelError(C.LabelledError):
    """A problem with DIR or the labels file: one line."""


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

    from .gap import run_settings

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
            for row in sorted(JsonlCache(f).rows.values(), key=lambda r: r["task_id"]):
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


# -- the labels file --------------------------------------------------------------------------------

def read_labels(path: Path, items: Mapping[tuple, Item]) -> list[dict[str, Any]]:
    """The rows already in `path`, each checked to be an answer of this audit (`items` by key);
    a torn last line (a write that was cut) is dropped from the file."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):  # no newline after it: the last write was cut
                with path.open("r+b") as f:
                    f.truncate(len(text[: len(text) - len(line)].encode("utf-8")))
                break
            raise LabelError(f"{path}:{i}: not JSON") from None
        key = (row.get("checkpoint"), row.get("answers_file"), row.get("task_id"), row.get("index")) \
            if isinstance(row, dict) else None
        if key not in items or items[key].text != row.get("text") or row.get("label") not in LABEL_KEYS.values():
            raise LabelError(f"{path}:{i}: does not match the run: not a label of an answer the audit under "
                             f"{path.parent} sampled; label into another file with --out")
        rows.append(row)
    return rows


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
    }


def append(path: Path, row: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def run_labels(seed_dir: Path) -> tuple[list[Path], list[dict[str, Any]]]:
    """The labels `audit.label` wrote for the run of `seed_dir` (for audit.gap): the rows of
    `labels.jsonl` in its experiment, reward or seed dir or one of its iteration dirs whose
    `checkpoint` is an iteration of this run, each with that `iteration`; the files that held some."""
    seed_dir = seed_dir.resolve()
    candidates = [seed_dir.parent.parent / LABELS_FILE, seed_dir.parent / LABELS_FILE, seed_dir / LABELS_FILE,
                  *sorted(seed_dir.glob(f"iter_*/{LABELS_FILE}"))]
    files, rows = [], []
    for f in dict.fromkeys(candidates):
        if not f.is_file():
            continue
        mine = []
        for i, r in enumerate(C.read_labelled(f), 1):
            if not isinstance(r.get("checkpoint"), str):
                raise LabelError(f"{f}: row {i} has no `checkpoint`: not a labels file of `python -m audit.label`")
            d = (f.parent / r["checkpoint"]).resolve()
            m = ITER_RE.fullmatch(d.name)
            if d.parent == seed_dir and m:
                mine.append({**r, "iteration": int(m.group(1))})
        if mine:
            files.append(f)
            rows += mine
    return files, rows


# -- the screen -------------------------------------------------------------------------------------

def clauses(env: Any) -> list[str]:
    """The certificate items a label's `clause` may name, numbered from 1 on the screen."""
    out: list[str] = []
    for where, key in CLAUSE_LISTS:
        src = env.evaluation_spec if where == "evaluation_spec" else env.certificate
        out += [str(x) for x in (src or {}).get(key) or [] if str(x) not in out]
    return out


def _item_line(x: Any) -> str:
    if isinstance(x, Mapping):
        docs = x.get("supporting_docs") or x.get("counter_docs")
        head = str(x.get("claim") or x.get("answer") or json.dumps(dict(x), ensure_ascii=False))
        return head + (f" ({', '.join(map(str, docs))})" if docs else "") + (f" — {x['reason']}" if x.get("reason") else "")
    return str(x)


def _section(title: str, fields: Mapping[str, Any] | None, numbers: Mapping[str, int]) -> Text:
    t = Text()
    t.append(f"{title}\n", style="bold")
    for key, value in (fields or {}).items():
        if key == "checks" or value in (None, [], ""):  # `checks` is what the `spec` verifier reads
            continue
        t.append(f"  {key.replace('_', ' ')}:", style="cyan")
        if isinstance(value, str):
            t.append(f" {value}\n")
            continue
        t.append("\n")
        for x in value if isinstance(value, (list, tuple)) else [value]:
            line = _item_line(x)
            mark = f"[{numbers[line]}]" if line in numbers else "-"
            t.append(f"    {mark} {line}\n")
    return t


def _panel(body: Text, title: str, **kw) -> Panel:
    body.rstrip()
    return Panel(body, title=title, title_align="left", **kw)


def screen(env: Any, text: str, k: int, n: int) -> Group:
    """What the labeller sees of one answer: its place in the sample, the question, the packet, the
    certificate and the answer; nothing about who wrote it or what any verifier said."""
    numbers = {c: i for i, c in enumerate(clauses(env), 1)}
    evidence = Text()
    for d in env.public.evidence:
        evidence.append(f"{d.doc_id}: ", style="bold")
        evidence.append(f"{d.text}\n")
    cert = Text(f"{env.kind} environment\n", style="bold magenta")
    if env.kind == "control":
        cert.append_text(_section("ground truth", env.ground_truth, numbers))
    else:
        cert.append_text(_section("oracle certificate", env.certificate, numbers))
    cert.append_text(_section("evaluation spec", env.evaluation_spec, numbers))
    return Group(Text(f"Answer {k} of {n}", style="bold reverse"), _panel(Text(env.public.question), "question"),
                 _panel(evidence, "packet"), _panel(cert, "certificate"),
                 _panel(Text(text), "answer", border_style="green"))


class _Lines:
    """A scripted input stream whose end is the end of input (EOFError), as in a terminal."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def readline(self) -> str:
        line = self.stream.readline()
        if not line:
            raise EOFError
        return line


class Stop(Exception):
    pass


def ask_one(console: Console, env: Any, stream: TextIO | None) -> tuple[str, str, str]:
    """(label, clause, reason) from the keyboard; Stop on `q`, end of input or Ctrl-C."""
    src = _Lines(stream) if stream is not None else None
    try:
        key = Prompt.ask("label: v = valid, i = invalid, p = partially valid, q = stop (rerun continues)",
                         choices=[*LABEL_KEYS, STOP], console=console, stream=src)
        if key == STOP:
            raise Stop
        clause = ""
        items = clauses(env)
        if LABEL_KEYS[key] != M.VALID and items:
            n = Prompt.ask(f"clause violated: its number [1-{len(items)}] above, 0 = none",
                           choices=[str(i) for i in range(len(items) + 1)], show_choices=False,
                           console=console, stream=src)
            clause = items[int(n) - 1] if int(n) else ""
        reason = ""
        while not reason:
            reason = " ".join(Prompt.ask("one-line reason", console=console, stream=src).split())
        return LABEL_KEYS[key], clause, reason
    except (EOFError, KeyboardInterrupt):
        raise Stop from None


# -- the session ------------------------------------------------------------------------------------

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
    done = {(r["checkpoint"], r["answers_file"], r["task_id"], r["index"]) for r in read_labels(out, by_key)}
    k, m = part
    sample = draw(sorted(by_key.values(), key=lambda it: it.key), size, seed)[k - 1 :: m]
    todo = [it for it in sample if it.key not in done]
    run_of = {_relative(c.path, out.parent): runs[c.path] for c in ckpts}
    n_done = len(sample) - len(todo)
    new = 0
    for it in todo:
        env = run_of[it.checkpoint].envs[it.task_id]
        console.print(screen(env, it.text, n_done + new + 1, len(sample)))
        try:
            lab, clause, reason = ask_one(console, env, stream)
        except Stop:
            console.print(f"stopped: {n_done + new} of {len(sample)} labelled in {out}; rerun the same "
                          "command to continue")
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
