"""The audit's sample stage: several environments per `policy.sample` call, in chunks fixed by the
order of the audited environments and the chunk size, each seeded by its task ids; an interrupted
audit resumes chunk by chunk to the answers of an uninterrupted one."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from oracle_fakes import VerdictOnlyBackend

from audit.cache import ANSWERS, StageCache, checkpoint_files
from audit.collect import SampleSettings, chunk_size, env_seed, sample_answers, sample_stage
from audit.config import AuditConfig
from selfplay.models import load_backend
from selfplay.runs import load_data_split

NAMES = {ANSWERS: "answers-test.jsonl"}
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


def _stop_after(calls: int, stage):
    done = []

    def sample(chunk):
        if len(done) == calls:
            raise Stop
        done.append(chunk)
        return stage(chunk)
    return sample


def _answers(envs, stage, where, chunk=2):
    return sample_answers(envs, stage, chunk, StageCache(where, NAMES), show_progress=False)


def test_one_sample_call_per_chunk_seeded_by_its_task_ids(tmp_path, envs):
    """5 environments in chunks of 2: ceil(5 / 2) = 3 calls of 2, 2 and 1 prompts, each seeded by
    the audit seed and its newline-joined task ids; a chunk of 1 gets the seed of its task id alone."""
    fake = Counting()
    got = _answers(envs, sample_stage(fake, SETTINGS), tmp_path)
    ids = [e.task_id for e in envs]
    assert len(fake.calls) == math.ceil(len(envs) / 2) == 3
    assert [len(p) for p, _ in fake.calls] == [2, 2, 1]
    assert [s for _, s in fake.calls] == [env_seed(3, "\n".join(ids[0:2])), env_seed(3, "\n".join(ids[2:4])),
                                          env_seed(3, ids[4])]
    assert got[ids[3]] == [f"{fake.calls[1][1]}:1:0", f"{fake.calls[1][1]}:1:1"]
    rows = [json.loads(line) for line in (tmp_path / NAMES[ANSWERS]).read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ids  # one row per task, as before chunking
    assert [r["chunk"] for r in rows] == [ids[0:2], ids[0:2], ids[2:4], ids[2:4], ids[4:5]]
    fake.calls.clear()
    assert _answers(envs, sample_stage(fake, SETTINGS), tmp_path) == got
    assert fake.calls == []


def test_resumed_run_writes_the_answers_of_an_uninterrupted_one(tmp_path, envs, tiny):
    """Tiny random Llama, chunks of 2: interrupted after the first chunk, or with the first chunk's
    write cut after its first row (a torn second line), the resumed run's answers are exactly those
    of an uninterrupted run. Sampling the cut chunk's second task alone would not give them."""
    stage = sample_stage(tiny, SETTINGS)
    whole = _answers(envs, stage, tmp_path / "whole")
    assert all(len(a) == 2 for a in whole.values())

    with pytest.raises(Stop):
        _answers(envs, _stop_after(1, stage), tmp_path / "stopped")
    assert len((tmp_path / "stopped" / NAMES[ANSWERS]).read_text().splitlines()) == 2
    assert _answers(envs, stage, tmp_path / "stopped") == whole

    lines = (tmp_path / "whole" / NAMES[ANSWERS]).read_text().splitlines()
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / NAMES[ANSWERS]).write_text(lines[0] + "\n" + lines[1][:30])
    assert _answers(envs, stage, tmp_path / "torn") == whole
    assert stage(envs[1:2])[0] != whole[envs[1].task_id]


@pytest.mark.parametrize("before", ["fewer environments", "rows without chunk"])
def test_a_partly_cached_chunk_samples_its_missing_tasks_as_their_own_chunk(tmp_path, envs, before):
    """Chunks [0 1] [2 3] [4]. Task 2 cached by an audit of environments 0-2 (its chunk [2]) or by
    an older cache whose rows name no chunk: chunk [2 3] samples task 3 alone, seeded by its id."""
    fake = Counting()
    ids = [e.task_id for e in envs]
    if before == "fewer environments":
        _answers(envs[:3], sample_stage(fake, SETTINGS), tmp_path)
    else:
        (tmp_path / NAMES[ANSWERS]).write_text("".join(
            json.dumps({"key": t, "task_id": t, "answers": ["a", "b"]}) + "\n" for t in ids[:3]))
    fake.calls.clear()
    _answers(envs, sample_stage(fake, SETTINGS), tmp_path)
    assert [s for _, s in fake.calls] == [env_seed(3, ids[3]), env_seed(3, ids[4])]


def test_the_chunk_size_names_the_answers_file():
    """Answers of chunk 8 live in another file than those of chunk 1; chunk 1 keeps the name of the
    files written before chunking (same seeds and calls, so the same answers). audit.json records it."""
    def name(**sample):
        return checkpoint_files(policy={"name": "tiny-llama"}, sample=sample, reward={}, judge_model="self",
                                identity="seed0/iter_1", oracles={}, envs=[], weights="w")[ANSWERS]

    base = {"n": 4, "temperature": 0.7, "max_new_tokens": 64, "seed": 0}
    assert name(**base, chunk=1) == name(**base)
    assert name(**base, chunk=8) != name(**base, chunk=1)
    assert name(**base, chunk=8) != name(**base, chunk=4)
    assert chunk_size(32, 4) == 8 and chunk_size(8, 8) == 1 and chunk_size(2, 4) == 1
    assert AuditConfig(ckpt="x", n=4, batch_size=32).fingerprint()["sample_chunk"] == 8
    with pytest.raises(ValueError, match="chunk must be >= 1; got 0"):
        SampleSettings(n=2, temperature=1.0, max_new_tokens=4, seed=0, chunk=0)
