"""The audit's sample stage: several environments per `policy.sample` call, in chunks fixed by the
order of the audited environments and the chunk size, each seeded by its task ids; behind the
call cache an interrupted audit resumes chunk by chunk to the answers of an uninterrupted one."""

from __future__ import annotations

import dataclasses
import math

import pytest
from oracle_fakes import VerdictOnlyBackend

from audit.cache import CachedBackend, JsonlCache
from audit.collect import SampleSettings, chunk_size, env_seed, sample_answers
from audit.config import AuditConfig
from selfplay.envs.prompt import policy_messages
from selfplay.models import load_backend
from selfplay.runs import Prompts, load_data_split

SETTINGS = SampleSettings(n=2, temperature=1.0, max_new_tokens=4, seed=3, chunk=2)


def _short(envs):
    """Two evidence documents of 25 words: the tiny model's prompts stay cheap."""
    cut = lambda text: " ".join(text.split()[:25])  # noqa: E731
    return [dataclasses.replace(e, public=dataclasses.replace(
        e.public, evidence=tuple(dataclasses.replace(d, text=cut(d.text)) for d in e.public.evidence[:2])))
        for e in envs]


@pytest.fixture(scope="module")
def envs():
    return _short(load_data_split(type("D", (), {"path": "data/mini", "splits": None})(), "audit")[:5])


@pytest.fixture(scope="module")
def tiny():
    # batch_size // n = 2 prompts per generate batch: one batch per chunk of 2
    return load_backend("tiny-llama", backend="hf", batch_size=4, progress=False)


class Counting(VerdictOnlyBackend):
    """A backend that records each `sample` call (its prompts and seed) and answers from them; the
    sample stage calls nothing else."""

    name = "counting"
    tokenizer = None

    def __init__(self):
        self.calls: list[tuple[list[str], int]] = []

    def next_token_logprobs(self, prompts, token_ids, *, adapter=True):
        raise AssertionError("the sample stage reads no next-token log-probabilities")

    def render(self, messages, *, add_generation_prompt=True):
        return messages[-1]["content"]

    def sample(self, prompts, *, n, temperature, max_new_tokens, seed, adapter=True):
        self.calls.append((list(prompts), seed))
        return [[f"{seed}:{i}:{j}" for j in range(n)] for i in range(len(prompts))]


class Stop(Exception):
    pass


class StopAfter(Counting):
    """Passes `calls` sample calls through to `inner`, then raises Stop (an interrupted audit)."""

    def __init__(self, inner, calls: int):
        super().__init__()
        self.inner, self.left = inner, calls

    def sample(self, prompts, *, n, temperature, max_new_tokens, seed, adapter=True):
        if self.left == 0:
            raise Stop
        self.left -= 1
        return self.inner.sample(prompts, n=n, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
                                 adapter=adapter)


def _cached(tiny, path, inner=None):
    return CachedBackend(name=tiny.name, tokenizer=tiny.tokenizer, render=tiny.render,
                         identity={"policy": "tiny-llama"}, adapter_id=None, cache=JsonlCache(path),
                         load=lambda: inner or tiny)


def test_one_sample_call_per_chunk_seeded_by_its_task_ids(envs):
    """5 environments in chunks of 2: ceil(5 / 2) = 3 calls of 2, 2 and 1 prompts, each seeded by
    the audit seed and its newline-joined task ids; a chunk of 1 gets the seed of its task id alone."""
    fake = Counting()
    got = sample_answers(fake, envs, _prompts(envs), SETTINGS)
    ids = [e.task_id for e in envs]
    assert len(fake.calls) == math.ceil(len(envs) / 2) == 3
    assert [len(p) for p, _ in fake.calls] == [2, 2, 1]
    assert [s for _, s in fake.calls] == [env_seed(3, "\n".join(ids[0:2])), env_seed(3, "\n".join(ids[2:4])),
                                          env_seed(3, ids[4])]
    assert got[ids[3]] == [f"{fake.calls[1][1]}:1:0", f"{fake.calls[1][1]}:1:1"]
    assert list(got) == ids


def test_resumed_run_writes_the_answers_of_an_uninterrupted_one(tmp_path, envs, tiny):
    """Tiny random Llama behind the call cache, chunks of 2: interrupted after the first chunk, or
    with the cache's last write cut (a torn line), the resumed run's answers are exactly those of an
    uninterrupted run, and a complete cache answers without the model. Sampling the second task of a
    chunk alone would not give them."""
    whole = sample_answers(_cached(tiny, tmp_path / "whole.jsonl"), envs, _prompts(envs), SETTINGS)
    assert all(len(a) == 2 for a in whole.values())
    assert all(a.token_ids for answers in whole.values() for a in answers)

    with pytest.raises(Stop):
        sample_answers(_cached(tiny, tmp_path / "stopped.jsonl", StopAfter(tiny, 1)), envs, _prompts(envs), SETTINGS)
    assert len((tmp_path / "stopped.jsonl").read_text().splitlines()) == 1
    resumed = _cached(tiny, tmp_path / "stopped.jsonl")
    assert sample_answers(resumed, envs, _prompts(envs), SETTINGS) == whole
    assert resumed.stats == {"hits": 1, "misses": 2}

    lines = (tmp_path / "whole.jsonl").read_text().splitlines()
    (tmp_path / "torn.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:30])
    torn = _cached(tiny, tmp_path / "torn.jsonl")
    again = sample_answers(torn, envs, _prompts(envs), SETTINGS)
    assert again == whole and [a.token_ids for a in again[envs[4].task_id]] == [
        a.token_ids for a in whole[envs[4].task_id]]
    assert torn.stats == {"hits": 2, "misses": 1}
    replay = _cached(tiny, tmp_path / "whole.jsonl", inner=StopAfter(tiny, 0))
    assert sample_answers(replay, envs, _prompts(envs), SETTINGS) == whole
    alone = sample_answers(tiny, envs[1:2], _prompts(envs[1:2]), SETTINGS)
    assert alone[envs[1].task_id] != whole[envs[1].task_id]


def test_the_chunk_size_is_part_of_the_request():
    """Chunks group the prompts of one call, so they are part of what the answers are: audit.json
    records the chunk size, and the sizes follow the batch."""
    assert chunk_size(32, 4) == 8 and chunk_size(8, 8) == 1 and chunk_size(2, 4) == 1
    assert AuditConfig(ckpt="x", n=4, batch_size=32).fingerprint()["sample_chunk"] == 8
    with pytest.raises(ValueError, match="chunk must be >= 1; got 0"):
        SampleSettings(n=2, temperature=1.0, max_new_tokens=4, seed=0, chunk=0)


def _prompts(envs):
    """The policy prompts the audit renders once per run (selfplay.runs.Run.prompts), here through the
    fakes' shared template."""
    return Prompts({e.task_id: Counting().render(policy_messages(e.public)) for e in envs}, "")
