"""The audit's model-call cache: a `Backend` whose every answer is keyed on the request itself, and
the audit's models behind it (`Models`: the policy at t, a judge's or an oracle's own model, an
OpenAI-compatible server, and the verifiers built on them).

`CachedBackend` stands in front of a model backend and loads it only on the first call the cache
cannot answer. The key of a call is a sha256 of everything that determines the model's answer:
- the weights: the policy config and, with the adapter on, the sha256 of the adapter's files as the
  checkpoint's `DONE` records them (adapter off: the base weights the config names), or an
  endpoint's configuration;
- the method and the prompt's token ids (an endpoint: the rendered prompt);
- every argument: n, seed, temperature, max_new_tokens, the completion's token ids or text, the
  candidate token ids.
Nothing else enters a key, so there is no list of "the modules that matter" to keep up to date: the
code that reads the model's answers (judge scoring, verifiers, metrics) is rerun on every audit, and
an edit to it takes effect on the next run; only model calls are replayed, and those change only
when the request does.

Granularity: a `sample` call is one entry (its answers depend on the batch it was drawn in: one seed,
one generate call), the other methods one entry per prompt. A cached entry is returned exactly as it
was computed, so a rerun is byte-identical; entries are appended as they are computed, so an
interrupted audit keeps what it finished and a rerun computes only the rest. A torn last line (the
write that was cut) is dropped on read, any other unreadable line is an error. An entry holding NaN
(an endpoint's failed request, a verdict the model could not give) is not written: a rerun asks
again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from judges.verifiers import build_verifier
from selfplay.artifacts import JsonlLineError, read_jsonl_lines, read_manifest, write_text_atomic
from selfplay.models import load_backend
from selfplay.models.backend import Completion
from selfplay.models.chat import render
from selfplay.models.config import PolicyConfig
from selfplay.models.endpoint import EndpointBackend
from selfplay.models.loading import load_tokenizer

log = logging.getLogger("audit.cache")

CACHE_DIR = "audit_cache"
CALLS = "calls"  # cache files are calls-<hash of the weights' identity>.jsonl
ANSWERS = "answers"  # iter_<t>/audit_cache/answers-<hash>.jsonl: what the audit sampled there (audit.label)


class CacheError(RuntimeError):
    pass


def digest(value: Any, length: int = 64) -> str:
    """sha256 of the canonical JSON of `value` (sorted keys, no spaces)."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, allow_nan=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def cache_dir(where: Path) -> Path:
    """The cache directory of a seed directory (or of the judge evaluation's output directory)."""
    return where / CACHE_DIR


def adapter_sha256(iteration: Path, adapter: str = "adapter") -> str:
    """One hash of the adapter files of a checkpoint, from the sha256s its `DONE` records."""
    files = {k: v["sha256"] for k, v in read_manifest(iteration).items() if k.startswith(f"{adapter}/")}
    if not files:
        raise CacheError(f"{iteration / 'DONE'}: records no file under {adapter}/")
    return digest(files)


