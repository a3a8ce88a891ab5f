"""`python -m audit.view DIR`: one self-contained HTML page of what the policy wrote and what was made of it.

    python -m audit.view outputs/demo                      # writes outputs/demo/view.html
    python -m audit.view outputs/demo/decisive/seed0 --out /tmp/seed0.html

DIR is a run or any level above it (an iteration, seed, reward or experiment dir, as for audit.gap).
The page needs no server and no network: the data travel inside it as JSON and a little JavaScript
renders one page of environments at a time (`--page-size`), so a large run opens as fast as a small
one. Every text is put into the page as text (`textContent`), never as markup, and the JSON is
escaped so that an answer holding `</script>` cannot end the block that carries it.

What is joined, and by which key:
- training (`iter_<t>/`, t ≥ 1, answers written by π_{t-1}): generations, judgments and pairs by
  (task_id, index) (`selfplay.tracking.iteration_samples`, the same join as the wandb table);
- the audit (`audit_answers.jsonl`, which audit.gap writes beside audit.json, one row per answer and
  checkpoint): each row by its checkpoint path, task_id and answer_id, with the truncation flag from
  the answers the audit cached (`iter_<t>/audit_cache/answers-*.jsonl`, by task_id and text);
- labels read by a person: the run's `labels.jsonl` (audit.label) by checkpoint, task_id, index and
  text, and the data set's `labelled_answers.jsonl` by task_id and text; an answer that is one of
  its environment's authored stress answers shows that answer's label.

The oracle's verdict on an audit answer is the audit's (primary oracle, and each member). Training
does not run the oracle; the page runs the deterministic one (`spec` + `checks`, no model) on the
training answers where every record carries `evaluation_spec.checks` (data/mini), and shows none
otherwise. "Judge preferred what the oracle rejects" (`flagged`): a training answer the oracle
rejects that the judge scored above an answer of the same environment and iteration that the
oracle accepts; an audit answer the oracle rejects that the judge scored at least as high as the
reference answer r(e) (apparent success, A = 1, of an invalid answer: a false positive).

The module also owns the audit's answer file: `audit_answers_text` (written by audit.gap) and
its wandb table (`audit_table`, `wandb_answer_table`: one per checkpoint).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .records import ORACLE, AnswerRow

ANSWERS_FILE = "audit_answers.jsonl"
VIEW_FILE = "view.html"
# the columns of the audit's wandb table, one row per answer and checkpoint
AUDIT_COLUMNS = ("iteration", "task_id", "kind", "source", "answer_id", "answer", "judge_score", "ref_score",
                 "oracle_accepts", "label", "accepts", "log_ratio", "tokens", "probe_delta_per_token")


# -- the audit's answers: written by audit.gap, read here ---------------------------------------------

def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def probe_delta(row: Mapping[str, Any]) -> float | None:
    """Δℓ_t(a) per token: (log π_t(a|x) − log π_0(a|x)) / tokens, the preference probe's primary unit."""
    lp, lp0, n = row.get("probe_logp"), row.get("probe_logp0"), row.get("probe_tokens")
    if lp is None or lp0 is None or not n:
        return None
    return _finite((lp - lp0) / n)


def answer_record(reward: str, seed: int, iteration: int, checkpoint: str, row: AnswerRow) -> dict[str, Any]:
    """One line of `audit_answers.jsonl`: the AnswerRow and where it was measured (strict JSON)."""
    return ({"reward": reward, "seed": seed, "iteration": iteration, "checkpoint": checkpoint}
            | {k: _finite(v) for k, v in row.to_dict().items()})


def audit_answers_text(rows: Mapping[tuple[str, int], Mapping[int, Sequence[AnswerRow]]],
                       where: Mapping[tuple[str, int, int], str]) -> str:
    """The text of `audit_answers.jsonl`: every answer of every audited checkpoint (`rows` by reward ×
    seed, then iteration), each with its checkpoint dir relative to the audit's root (`where`);
    audit.results.write_outputs writes it together with audit.json."""
    lines = [json.dumps(answer_record(reward, seed, t, where[(reward, seed, t)], r), sort_keys=True,
                        ensure_ascii=False, allow_nan=False)
             for (reward, seed), by_t in sorted(rows.items()) for t, rs in sorted(by_t.items()) for r in rs]
    return "".join(line + "\n" for line in lines)


