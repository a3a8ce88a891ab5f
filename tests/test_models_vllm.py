"""VLLMBackend's request/response translation, against a fake `vllm` module defined here.

vLLM needs a GPU, so these tests are all the checking `vllm_backend.py` gets on a CPU: what we send
(`prompt_token_ids`, `SamplingParams` fields, `LoRARequest`, engine arguments) and how we read the
replies. The fake's log-probs are a known function of the request, so expected values are exact:
  next token t after a prompt of L tokens:  -(t + L) / 100
  prompt token at position j (j >= 1):      -(token_j + j) / 100
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest

from selfplay.models import LoraSettings, PolicyConfig, load_backend
from selfplay.models.loading import load_tokenizer

VOCAB = 300  # the fake engine's vocabulary when asked for all of it


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    text: str
    logprobs: list | None = None


@dataclass
class RequestOutput:
    outputs: list
    prompt_logprobs: list | None = None


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class NewSamplingParams:
    n: int = 1
    temperature: float = 1.0
    max_tokens: int | None = 16
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None


@dataclass
class OldSamplingParams:  # a release without `logprob_token_ids`
    n: int = 1
    temperature: float = 1.0
    max_tokens: int | None = 16
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None


class FakeLLM:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls: list[dict] = []
        self.events: list[tuple] = []

    def generate(self, prompts, sampling_params, use_tqdm=True, lora_request=None):
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        self.calls.append(dict(prompts=prompts, params=params, lora=lora_request))
        return [self._reply(p["prompt_token_ids"], sp, lora_request) for p, sp in zip(prompts, params, strict=True)]

    def _reply(self, ids, sp, lora):
        def step(tokens):
            return {t: Logprob(-(t + len(ids)) / 100) for t in tokens}

        lora_id = lora.lora_int_id if lora else 0
        outs = []
        for j in range(sp.n):
            logprobs = None
            if getattr(sp, "logprob_token_ids", None):
                logprobs = [step([7, *sp.logprob_token_ids])]  # the sampled token comes too
            elif sp.logprobs == -1:
                logprobs = [step(range(VOCAB))]
            outs.append(CompletionOutput(f"len{len(ids)}-seed{sp.seed}-j{j}-lora{lora_id}", logprobs))
        prompt_logprobs = None
        if sp.prompt_logprobs is not None:
            prompt_logprobs = [None] + [{t: Logprob(-(t + j) / 100)} for j, t in enumerate(ids) if j >= 1]
        return RequestOutput(outs, prompt_logprobs)

    def sleep(self, level=1):
        self.events.append(("sleep", level))

    def wake_up(self):
        self.events.append(("wake_up",))


def install_fake_vllm(monkeypatch, params_cls) -> types.ModuleType:
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.LLM, vllm.SamplingParams = FakeLLM, params_cls
    lora_pkg, request_mod = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request_mod.LoRARequest = LoRARequest
    for name, mod in [("vllm", vllm), ("vllm.lora", lora_pkg), ("vllm.lora.request", request_mod)]:
        monkeypatch.setitem(sys.modules, name, mod)
    return vllm


@dataclass
class FakeTrainable:
    """Stands in for the HFBackend that holds the trained adapter."""

    model: object = "peft-model"
    saved: list = field(default_factory=list)
    loaded: list = field(default_factory=list)
    disabled: int = 0

    def save_adapter(self, path):
        self.saved.append(str(path))

    def load_adapter(self, path):
        self.loaded.append(str(path))

    @contextmanager
    def adapter_disabled(self):
        self.disabled += 1
        yield


CFG = PolicyConfig.named("qwen3-4b")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(PolicyConfig.named("tiny-qwen3"))


def make(monkeypatch, tokenizer, params_cls=NewSamplingParams, trainable=None):
    install_fake_vllm(monkeypatch, params_cls)
    from selfplay.models.vllm_backend import VLLMBackend

    return VLLMBackend(FakeLLM(), tokenizer, CFG, trainable=trainable, progress=False)


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_sample_sends_token_ids_and_per_prompt_seeds(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    prompts = ["<|im_start|>user\nhello<|im_end|>\n", "two words"]
    out = b.sample(prompts, n=2, temperature=0.7, max_new_tokens=5, seed=10)
    call = b.llm.calls[-1]
    assert call["prompts"] == [{"prompt_token_ids": encode(tokenizer, p)} for p in prompts]
    assert [(p.n, p.temperature, p.max_tokens, p.seed) for p in call["params"]] == [(2, 0.7, 5, 10), (2, 0.7, 5, 11)]
    assert call["lora"] is None  # no adapter saved yet: the fresh adapter is a no-op
    n0, n1 = (len(encode(tokenizer, p)) for p in prompts)
    assert out == [[f"len{n0}-seed10-j0-lora0", f"len{n0}-seed10-j1-lora0"], [f"len{n1}-seed11-j0-lora0", f"len{n1}-seed11-j1-lora0"]]


def test_greedy_is_temperature_zero(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    assert b.greedy(["abc"], max_new_tokens=3) == [f"len{len(encode(tokenizer, 'abc'))}-seedNone-j0-lora0"]
    (p,) = b.llm.calls[-1]["params"]
    assert (p.n, p.temperature, p.max_tokens) == (1, 0.0, 3)


@pytest.mark.parametrize("params_cls", [NewSamplingParams, OldSamplingParams], ids=["token-ids", "full-vocab"])
def test_next_token_logprobs_read_back_in_request_order(monkeypatch, tokenizer, params_cls):
    b = make(monkeypatch, tokenizer, params_cls)
    prompts = ["a b c", "a longer prompt here"]
    got = b.next_token_logprobs(prompts, [40, 3, 40])
    lengths = [len(encode(tokenizer, p)) for p in prompts]
    expected = [[-(t + n) / 100 for t in (40, 3, 40)] for n in lengths]
    np.testing.assert_allclose(got, expected)
    (p, _) = b.llm.calls[-1]["params"]
    assert (p.max_tokens, p.temperature) == (1, 0.0)
    if params_cls is NewSamplingParams:
        assert p.logprob_token_ids == [3, 40] and p.logprobs is None
    else:
        assert p.logprobs == -1


def test_missing_token_in_reply_is_an_error(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer, OldSamplingParams)
    with pytest.raises(RuntimeError, match=r"no log-prob for tokens \[5000\]"):
        b.next_token_logprobs(["x y"], [1, 5000])


def test_sequence_logprobs_sum_the_completion_prompt_logprobs(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    got = b.sequence_logprobs(["Question: two plus two?", "Q"], [" four", ""])
    p, c = encode(tokenizer, "Question: two plus two?"), encode(tokenizer, " four")
    expected = sum(-(t + len(p) + k) / 100 for k, t in enumerate(c))
    np.testing.assert_allclose(got, [expected, 0.0])
    call = b.llm.calls[-1]
    assert call["prompts"] == [{"prompt_token_ids": p + c}]  # the empty completion is not sent
    assert call["params"][0].prompt_logprobs == 0


def test_adapter_versions_and_switching(monkeypatch, tokenizer, tmp_path):
    trainable = FakeTrainable()
    b = make(monkeypatch, tokenizer, trainable=trainable)
    assert b.model == "peft-model"
    b.save_adapter(tmp_path / "it1")
    b.sample(["x"], n=1, temperature=1.0, max_new_tokens=2, seed=0)
    assert b.llm.calls[-1]["lora"] == LoRARequest("qwen3-4b-v1", 1, str(tmp_path / "it1"))
    b.save_adapter(tmp_path / "it2")
    b.greedy(["x"], max_new_tokens=2)
    assert b.llm.calls[-1]["lora"] == LoRARequest("qwen3-4b-v2", 2, str(tmp_path / "it2"))
    assert trainable.saved == [str(tmp_path / "it1"), str(tmp_path / "it2")]

    b.greedy(["x"], max_new_tokens=2, adapter=False)
    assert b.llm.calls[-1]["lora"] is None
    with b.adapter_disabled():
        b.next_token_logprobs(["x"], [1])
        assert b.llm.calls[-1]["lora"] is None
    assert trainable.disabled == 1
    b.next_token_logprobs(["x"], [1])
    assert b.llm.calls[-1]["lora"].lora_int_id == 2

    b.load_adapter(tmp_path / "it1")
    assert trainable.loaded == [str(tmp_path / "it1")] and b._lora.lora_int_id == 3


def test_without_trainable_there_is_nothing_to_train(monkeypatch, tokenizer, tmp_path):
    b = make(monkeypatch, tokenizer)
    with pytest.raises(AttributeError, match="trainable=False"):
        _ = b.model
    with pytest.raises(AttributeError, match="trainable=False"):
        b.save_adapter(tmp_path)


def test_sleep_and_wake_up(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    b.sleep()
    b.wake_up()
    assert b.llm.events == [("sleep", 1), ("wake_up",)]


@pytest.mark.parametrize("params_cls", [NewSamplingParams, OldSamplingParams], ids=["token-ids", "full-vocab"])
def test_engine_arguments(monkeypatch, params_cls):
    install_fake_vllm(monkeypatch, params_cls)
    from selfplay.models.vllm_backend import VLLMBackend

    kwargs = VLLMBackend.engine_kwargs(CFG, LoraSettings(r=8), gpu_memory_utilization=0.4, seed=3)
    assert kwargs["model"] == "Qwen/Qwen3-4B" and kwargs["dtype"] == "bfloat16"
    assert kwargs["enable_prefix_caching"] and kwargs["enable_lora"] and kwargs["enable_sleep_mode"]
    assert (kwargs["max_lora_rank"], kwargs["max_model_len"], kwargs["seed"]) == (8, CFG.max_context, 3)
    assert kwargs.get("max_logprobs") == (None if params_cls is NewSamplingParams else -1)


def test_bad_calls(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    with pytest.raises(ValueError, match="temperature"):
        b.sample(["x"], n=1, temperature=0.0, max_new_tokens=2, seed=0)
    with pytest.raises(ValueError, match="n must be"):
        b.sample(["x"], n=0, temperature=1.0, max_new_tokens=2, seed=0)
    with pytest.raises(ValueError, match="max_context"):
        b.greedy(["word " * 9000], max_new_tokens=2)
    with pytest.raises(ValueError, match="token_ids"):
        b.next_token_logprobs(["x"], [])


def test_load_backend_routes_to_vllm_and_auto_stays_on_hf_without_cuda(monkeypatch):
    install_fake_vllm(monkeypatch, NewSamplingParams)
    with pytest.raises(ValueError, match="hf backend only"):
        load_backend("tiny-llama", backend="vllm")
    from selfplay.models.hf import HFBackend

    assert isinstance(load_backend("tiny-llama", backend="auto", progress=False), HFBackend)