def _ends_with_newline(path: Path) -> bool:
    """Whether an append starts a line of its own (an empty file does too)."""
    with path.open("rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


class JsonlCache:
    """Rows `{"key": ..., **values}` in one JSONL file; later rows win for a repeated key.

    `peers`: the caches of the same weights in the other runs of one audit (the same file name in
    another seed dir). A key names the weights, the adapter and the whole request, so a row a peer
    holds is the answer to the same call: `adopt` copies it into this file instead of asking the
    model again. π_0's calls (t = 0, the probe's reference, the audit's samples at t = 0) are then
    made once per audit, not once per run, and each run's cache still holds every call it read."""

    def __init__(self, path: Path, peers: list[JsonlCache] | None = None):
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        self._peers = peers if peers is not None else []
        self._good_bytes: int | None = None  # set when a torn last line must be cut before appending
        self._newline = False  # a complete last row whose newline was cut: write one before appending
        if path.is_file():
            try:  # a torn last write is dropped: that row is recomputed
                rows, self._good_bytes = read_jsonl_lines(path)
            except JsonlLineError as e:
                raise CacheError(f"{path}:{e.line}: unreadable cache row; delete the file to recompute it") from None
            for i, row in rows:
                if not isinstance(row, dict) or "key" not in row:
                    raise CacheError(f"{path}:{i}: unreadable cache row; delete the file to recompute it")
                self.rows[row["key"]] = row
            self._newline = self._good_bytes is None and not _ends_with_newline(path)

    def missing(self, keys: Iterable[str]) -> list[str]:
        return [k for k in dict.fromkeys(keys) if k not in self.rows]

    def adopt(self, keys: Iterable[str]) -> None:
        """Copy into this file the rows of `keys` it lacks and a peer holds."""
        found = {}
        for k in self.missing(keys):
            row = next((p.rows[k] for p in self._peers if p is not self and k in p.rows), None)
            if row is not None:
                found[k] = row
        self.add(list(found.values()))

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._good_bytes is not None:
            with self.path.open("r+b") as f:
                f.truncate(self._good_bytes)
            self._good_bytes = None
        with self.path.open("a", encoding="utf-8") as f:
            if self._newline:
                f.write("\n")
                self._newline = False
            for row in rows:
                f.write(json.dumps(row, sort_keys=True, allow_nan=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        for row in rows:
            self.rows[row["key"]] = dict(row)


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, (list, tuple)):
        return any(_has_nan(v) for v in value)
    return False


def _floats(row: Sequence[float]) -> list[float]:
    return [float(x) for x in row]


class CachedBackend:
    """A `Backend` answered from `cache` where the same request was made before.

    `identity` names the base weights (a policy config, an endpoint's configuration); `adapter_id`
    names the adapter on them (None: a model without one, or whose adapter is never switched on
    here). `tokenizer` and `render` work without the model. `load()` returns the model backend ready
    for these weights; it is called on every miss, never on a hit, so it must be cheap after its
    first call — the audit's loader hands back one shared model with this checkpoint's adapter put
    back in place if another checkpoint's was loaded since. `prompt_ids` turns a rendered prompt into
    what its key holds (token ids; an endpoint's prompt is its own key), `token_key` a candidate token
    id (an endpoint's ids only number its labels in the order they were first encoded: its key is the
    label text). Keys name neither the device nor the engine: a run resumed on other hardware reuses
    what the first computed.
    """

    def __init__(self, *, name: str, tokenizer: Any, render: Callable[..., str], identity: Mapping[str, Any],
                 adapter_id: str | None, cache: JsonlCache, load: Callable[[], Any],
                 prompt_ids: Callable[[str], Any] | None = None, token_key: Callable[[int], Any] | None = None):
        self.name = name
        self.tokenizer = tokenizer
        self._render = render
        self._identity = dict(identity)
        self._adapter_id = adapter_id
        self._cache = cache
        self._load = load
        self._inner: Any = None
        self._prompt_ids = prompt_ids or (lambda p: tokenizer(p, add_special_tokens=False)["input_ids"])
        self._token_key = token_key or int
        self.stats = {"hits": 0, "misses": 0}

    @property
    def inner(self) -> Any:
        """The model backend, as `load()` hands it back now (see the class docstring)."""
        self._inner = self._load()
        return self._inner

    @property
    def loaded(self) -> bool:
        return self._inner is not None

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        return self._render(messages, add_generation_prompt=add_generation_prompt)

    # -- keys -------------------------------------------------------------------------------------

    def _on(self, adapter: bool) -> bool:
        """Whether the call runs with an adapter: a model named without one runs its base weights
        even when asked for adapter=True (the model behind may be shared with a checkpoint's)."""
        return adapter and self._adapter_id is not None

    def _weights(self, adapter: bool) -> dict[str, Any]:
        return {**self._identity, "adapter": self._adapter_id if self._on(adapter) else None}

    def key(self, method: str, adapter: bool, **request: Any) -> str:
        return digest({"weights": self._weights(adapter), "method": method, **request})

    def _per_prompt(self, method: str, keys: list[str], compute: Callable[[list[int]], list[Any]]) -> list[Any]:
        self._cache.adopt(keys)
        todo = [i for i, k in enumerate(keys) if k not in self._cache.rows]
        self.stats["hits"] += len(keys) - len(todo)
        self.stats["misses"] += len(todo)
        if todo:
            values = compute(todo)
            self._cache.add([{"key": keys[i], "method": method, "value": v}
                             for i, v in zip(todo, values, strict=True) if not _has_nan(v)])
            fresh = dict(zip(todo, values, strict=True))
        else:
            fresh = {}
        return [fresh[i] if i in fresh else self._cache.rows[keys[i]]["value"] for i in range(len(keys))]

    # -- the Backend methods ----------------------------------------------------------------------

    def sample(self, prompts: Sequence[str], *, n: int, temperature: float, max_new_tokens: int, seed: int,
               adapter: bool = True) -> list[list[Completion]]:
        key = self.key("sample", adapter, prompts=[self._prompt_ids(p) for p in prompts], n=n,
                       temperature=float(temperature), max_new_tokens=max_new_tokens, seed=seed)
        self._cache.adopt([key])
        row = self._cache.rows.get(key)
        if row is None:
            self.stats["misses"] += 1
            out = self.inner.sample(prompts, n=n, temperature=temperature, max_new_tokens=max_new_tokens,
                                    seed=seed, adapter=self._on(adapter))
            value = [[{"text": str(c), "finished": bool(getattr(c, "finished", True)),
                       "token_ids": [int(i) for i in getattr(c, "token_ids", None) or ()]} for c in cs]
                     for cs in out]
            self._cache.add([{"key": key, "method": "sample", "value": value}])
        else:
            self.stats["hits"] += 1
            value = row["value"]
        return [[Completion(c["text"], c["finished"], token_ids=c["token_ids"]) for c in cs] for cs in value]

    def greedy(self, prompts: Sequence[str], *, max_new_tokens: int, adapter: bool = True) -> list[str]:
        keys = [self.key("greedy", adapter, prompt=self._prompt_ids(p), max_new_tokens=max_new_tokens)
                for p in prompts]
        return self._per_prompt("greedy", keys, lambda todo: [str(t) for t in self.inner.greedy(
            [prompts[i] for i in todo], max_new_tokens=max_new_tokens, adapter=self._on(adapter))])

    def next_token_logprobs(self, prompts: Sequence[str], token_ids: Sequence[int], *,
                            adapter: bool = True) -> np.ndarray:
        ids = [int(t) for t in token_ids]
        wanted = [self._token_key(t) for t in ids]
        keys = [self.key("next_token_logprobs", adapter, prompt=self._prompt_ids(p), token_ids=wanted)
                for p in prompts]
        rows = self._per_prompt("next_token_logprobs", keys, lambda todo: [_floats(r) for r in self.inner.next_token_logprobs(
            [prompts[i] for i in todo], ids, adapter=self._on(adapter))])
        return np.array(rows, dtype=float).reshape(len(prompts), len(ids))

    def sequence_logprobs(self, prompts: Sequence[str], completions: Sequence[str | Sequence[int]], *,
                          adapter: bool = True, temperature: float = 1.0) -> np.ndarray:
        def completion(c: str | Sequence[int]) -> Any:
            return {"text": c} if isinstance(c, str) else {"ids": [int(i) for i in c]}

        keys = [self.key("sequence_logprobs", adapter, prompt=self._prompt_ids(p), completion=completion(c),
                         temperature=float(temperature))
                for p, c in zip(prompts, completions, strict=True)]
        rows = self._per_prompt("sequence_logprobs", keys, lambda todo: [float(x) for x in self.inner.sequence_logprobs(
            [prompts[i] for i in todo], [completions[i] for i in todo], adapter=self._on(adapter),
            temperature=temperature)])
        return np.array(rows, dtype=np.float64)

    def adapter_disabled(self):
        return self.inner.adapter_disabled()

    def reading(self, prompt: str) -> Any:
        """How a remote backend read the verdict of `prompt` when it was asked in this process (a
        cached verdict was read when it was first asked: None)."""
        if self._inner is None or not hasattr(self._inner, "reading"):
            return None
        return self._inner.reading(prompt)


def open_cache(files: dict[Path, JsonlCache], path: Path) -> JsonlCache:
    """The cache file `path`, opened once per audit (`files`), a peer of every opened file of the
    same name (the same weights in another run)."""
    if path not in files:
        peers = next((f._peers for p, f in files.items() if p.name == path.name), [])
        files[path] = JsonlCache(path, peers)
        peers.append(files[path])
    return files[path]


def cached_policy(policy: Mapping[str, Any], directory: Path, load: Callable[[], Any], *,
                  adapter_id: str | None = None, files: dict[Path, JsonlCache] | None = None,
                  tokenizer: Any = None) -> CachedBackend:
    """A `conf/policy` model (a PolicyConfig mapping) behind the cache file of its base weights in
    `directory`: its tokenizer and chat template are loaded without the weights, `load()` builds the
    backend on the first miss. `files` shares one open file among the backends of one audit."""
    config = PolicyConfig.from_mapping(policy)
    tok = tokenizer if tokenizer is not None else load_tokenizer(config)
    identity = {"policy": dict(policy)}
    files = {} if files is None else files
    cache = open_cache(files, directory / f"{CALLS}-{digest(identity, 16)}.jsonl")
    return CachedBackend(name=config.name, tokenizer=tok,
                         render=lambda m, add_generation_prompt=True: render(tok, config, m, add_generation_prompt),
                         identity=identity, adapter_id=adapter_id, cache=cache, load=load)


def write_answers(iteration: Path, policy: Mapping[str, Any], sample: Any,
                  answers: Mapping[str, Sequence[Any]]) -> None:
    """The answers sampled at checkpoint `iteration` (its iter_<t> dir), one row per environment, for `python -m audit.label`, merged
    into what earlier audits with the same settings wrote there (an audit of fewer environments
    keeps the others' rows, which labels may point at)."""
    if not answers:
        return
    path = cache_dir(iteration) / f"{ANSWERS}-{digest({'policy': dict(policy), 'sample': vars(sample)}, 12)}.jsonl"
    # a row that names no task is no answer any label can point at: it is not written back
    rows = {k: r for k, r in JsonlCache(path).rows.items() if isinstance(r.get("task_id"), str)}
    rows.update({tid: {"key": tid, "task_id": tid, "answers": [str(t) for t in texts],
                       "finished": [bool(getattr(t, "finished", True)) for t in texts]}
                 for tid, texts in answers.items()})
    path.parent.mkdir(exist_ok=True)
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows.values()))


