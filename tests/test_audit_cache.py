"""The audit's call cache (audit.cache.CachedBackend): a model call is answered from the cache when
the same request was made before, and only then. The key is the request itself: the weights (base
identity, adapter hash with the adapter on), the method, the prompt's token ids and every argument."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from audit.cache import CachedBackend, JsonlCache, adapter_sha256
from selfplay.models.backend import Completion


class Tok:
    """Token ids: one per character (so two prompts with the same text have the same ids)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


class Model:
    """Answers computed from the request, every call recorded; `nan` makes next-token rows NaN."""

    name = "model"
    tokenizer = Tok()

    def __init__(self):
        self.calls: list[tuple] = []
        self.nan = False

    def render(self, messages, *, add_generation_prompt=True):
        return messages[-1]["content"]

    def sample(self, prompts, *, n, temperature, max_new_tokens, seed, adapter=True):
        self.calls.append(("sample", tuple(prompts), n, temperature, max_new_tokens, seed, adapter))
        return [[Completion(f"{p}|{seed}|{j}|{adapter}", j % 2 == 0, (seed, j)) for j in range(n)] for p in prompts]

    def greedy(self, prompts, *, max_new_tokens, adapter=True):
        self.calls.append(("greedy", tuple(prompts), max_new_tokens, adapter))
        return [f"{p}!" for p in prompts]

    def next_token_logprobs(self, prompts, token_ids, *, adapter=True):
        self.calls.append(("next", tuple(prompts), tuple(token_ids), adapter))
        rows = [[-(len(p) + t + adapter) / 7 for t in token_ids] for p in prompts]
        return np.full((len(prompts), len(token_ids)), np.nan) if self.nan else np.array(rows)

    def sequence_logprobs(self, prompts, completions, *, adapter=True, temperature=1.0):
        self.calls.append(("seq", tuple(prompts), tuple(map(str, completions)), adapter, temperature))
        return np.array([-(len(p) + len(c)) / (3 * temperature) - adapter for p, c in zip(prompts, completions, strict=True)])

    def adapter_disabled(self):
        raise NotImplementedError


def cached(path, model, adapter_id="A1", identity=None):
    return CachedBackend(name="m", tokenizer=Tok(), render=model.render, identity=identity or {"policy": "p"},
                         adapter_id=adapter_id, cache=JsonlCache(path), load=lambda: model)


def test_a_repeated_request_is_answered_from_the_cache_without_loading(tmp_path):
    model = Model()
    first = cached(tmp_path / "c.jsonl", model)
    a = first.sample(["x", "yy"], n=2, temperature=0.7, max_new_tokens=5, seed=3)
    probs = first.next_token_logprobs(["x", "yy"], [1, 2])
    seq = first.sequence_logprobs(["x", "x"], ["ab", [5, 6, 7]], temperature=0.7)
    greedy = first.greedy(["x"], max_new_tokens=4, adapter=False)
    assert len(model.calls) == 4

    loads = []
    again = CachedBackend(name="m", tokenizer=Tok(), render=model.render, identity={"policy": "p"}, adapter_id="A1",
                          cache=JsonlCache(tmp_path / "c.jsonl"), load=lambda: loads.append(1))
    b = again.sample(["x", "yy"], n=2, temperature=0.7, max_new_tokens=5, seed=3)
    assert b == a and [[c.finished for c in cs] for cs in b] == [[True, False]] * 2
    assert [[c.token_ids for c in cs] for cs in b] == [[(3, 0), (3, 1)]] * 2
    # floats come back exactly as computed (JSON keeps every bit), so reruns are byte-identical
    assert again.next_token_logprobs(["x", "yy"], [1, 2]).tolist() == probs.tolist()
    assert again.sequence_logprobs(["x", "x"], ["ab", [5, 6, 7]], temperature=0.7).tolist() == seq.tolist()
    assert again.greedy(["x"], max_new_tokens=4, adapter=False) == greedy
    assert loads == [] and not again.loaded and again.stats["misses"] == 0