def read_audit_answers(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def audit_table(root: Path, reward: str, seed: int,
                iteration: int | None = None) -> tuple[tuple[str, ...], list[list[Any]]] | None:
    """The columns and rows of one reward × seed's answer table (one checkpoint's with `iteration`),
    from `root/audit_answers.jsonl`; None when the audit wrote none."""
    path = root / ANSWERS_FILE
    if not path.is_file():
        return None
    rows = [[r["iteration"], r["task_id"], r["kind"], r["source"], r["answer_id"], r["text"], r["score"],
             r["ref_score"], (r.get("accepts") or {}).get(ORACLE), r["label"], json.dumps(r.get("accepts") or {}),
             r.get("log_ratio"), r.get("tokens"), probe_delta(r)]
            for r in read_audit_answers(path) if r["reward"] == reward and r["seed"] == seed
            and (iteration is None or r["iteration"] == iteration)]
    return AUDIT_COLUMNS, rows


def wandb_answer_table(root: Path, reward: str, seed: int, iteration: int):
    """The `wandb.Table` of one checkpoint's audit answers (None without audit_answers.jsonl), to log
    under `audit/answers` with that iteration as the step."""
    found = audit_table(root, reward, seed, iteration)
    if found is None:
        return None
    import wandb

    return wandb.Table(columns=list(found[0]), data=found[1])


# -- collecting the page's data -------------------------------------------------------------------------

class ViewError(ValueError):
    """DIR is not something to view: one line."""


class Texts:
    """Interns answer texts: an authored answer recurs at every iteration and checkpoint, so the page
    carries each text once and the rows point at it."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


@dataclass
class RunData:
    """What one reward × seed run brings: its environments, split and labelled answers."""

    envs: Mapping[str, Any]  # task_id -> Environment
    audit_ids: frozenset[str]
    labelled: Mapping[tuple[str, str], Mapping[str, Any]]  # (task_id, text) -> a data-set label row
    run_labels: Mapping[tuple[int, str, str], Mapping[str, Any]]  # (iteration, task_id, text) -> label row


def _json_text(value: Any) -> str | None:
    if not value:
        return None
    return json.dumps(value, indent=1, ensure_ascii=False, sort_keys=True, default=str)


def env_entry(env: Any, split: str) -> dict[str, Any]:
    return {"kind": env.kind, "category": env.category, "split": split, "question": env.public.question,
            "evidence": [[d.doc_id, d.text] for d in env.public.evidence],
            "reference": env.reference_answer, "certificate": _json_text(env.certificate),
            "spec": _json_text(env.evaluation_spec), "ground_truth": _json_text(env.ground_truth)}


def _label(row: Mapping[str, Any] | None, by: str) -> dict[str, Any] | None:
    if row is None:
        return None
    return {"label": row.get("label"), "by": by, "reason": row.get("reason") or "", "labeller": row.get("labeller")}


def answer_label(data: RunData, task_id: str, text: str, iteration: int | None = None) -> dict[str, Any] | None:
    """The label a person gave this text: the run's own labels (audit.label) first, then the data
    set's labelled answers, then the authored label when it is one of the environment's stress answers."""
    if iteration is not None and (iteration, task_id, text) in data.run_labels:
        return _label(data.run_labels[(iteration, task_id, text)], "audit.label")
    if (task_id, text) in data.labelled:
        return _label(data.labelled[(task_id, text)], "labelled_answers")
    env = data.envs.get(task_id)
    for s in env.stress_answers if env is not None else ():
        if s.text == text:
            return {"label": s.validity, "by": "authored", "reason": s.answer_type, "labeller": None}
    return None


def run_data(ckpt: Any) -> RunData:
    from selfplay.config import resolve_data_path
    from selfplay.runs import load_data_split

    from . import calibration as C
    from .checkpoints import run_settings
    from .labels import run_labels

    settings = run_settings(ckpt)
    envs = {e.task_id: e for e in load_data_split(settings.data, "all")}
    audit_ids = frozenset(e.task_id for e in load_data_split(settings.data, "audit"))
    path = C.labelled_path(resolve_data_path(settings.data.path))
    labelled = {(r["task_id"], r["text"]): r for r in (C.read_labelled(path) if path else [])}
    _, rows = run_labels(ckpt.path.parent, envs)
    return RunData(envs, audit_ids, labelled, {(r["iteration"], r["task_id"], r["text"]): r for r in rows})


def deterministic_oracle(envs: Iterable[Any]):
    """`spec` + `checks` (no model) when every environment carries its machine-checkable certificate;
    None otherwise (a release: its oracle is an LLM, which the page does not run)."""
    from judges.verifiers import OracleConfig, build_verifier, default_oracle_name

    envs = list(envs)
    if default_oracle_name(envs) != "any":
        return None
    return build_verifier(OracleConfig.named("any"))


def flag_training(rows: Sequence[dict[str, Any]]) -> None:
    """Sets `flagged` on each training row of one environment and iteration: the oracle rejects it and
    the judge scored it above an answer there that the oracle accepts."""
    accepted = [r["score"] for r in rows if r["oracle"] is True and r["score"] is not None]
    lowest = min(accepted, default=None)
    for r in rows:
        r["flagged"] = bool(r["oracle"] is False and r["score"] is not None and lowest is not None
                            and r["score"] > lowest)


def flag_audit(row: Mapping[str, Any]) -> bool:
    """An audit answer the oracle rejects with apparent success: s(a) ≥ s(r(e))."""
    s, ref = row.get("score"), row.get("ref_score")
    return bool((row.get("accepts") or {}).get(ORACLE) is False and s is not None and ref is not None and s >= ref)


def _answers_files(root: Path) -> list[Path]:
    """Every audit_answers.jsonl that may hold answers of the runs under root: in root, below it (a
    seed or reward audited on its own) and above it (root is part of an audited experiment)."""
    below = [p for depth in ("", "*/", "*/*/", "*/*/*/") for p in sorted(root.glob(f"{depth}{ANSWERS_FILE}"))]
    above = [d / ANSWERS_FILE for d in root.parents[:4] if (d / ANSWERS_FILE).is_file()]
    return list(dict.fromkeys(below + above))


def _finished(ckpt_dir: Path) -> dict[tuple[str, str], bool]:
    """(task_id, text) -> whether the audit's sample ended on its own, from the answers it cached."""
    from .cache import ANSWERS, CACHE_DIR

    out = {}
    for f in sorted((ckpt_dir / CACHE_DIR).glob(f"{ANSWERS}-*.jsonl")):
        for row in read_audit_answers(f):
            for text, done in zip(row["answers"], row.get("finished") or [True] * len(row["answers"]), strict=True):
                out[(row["task_id"], text)] = bool(done)
    return out


def collect(root: Path) -> dict[str, Any]:
    """The page's data for every run under `root` (see the module docstring for the joins)."""
    from selfplay.artifacts import read_jsonl
    from selfplay.tracking import iteration_samples

    from .checkpoints import CheckpointError, find_checkpoints

    try:
        found = find_checkpoints(root)
    except CheckpointError as e:
        raise ViewError(str(e).replace("ckpt=", "", 1)) from None
    texts = Texts()
    by_run: dict[Path, list[Any]] = {}
    for c in found.checkpoints:
        by_run.setdefault(c.path.parent, []).append(c)

    audit_rows: dict[Path, list[dict[str, Any]]] = {}
    files = _answers_files(found.root)
    seen: set[tuple] = set()
    for f in files:
        for r in read_audit_answers(f):
            ckpt = (f.parent / r["checkpoint"]).resolve()
            key = (ckpt, r["task_id"], r["source"], r["answer_id"])
            if key not in seen:  # the nearest file wins (listed first)
                seen.add(key)
                audit_rows.setdefault(ckpt, []).append(r)

    envs_out: dict[str, Any] = {}
    runs_out, train_out, pairs_out, drops_out, audit_out = [], [], [], [], []
    oracle_names = set()
    for run_i, (seed_dir, ckpts) in enumerate(sorted(by_run.items())):
        first = ckpts[0]
        data = run_data(first)
        oracle = deterministic_oracle(data.envs.values())
        oracle_names.add("spec + checks" if oracle is not None else "none")
        used: set[str] = set()
        cfg = first.config
        runs_out.append({"reward": first.reward, "seed": first.seed, "dir": _relpath(seed_dir, found.root),
                         "experiment": cfg.get("experiment_name"), "policy": (cfg.get("policy") or {}).get("name"),
                         "candidates": (cfg.get("reward") or {}).get("candidates", "policy"),
                         "iterations": [c.iteration for c in ckpts]})
        for c in ckpts:
            samples = iteration_samples(c.path)
            verdicts = (oracle.verify([(data.envs[s.task_id], s.answer) for s in samples])
                        if oracle is not None and samples else [None] * len(samples))
            groups: dict[str, list[dict[str, Any]]] = {}
            for s, v in zip(samples, verdicts, strict=True):
                used.add(s.task_id)
                row = {"run": run_i, "t": c.iteration, "task": s.task_id, "i": s.index, "text": texts(s.answer),
                       "source": s.source, "score": s.judge_score, "error": s.judge_error, "chosen": s.chosen,
                       "rejected": s.rejected, "truncated": s.truncated,
                       "oracle": None if v is None or v.violates is None else not v.violates,
                       # the clauses that fired (or why it could not decide): the full reason is long
                       "oracle_reason": None if v is None else ", ".join(dict.fromkeys(v.fired)) or v.error,
                       "label": answer_label(data, s.task_id, s.answer)}
                groups.setdefault(s.task_id, []).append(row)
                train_out.append(row)
                if s.drop:
                    drops_out.append({"run": run_i, "t": c.iteration, "task": s.task_id, "why": s.drop})
            for rows in groups.values():
                flag_training(rows)
            if (c.path / "pairs.jsonl").is_file():
                pairs_out += [{"run": run_i, "t": c.iteration, "task": p["task_id"], "chosen": p["chosen_index"],
                               "rejected": p["rejected_index"], "margin": p.get("margin")}
                              for p in read_jsonl(c.path / "pairs.jsonl")]
            finished = _finished(c.path) if c.path in audit_rows else {}
            for r in audit_rows.get(c.path, ()):
                used.add(r["task_id"])
                text = r["text"]
                audit_out.append({
                    "run": run_i, "t": c.iteration, "task": r["task_id"], "source": r["source"],
                    "id": r["answer_id"], "text": texts(text), "score": r["score"], "ref_score": r["ref_score"],
                    "oracle": (r.get("accepts") or {}).get(ORACLE), "accepts": r.get("accepts") or {},
                    "verdict_label": r["label"], "reference": r.get("is_reference", False),
                    "log_ratio": r.get("log_ratio"), "tokens": r.get("tokens"), "delta": probe_delta(r),
                    # only the policy's answers can be cut short; None: the audit cached no record of it
                    "truncated": (False if r["source"] != "policy" else not finished[(r["task_id"], text)]
                                  if (r["task_id"], text) in finished else None),
                    "label": answer_label(data, r["task_id"], text, c.iteration) if r["source"] != "stress"
                    else None, "flagged": flag_audit(r)})
        for tid in sorted(used):
            if tid in data.envs and tid not in envs_out:
                envs_out[tid] = env_entry(data.envs[tid], "audit" if tid in data.audit_ids else "train")
    return {"root": str(root), "dir": str(found.root), "made": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "answers_files": [_relpath(f, found.root) for f in files],
            "training_oracle": " / ".join(sorted(oracle_names)), "texts": texts.items, "envs": envs_out,
            "runs": runs_out, "train": train_out, "pairs": pairs_out, "drops": drops_out, "audit": audit_out}


def _relpath(path: Path, root: Path) -> str:
    return Path(os.path.relpath(path, root)).as_posix()


# -- the page -------------------------------------------------------------------------------------------

def embed_json(data: Any) -> str:
    """JSON that is safe inside a <script> element: no `<`, `>` or `&` survives literally, so no text
    can close the element or open a comment; JSON.parse reads the escapes back."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render(data: Mapping[str, Any], page_size: int = 10) -> str:
    """The self-contained HTML page of `data` (collect's output)."""
    import html

    from .view_page import PAGE

    fill = {"__TITLE__": html.escape(f"run viewer — {data['root']}"), "__PAGE_SIZE__": str(int(page_size)),
            "__DATA__": embed_json(data)}
    # one pass, so a run's text that happens to spell a placeholder is never filled in itself
    return re.sub("|".join(fill), lambda m: fill[m.group(0)], PAGE)


def read_page_data(page: str) -> dict[str, Any]:
    """The data a page carries (for tests and scripts)."""
    start = page.index('<script type="application/json" id="data">') + len('<script type="application/json" id="data">')
    return json.loads(page[start:page.index("</script>", start)])


def write_view(root: Path, out: Path | None = None, page_size: int = 10) -> Path:
    data = collect(root)
    out = out or Path(data["dir"]) / VIEW_FILE
    out.write_text(render(data, page_size), encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m audit.view",
        description="Write one self-contained HTML page (no server, no network) of a run's samples: per "
                    "environment and iteration the policy's answers with the judge's score, the DPO pairs, the "
                    "oracle's verdict and any label, the audit's answers, t = first beside t = last, and "
                    "filters by reward, seed, kind and 'judge preferred what the oracle rejects'.")
    ap.add_argument("dir", type=Path, help="a run: an iteration, seed, reward or experiment dir under outputs/")
    ap.add_argument("--out", type=Path, default=None, help=f"the HTML file (default DIR/{VIEW_FILE})")
    ap.add_argument("--page-size", type=int, default=10, help="environments rendered per page (default 10)")
    args = ap.parse_args(argv)
    if args.page_size < 1:
        ap.error("--page-size must be at least 1")
    from selfplay.config import ConfigError
    from selfplay.envs import EnvLoadError

    from .calibration import LabelledError
    from .checkpoints import CheckpointError

    try:
        out = write_view(args.dir, args.out, args.page_size)
    except (ViewError, CheckpointError, ConfigError, EnvLoadError, LabelledError, OSError) as e:
        print(f"audit.view: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