class Models:
    """The audit's model backends. Every model is reached through an `audit.cache.CachedBackend` whose
    file sits in the run's seed directory; a model is loaded on the first call its cache cannot
    answer, once per (policy config, LoRA shape), and a checkpoint's adapter is loaded into it then."""

    def __init__(self, cfg: Any):  # an audit.config.AuditConfig
        self.cfg = cfg
        self._loaded: dict[str, Any] = {}  # policy + LoRA shape -> its hf backend; endpoint -> its client
        self._adapter: dict[str, Path | None] = {}  # ... -> the adapter it holds now
        self._files: dict[Path, Any] = {}  # one JsonlCache per cache file
        self._tokenizers: dict[str, Any] = {}

    def _backend(self, policy: Mapping[str, Any] | None, lora: Mapping[str, Any] | None = None,
                 adapter: Path | None = None, endpoint: Any = None):
        """The one place a model is built: an endpoint's client (once per server), or a policy's hf
        backend, once per (policy config, LoRA shape), with `adapter` swapped in when another
        checkpoint's was loaded since (the audit swaps one adapter per checkpoint into the same weights)."""
        key = (json.dumps({"endpoint": endpoint.fingerprint()}, sort_keys=True, default=str) if endpoint is not None
               else json.dumps([dict(policy), dict(lora or {})], sort_keys=True, default=str))
        if key not in self._loaded:
            if endpoint is not None:  # it reads the key's environment variable
                self._loaded[key] = EndpointBackend.from_config(endpoint, name=f"endpoint:{endpoint.model}")
            else:
                log.info("audit: loading %s", policy.get("name"))
                self._loaded[key] = load_backend(dict(policy), backend="hf", lora=lora, device=self.cfg.device,
                                                 batch_size=self.cfg.batch_size, progress=self.cfg.progress)
            self._adapter[key] = None
        backend = self._loaded[key]
        if adapter is not None and self._adapter[key] != adapter:
            backend.load_adapter(adapter)
            self._adapter[key] = adapter
        return backend

    def _cache(self, seed_dir: Path, identity: Mapping[str, Any]):
        return open_cache(self._files, cache_dir(seed_dir) / f"{CALLS}-{digest(identity, 16)}.jsonl")

    def _cached(self, policy: Mapping[str, Any], seed_dir: Path, adapter_id: str | None, load) -> CachedBackend:
        name = json.dumps(dict(policy), sort_keys=True, default=str)
        if name not in self._tokenizers:
            self._tokenizers[name] = load_tokenizer(PolicyConfig.from_mapping(policy))
        return cached_policy(policy, cache_dir(seed_dir), load, adapter_id=adapter_id, files=self._files,
                             tokenizer=self._tokenizers[name])

    def policy(self, settings: Any, ckpt: Any) -> CachedBackend:
        """The run's policy at checkpoint `ckpt`: adapter on = π_t, off = π_0. A no-op adapter (iter_0)
        is run as π_0 itself: its calls are π_0's, computed once (its KL and probe are exactly 0)."""
        policy = OmegaConf.to_container(settings.policy)
        return self._cached(policy, ckpt.path.parent, ckpt.adapter_id,
                            lambda: self._backend(policy, settings.train.lora, ckpt.adapter_path))

    def named(self, name: str, seed_dir: Path) -> CachedBackend:
        """A `conf/policy` model by name, base weights only (a judge's or an oracle's own model)."""
        policy = dataclasses.asdict(PolicyConfig.named(name))
        return self._cached(policy, seed_dir, None, lambda: self._backend(policy, None, None))

    def other(self, run: Any, name: str) -> CachedBackend:
        """The own model of a run's judge (`judge.model=NAME`): a server for `endpoint`, else the
        `conf/policy` model NAME; its cache sits in the run's seed dir."""
        if name == "endpoint":
            return self.endpoint(run.settings.judge.endpoint_config, run.dir)
        return self.named(name, run.dir)

    def endpoint(self, endpoint: Any, seed_dir: Path) -> CachedBackend:
        """An OpenAI-compatible server (an oracle's `endpoint` settings), built now: building it sends
        no request (the key's variable was checked when the audit was planned). Its prompts key
        themselves and its candidate tokens by their label text."""
        identity = {"endpoint": endpoint.fingerprint()}
        backend = self._backend(None, endpoint=endpoint)  # one client per server for the whole audit
        tok = backend.tokenizer
        return CachedBackend(name=backend.name, tokenizer=tok, render=backend.render, identity=identity,
                             adapter_id=None, cache=self._cache(seed_dir, identity), load=lambda: backend,
                             prompt_ids=lambda p: p, token_key=lambda i: tok.decode([i]))


def build_verifiers(oracles: Mapping[str, Any], policy: CachedBackend, models: Models, seed_dir: Path) -> dict[str, Any]:
    """Every verifier role's verifier; "initial" is the run's π_0 (the policy, adapter off)."""
    def backend_for(o: Any):
        def get(model: str):
            if model == "endpoint":
                return models.endpoint(o.endpoint, seed_dir)
            return policy if model == "initial" else models.named(model, seed_dir)
        return get

    return {role: build_verifier(o, backend_for=backend_for(o)) for role, o in oracles.items()}
