"""The audit's result cache: every cache key, file name and file lives here.

A stage (audit.collect) is a pure function of its inputs; `StageCache` wraps one so that only what
its JSONL file lacks is computed. Files sit in a directory (`iter_<t>/audit_cache/` for a checkpoint,
`seed<s>/audit_cache/` for what does not depend on the iteration, the judge-evaluation directory
for `audit.judge_eval`), one per stage, named `<stage>-<hash>.jsonl` where the hash covers exactly
the settings and prompt code that determine the stage's rows (`stage_file`). Rows are keyed by
strings (`row_key`): the answers stage by task id; per-text stages by a hash of the task id and
the text (and, for the judge, r(e)), so a changed text is a new key, never a stale hit, and
changing n only adds what is new. A checkpoint's cache also hashes each environment's public view
(`view_key`: question and evidence, what its prompts are rendered from) into every key, so an
edited environment is a miss, never answers and scores of the old one.
A verdict whose request failed (`mode` "failed": an endpoint's 429s or timeouts) is undecided by
error, not by the verifier: it is kept in the file but counts as missing, so a rerun asks again.

Rows are appended as they are computed (one environment at a time; the answers one sampling chunk
at a time, `StageCache.answers`), so an interrupted audit keeps what it finished and a rerun
computes only what is missing; a torn last line (the write that was interrupted) is dropped on
read, any other unreadable line is an error.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

CACHE_DIR = "audit_cache"
ANSWERS = "answers"  # the one stage keyed by task id (one row per environment: its n answers)
WITH_REFERENCE = ("judge",)  # stages whose rows also depend on r(e): keyed by (task, text, r(e))


class CacheError(RuntimeError):
    pass


def config_hash(values: Mapping[str, Any], length: int = 12) -> str:
    """Stable short hash of JSON-able settings: names a cache file for exactly those settings."""
    blob = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def source_hash(*modules) -> str:
    """Prompt templates are code: a change to them must not be served from an old cache."""
    return hashlib.sha256("".join(inspect.getsource(m) for m in modules).encode()).hexdigest()[:12]


def text_key(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]


def row_key(stage: str, task_id: str, text: str | None = None, reference: str | None = None,
            view: str | None = None) -> str:
    """The key of one row of `stage`; `view` (a `view_key`) is part of it when given."""
    extra = () if view is None else (view,)
    if stage == ANSWERS:
        return task_id if view is None else text_key(task_id, *extra)
    if stage in WITH_REFERENCE:
        return text_key(task_id, text or "", reference or "", *extra)
    return text_key(task_id, text or "", *extra)


def view_key(public: Any) -> str:
    """A hash of an environment's public view (a selfplay.envs.types.PublicView: task id, question,
    evidence), from which its policy and judge prompts are rendered."""
    import dataclasses

    return config_hash(dataclasses.asdict(public), 16)


def failed(row: Mapping[str, Any]) -> bool:
    """A verdict row whose request failed (itself or a member of `any`): never final."""
    return row.get("mode") == "failed" or any(failed(p) for p in row.get("parts") or ())


def stage_file(stage: str, determined_by: Mapping[str, Any]) -> str:
    """`<stage>-<hash>.jsonl`; the prefix is the stage's kind (`oracle2` shares `oracle`'s)."""
    kind = "oracle" if stage.startswith("oracle") else stage
    return f"{kind}-{config_hash(determined_by)}.jsonl"


def cache_dir(where: Path) -> Path:
    """The cache directory of a checkpoint or seed directory."""
    return where / CACHE_DIR


class JsonlCache:
    """Rows `{"key": ..., **values}` in one JSONL file; later rows win for a repeated key."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        self._good_bytes: int | None = None  # set when a torn last line must be cut before appending
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            lines = text.split("\n")
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    self.rows[row["key"]] = row
                except (json.JSONDecodeError, KeyError, TypeError):
                    if i == len(lines) - 1:  # torn last write: drop it, recompute that row
                        self._good_bytes = len(text[: len(text) - len(line)].encode("utf-8"))
                        continue
                    raise CacheError(f"{path}:{i + 1}: unreadable cache row; delete the file to "
                                     "recompute it") from None

    def missing(self, keys: Iterable[str]) -> list[str]:
        return [k for k in dict.fromkeys(keys) if k not in self.rows or failed(self.rows[k])]

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._good_bytes is not None:
            with self.path.open("r+b") as f:
                f.truncate(self._good_bytes)
            self._good_bytes = None
        with self.path.open("a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True, allow_nan=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        for row in rows:
            self.rows[row["key"]] = dict(row)

    def fill(self, groups: Mapping[str, Sequence[str]],
             compute: Callable[[str, list[str]], list[Mapping[str, Any]]],
             progress: Callable[[int], None] | None = None) -> dict[str, dict[str, Any]]:
        """Compute the missing keys group by group (e.g. one environment at a time) and append them.

        `compute(group, keys)` returns one row per key (with its "key"); each group is written as soon
        as it is done. Returns every row of `groups` by key.
        """
        for group, keys in groups.items():
            todo = self.missing(keys)
            if todo:
                rows = compute(group, todo)
                got = [r["key"] for r in rows]
                if sorted(got) != sorted(todo):
                    raise CacheError(f"{self.path.name}: computed keys do not match the keys asked for "
                                     f"in group {group!r}")
                self.add(rows)
            if progress is not None:
                progress(1)
        return {k: self.rows[k] for keys in groups.values() for k in keys}


class _Memory(JsonlCache):
    """A cache that keeps rows only in memory (a stage configured without a file)."""

    def __init__(self):
        self.path = Path("<memory>")
        self.rows = {}
        self._good_bytes = None

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        for row in rows:
            self.rows[row["key"]] = dict(row)


class StageCache:
    """The files of one cache directory; `names` maps a stage to its file (a stage without a file
    is computed every time, e.g. the deterministic checks); `views` maps a task id to its
    `view_key`, part of every row key of that task (None: keys without it)."""

    def __init__(self, directory: Path | None, names: Mapping[str, str | None],
                 views: Mapping[str, str] | None = None):
        self.directory = directory
        self.names = dict(names)
        self.views = dict(views or {})
        self._open: dict[str, JsonlCache] = {}

    def _file(self, stage: str) -> JsonlCache:
        if stage not in self._open:
            name = self.names.get(stage)
            self._open[stage] = (_Memory() if name is None or self.directory is None
                                 else JsonlCache(self.directory / name))
        return self._open[stage]

    def answers(self, task_ids: Sequence[str], compute: Callable[[list[str]], Sequence[Sequence[str]]], *,
                chunk: int = 1, progress: Callable[[int], None] | None = None) -> dict[str, list[str]]:
        """`compute(ids) -> texts of each id`, one call per sampling chunk; the texts by task id.

        The chunks are `task_ids` cut into runs of `chunk`, in order: the answers of a task depend on
        the tasks sampled with it (one seed and one batch per call), so the chunks must not depend on
        what is cached. A chunk's rows are written together, each naming its chunk (`chunk`); on
        resume a chunk none of whose tasks is cached is computed whole, so a resumed audit writes the
        answers of an uninterrupted one. A partly cached chunk is a write that was cut (its rows name
        a chunk with a missing task: that chunk is computed again, whole) or rows of another
        environment set or of an older cache without `chunk`: then its missing tasks are computed as
        a chunk of their own, the one case whose answers differ from a fresh audit's.
        """
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1; got {chunk}")
        file = self._file(ANSWERS)

        def key(t: str) -> str:
            return row_key(ANSWERS, t, view=self.views.get(t))

        for start in range(0, len(task_ids), chunk):
            planned = list(task_ids[start : start + chunk])
            while group := _next_group(file.rows, planned, key):
                texts = compute(group)
                if len(texts) != len(group):
                    raise CacheError(f"{file.path.name}: {len(texts)} answer lists for the {len(group)} "
                                     f"tasks of chunk {group}")
                file.add([{"key": key(t), "task_id": t, "chunk": group, "answers": list(a)}
                          for t, a in zip(group, texts, strict=True)])
            if progress is not None:
                progress(len(planned))
        return {t: list(file.rows[key(t)]["answers"]) for t in task_ids}

    def per_text(self, stage: str, texts: Mapping[str, Sequence[str]],
                 compute: Callable[[str, list[str]], list[Mapping[str, Any]]], *,
                 references: Mapping[str, str] | None = None,
                 progress: Callable[[int], None] | None = None) -> dict[str, list[dict[str, Any]]]:
        """`compute(task_id, texts) -> one row per text` for the texts not cached; per task id the
        rows aligned with `texts[task_id]` (a repeated text gets the same row)."""
        refs = references or {}

        def key(task_id: str, text: str) -> str:
            return row_key(stage, task_id, text, refs.get(task_id), self.views.get(task_id))

        by_key = {t: {key(t, x): x for x in xs} for t, xs in texts.items()}

        def rows(task_id: str, keys: list[str]) -> list[dict]:
            out = compute(task_id, [by_key[task_id][k] for k in keys])
            return [{**dict(r), "key": k, "task_id": task_id} for k, r in zip(keys, out, strict=True)]

        got = self._file(stage).fill({t: list(ks) for t, ks in by_key.items()}, rows, progress)
        return {t: [got[key(t, x)] for x in xs] for t, xs in texts.items()}

    def complete(self, stage: str, texts: Mapping[str, Sequence[str]], *,
                 references: Mapping[str, str] | None = None) -> bool:
        refs = references or {}
        return not self._file(stage).missing(row_key(stage, t, x, refs.get(t), self.views.get(t))
                                             for t, xs in texts.items() for x in xs)


def _next_group(rows: Mapping[str, Mapping[str, Any]], planned: list[str],
                key: Callable[[str], str] = lambda t: row_key(ANSWERS, t)) -> list[str]:
    """The tasks of `planned` (one chunk) to sample together next; [] when all are cached."""
    missing = [t for t in planned if key(t) not in rows]
    if not missing:
        return []
    for t in planned:
        cut = (rows.get(key(t)) or {}).get("chunk")
        # a cached row of a chunk with a missing task: that chunk's write was cut, sample it again
        if cut and set(cut) & set(missing) and set(cut) <= set(planned):
            return list(cut)  # in its recorded order: the order is part of its seed
    return missing


# -- the audit's file names -------------------------------------------------------------------------

def oracle_file(oracle: Any, envs: Sequence[Any], policy: Mapping[str, Any], role: str = "oracle") -> str:
    """The file of a verifier's verdicts (a judges.verifiers.OracleConfig): its name covers the
    config, the verifiers' code and the hidden anchors of `envs`; for model `initial` also the
    run's policy config, which is what `initial` stands for."""
    from judges.verifiers import cache_fingerprint

    return stage_file(role, cache_fingerprint(oracle, envs, model=dict(policy) if oracle.model == "initial" else None))


def checkpoint_files(*, policy: Mapping[str, Any], sample: Mapping[str, Any], reward: Mapping[str, Any],
                     judge_model: str, identity: str, oracles: Mapping[str, Any], envs: Sequence[Any],
                     weights: str) -> dict[str, str | None]:
    """Stage -> file name for one checkpoint. `identity` names the judge's weights, `weights` the
    policy's (the KL's log π_t depends on them); `oracles` maps a verifier role to its OracleConfig."""
    import judges.designs
    import judges.prompts
    import selfplay.envs.prompt

    prompt_code = source_hash(selfplay.envs.prompt)
    # the chunk size shapes the answers (seed and batch per call), so it names their file; chunk 1
    # stays out of the hash: its answers are those of the audit before chunking, whose files it reads
    sample = {k: v for k, v in sample.items() if not (k == "chunk" and v == 1)}
    names: dict[str, str | None] = {
        ANSWERS: stage_file(ANSWERS, {"policy": dict(policy), "sample": dict(sample), "code": prompt_code}),
        "judge": stage_file("judge", {"policy": dict(policy), "reward": dict(reward), "judge": judge_model,
                                      "identity": identity,
                                      "code": source_hash(judges.prompts, judges.designs)}),
        # the log-probs are tempered like the draws (collect.kl_stage), so the temperature names them
        "kl": stage_file("kl", {"policy": dict(policy), "weights": weights, "code": prompt_code,
                                "temperature": sample.get("temperature")}),
        # the probe's log π_t at τ = 1: the policy's weights and its prompt alone
        "probe": stage_file("probe", {"policy": dict(policy), "weights": weights, "code": prompt_code}),
    }
    for role, oracle in oracles.items():
        names[role] = oracle_file(oracle, envs, policy, role)
    return names


def run_files(*, policy: Mapping[str, Any]) -> dict[str, str | None]:
    """Stage -> file name for what one run's checkpoints share (its seed directory's cache): π_0's
    probe log-probs, which depend on the base weights and the prompt alone."""
    import selfplay.envs.prompt

    return {"probe0": stage_file("probe0", {"policy": dict(policy), "code": source_hash(selfplay.envs.prompt)})}