@pytest.mark.parametrize("change", [
    pytest.param(dict(n=3), id="n"), pytest.param(dict(seed=4), id="seed"),
    pytest.param(dict(temperature=0.8), id="temperature"), pytest.param(dict(max_new_tokens=6), id="budget"),
    pytest.param(dict(prompts=["x", "yz"]), id="prompt"), pytest.param(dict(prompts=["yy", "x"]), id="order"),
    pytest.param(dict(adapter_id="A2"), id="other-adapter"), pytest.param(dict(identity={"policy": "q"}), id="weights"),
])
def test_every_part_of_the_request_is_part_of_the_key(tmp_path, change):
    model = Model()
    args = dict(prompts=["x", "yy"], n=2, temperature=0.7, max_new_tokens=5, seed=3)
    cached(tmp_path / "c.jsonl", model).sample(**{k: args[k] for k in args})
    backend_args = {k: change.pop(k) for k in ("adapter_id", "identity") if k in change}
    other = cached(tmp_path / "c.jsonl", model, **backend_args)
    args |= change
    other.sample(args.pop("prompts"), **args)
    assert len(model.calls) == 2


def test_the_adapter_off_is_shared_across_checkpoints_and_on_is_not(tmp_path):
    """π_0's calls (adapter off) do not depend on the checkpoint's adapter: one entry serves every
    checkpoint of a run; with the adapter on, each adapter hash is its own request."""
    model = Model()
    cached(tmp_path / "c.jsonl", model, "A1").sequence_logprobs(["p"], ["a"], adapter=False)
    cached(tmp_path / "c.jsonl", model, "A2").sequence_logprobs(["p"], ["a"], adapter=False)
    assert len(model.calls) == 1
    cached(tmp_path / "c.jsonl", model, "A1").sequence_logprobs(["p"], ["a"], adapter=True)
    cached(tmp_path / "c.jsonl", model, "A2").sequence_logprobs(["p"], ["a"], adapter=True)
    assert len(model.calls) == 3


def test_per_prompt_methods_compute_only_the_missing_prompts(tmp_path):
    model = Model()
    c = cached(tmp_path / "c.jsonl", model)
    c.next_token_logprobs(["a", "b"], [1])
    got = cached(tmp_path / "c.jsonl", model).next_token_logprobs(["b", "c", "a"], [1])
    assert model.calls[-1] == ("next", ("c",), (1,), True)
    assert got[:, 0].tolist() == [-(1 + 1 + 1) / 7] * 3
    # a text and its ids are different requests (the ids are what a sampled answer is scored on)
    c.sequence_logprobs(["p"], ["ab"])
    c.sequence_logprobs(["p"], [[97, 98]])
    assert [k[0] for k in model.calls].count("seq") == 2


def test_a_failed_verdict_is_not_cached(tmp_path):
    """NaN rows (an endpoint's failed request) are returned but not written: a rerun asks again."""
    model = Model()
    model.nan = True
    assert math.isnan(cached(tmp_path / "c.jsonl", model).next_token_logprobs(["a"], [1])[0, 0])
    assert not (tmp_path / "c.jsonl").exists()
    model.nan = False
    assert cached(tmp_path / "c.jsonl", model).next_token_logprobs(["a"], [1])[0, 0] == -(1 + 1 + 1) / 7
    assert len(model.calls) == 2
    rows = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert [r["method"] for r in rows] == ["next_token_logprobs"]


def test_the_adapter_hash_comes_from_done(tmp_path):
    from selfplay.artifacts import write_manifest

    it = tmp_path / "iter_1"
    (it / "adapter").mkdir(parents=True)
    (it / "adapter" / "adapter_model.safetensors").write_bytes(b"w1")
    (it / "metrics.json").write_text("{}")
    write_manifest(it)
    first = adapter_sha256(it)
    (it / "metrics.json").write_text('{"x": 1}')
    write_manifest(it)
    assert adapter_sha256(it) == first  # only the adapter's files name it
    (it / "adapter" / "adapter_model.safetensors").write_bytes(b"w2")
    write_manifest(it)
    assert adapter_sha256(it) != first


def test_load_is_asked_on_every_miss_so_a_shared_model_gets_its_adapter_back(tmp_path):
    """Two checkpoints share one model; each backend's load() puts its own adapter in place. After
    checkpoint 2 loaded its adapter, a miss of checkpoint 1 computes with adapter 1 again, never with
    whatever the shared model holds; a hit loads nothing."""
    shared = Model()
    shared.holds = None
    loads = []

    def loader(adapter):
        def load():
            loads.append(adapter)
            shared.holds = adapter
            return shared
        return load

    def backend(adapter):
        return CachedBackend(name="m", tokenizer=Tok(), render=shared.render, identity={"policy": "p"},
                             adapter_id=adapter, cache=JsonlCache(tmp_path / "c.jsonl"), load=loader(adapter))

    seen = []
    real = shared.greedy
    shared.greedy = lambda prompts, **kw: seen.append(shared.holds) or real(prompts, **kw)
    one, two = backend("A1"), backend("A2")
    one.greedy(["x"], max_new_tokens=2)
    two.greedy(["x"], max_new_tokens=2)
    one.greedy(["y"], max_new_tokens=2)
    one.greedy(["x"], max_new_tokens=2)  # a hit
    assert seen == ["A1", "A2", "A1"] and loads == ["A1", "A2", "A1"]


def test_a_row_whose_newline_was_cut_is_kept_and_the_next_append_starts_a_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"key": "a", "value": 1}\n{"key": "b", "value": 2}')  # complete row, newline cut
    cache = JsonlCache(path)
    assert set(cache.rows) == {"a", "b"}
    cache.add([{"key": "c", "value": 3}])
    assert {k: r["value"] for k, r in JsonlCache(path).rows.items()} == {"a": 1, "b": 2, "c": 3}


def test_candidate_tokens_can_key_by_their_text(tmp_path):
    """An endpoint numbers its labels in the order it first met them; keyed by the label text, a
    prompt that asks for the same labels in another order is another request."""
    model = Model()
    texts = {1: "Yes", 2: "No"}
    c = CachedBackend(name="m", tokenizer=Tok(), render=model.render, identity={"endpoint": "e"}, adapter_id=None,
                      cache=JsonlCache(tmp_path / "c.jsonl"), load=lambda: model, prompt_ids=lambda p: p,
                      token_key=texts.get)
    c.next_token_logprobs(["p"], [1, 2])
    c.next_token_logprobs(["p"], [1, 2])
    assert len(model.calls) == 1
    texts.update({1: "No", 2: "Yes"})  # the same ids now name the labels the other way round
    c.next_token_logprobs(["p"], [1, 2])
    assert len(model.calls) == 2


def test_a_model_named_without_an_adapter_never_runs_one(tmp_path):
    """adapter_id None: a call asking for the adapter runs (and is keyed as) the base weights, even on a
    model shared with a checkpoint whose adapter is loaded."""
    model = Model()
    cached(tmp_path / "c.jsonl", model, adapter_id=None).greedy(["x"], max_new_tokens=2, adapter=True)
    assert model.calls == [("greedy", ("x",), 2, False)]


def test_the_answers_record_keeps_the_rows_of_an_earlier_wider_audit(tmp_path):
    """audit.label links labels to rows of iter_<t>/audit_cache/answers-*.jsonl: an audit of fewer
    environments with the same settings adds to that file, never drops another environment's row."""
    from types import SimpleNamespace

    from audit.cache import write_answers
    from audit.collect import SampleSettings

    ckpt = SimpleNamespace(path=tmp_path / "iter_1")
    ckpt.path.mkdir()
    sample = SampleSettings(n=1, temperature=0.7, max_new_tokens=8, seed=0)
    write_answers(ckpt.path, {"name": "p"}, sample, {"t1": [Completion("a", True)], "t2": [Completion("b", False)]})
    write_answers(ckpt.path, {"name": "p"}, sample, {"t1": [Completion("a", True)]})
    (path,) = (ckpt.path / "audit_cache").glob("answers-*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["task_id"], r["answers"], r["finished"]) for r in rows] == [("t1", ["a"], [True]), ("t2", ["b"], [False])]
