"""VLLMBackend's request/response translation, against a fake `vllm` module defined here.

The fake refuses what vLLM 0.32 refuses (read from its source: `SamplingParams._verify_args` and
`_validate_logprobs`, the input processor's length check, `LoRAConfig.max_lora_rank`), seeds sample j
of a request `seed + j` as vLLM's parallel sampling does, and compares `LoRARequest`s by name as vLLM
does, so a request real vLLM would refuse fails here too. tests/vllm_real/ runs the same backend on
the real CPU build; these tests keep what that build cannot show (sleep/wake, CUDA engine args).

The fake's log-probs are a known function of the request, so expected values are exact:
  next token t after a prompt of L tokens:  -(t + L) / 100
  prompt token at position j (j >= 1):      -(token_j + j) / 100
"""

from __future__ import annotations

import importlib.machinery
import math
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest

from selfplay.models import LoraSettings, PolicyConfig, load_backend
from selfplay.models.loading import load_tokenizer

VOCAB = 49152  # SmolLM2's vocabulary, which the tiny models' tokenizer shares
MAX_LOGPROB_TOKEN_IDS = 128
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
FAKE_EOS = 2


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    text: str
    logprobs: list | None = None
    finish_reason: str | None = None
    token_ids: list[int] = field(default_factory=list)  # vLLM keeps the end token it stopped on


@dataclass
class RequestOutput:
    outputs: list
    prompt_logprobs: list | None = None


@dataclass(eq=False)
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""

    def __post_init__(self):
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")
        assert self.lora_path, "lora_path cannot be empty"

    def __eq__(self, other):  # vLLM identifies adapters across engines by name alone
        return isinstance(other, LoRARequest) and self.lora_name == other.lora_name

    def __hash__(self):
        return hash(self.lora_name)


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    max_tokens: int | None = 16
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None

    def __post_init__(self):  # vLLM's _verify_args, the parts our requests can reach
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if not math.isfinite(self.temperature) or not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.logprobs is not None and self.logprobs != -1 and self.logprobs < 0:
            raise ValueError(f"logprobs must be non-negative or -1, got {self.logprobs}.")


@dataclass
class OldSamplingParams:  # a release without `logprob_token_ids`
    n: int = 1
    temperature: float = 1.0
    max_tokens: int | None = 16
    seed: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None


@dataclass
class ModelConfig:
    max_model_len: int
    max_logprobs: int = 20
    vocab_size: int = VOCAB
    enable_sleep_mode: bool = False

    def get_vocab_size(self):
        return self.vocab_size


class FakeLLM:
    def __init__(self, max_model_len=4096, max_logprobs=20, max_lora_rank=16, enable_lora=True, **kwargs):
        if max_lora_rank not in LORA_RANKS:  # vLLM's LoRAConfig refuses the engine
            raise ValueError(f"max_lora_rank {max_lora_rank} not in {LORA_RANKS}")
        self.kwargs = dict(kwargs, max_model_len=max_model_len, max_lora_rank=max_lora_rank, enable_lora=enable_lora)
        self.llm_engine = types.SimpleNamespace(model_config=ModelConfig(
            max_model_len, max_logprobs, enable_sleep_mode=kwargs.get("enable_sleep_mode", False)))
        self.calls: list[dict] = []
        self.events: list[tuple] = []

    def generate(self, prompts, sampling_params, use_tqdm=True, lora_request=None):
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        if lora_request is not None and not self.kwargs["enable_lora"]:
            raise ValueError("LoRA is not enabled")
        for p, sp in zip(prompts, params, strict=True):
            self._validate(p["prompt_token_ids"], sp)
        self.calls.append(dict(prompts=prompts, params=params, lora=lora_request))
        return [self._reply(p["prompt_token_ids"], sp, lora_request) for p, sp in zip(prompts, params, strict=True)]

    def _validate(self, ids, sp):
        config = self.llm_engine.model_config
        max_logprobs = config.vocab_size if config.max_logprobs == -1 else config.max_logprobs
        if sp.logprobs:
            asked = config.vocab_size if sp.logprobs == -1 else sp.logprobs
            if asked > max_logprobs:
                raise ValueError(f"Requested sample logprobs of {asked}, which is greater than max allowed: {max_logprobs}")
        token_ids = getattr(sp, "logprob_token_ids", None)
        if token_ids is not None:
            if len(token_ids) > MAX_LOGPROB_TOKEN_IDS:
                raise ValueError(f"Requested logprob_token_ids of length {len(token_ids)}, which is greater than max allowed")
            if [t for t in token_ids if not 0 <= t < config.vocab_size]:
                raise ValueError("logprob_token_ids contain out-of-vocab token ids")
            if sp.logprobs is not None and sp.logprobs != len(token_ids):
                raise ValueError("When both logprobs and logprob_token_ids are set, logprobs must equal len(logprob_token_ids)")
        if len(ids) >= config.max_model_len:
            raise ValueError(f"The decoder prompt (length {len(ids)}) plus the number of requested output tokens "
                             f"(at least 1) is longer than the maximum model length of {config.max_model_len}.")

    def _reply(self, ids, sp, lora):
        def step(tokens):
            return {t: Logprob(-(t + len(ids)) / 100) for t in tokens}

        lora_id = lora.lora_int_id if lora else 0
        outs = []
        for j in range(sp.n):
            seed = None if sp.seed is None else sp.seed + j  # vLLM's child requests for n > 1
            logprobs = [step([7, *sp.logprob_token_ids])] if getattr(sp, "logprob_token_ids", None) else None
            # even prompt lengths "stop" on an end token, odd ones run out of tokens
            finish = "stop" if len(ids) % 2 == 0 else "length"
            tokens = [len(ids), j] + ([FAKE_EOS] if finish == "stop" else [])
            outs.append(CompletionOutput(f"len{len(ids)}-seed{seed}-lora{lora_id}", logprobs, finish, tokens))
        prompt_logprobs = None
        if sp.prompt_logprobs is not None:
            prompt_logprobs = [None] + [{t: Logprob(-(t + j) / 100)} for j, t in enumerate(ids) if j >= 1]
        return RequestOutput(outs, prompt_logprobs)

    def sleep(self, level=1):
        self.events.append(("sleep", level))

    def wake_up(self):
        self.events.append(("wake_up",))


def install_fake_vllm(monkeypatch, params_cls=SamplingParams, cpu=False) -> types.ModuleType:
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.LLM, vllm.SamplingParams = FakeLLM, params_cls
    lora_pkg, request_mod = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request_mod.LoRARequest = LoRARequest
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: cpu, is_sleep_mode_available=lambda: not cpu)
    for name, mod in [("vllm", vllm), ("vllm.lora", lora_pkg), ("vllm.lora.request", request_mod),
                      ("vllm.platforms", platforms)]:
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


def make(monkeypatch, tokenizer, trainable=None, cpu=False, **engine):
    install_fake_vllm(monkeypatch, cpu=cpu)
    from selfplay.models.vllm_backend import VLLMBackend

    return VLLMBackend(FakeLLM(**engine), tokenizer, CFG, trainable=trainable, progress=False)


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_sample_sends_token_ids_and_seeds_that_never_collide(monkeypatch, tokenizer):
    """Prompt i goes out with seed 10 + 3i, so vLLM's per-sample seeds are 10..18, one per (i, j):
    with seed 10 + i, prompt 0's sample 1 and prompt 1's sample 0 would both draw with seed 11."""
    b = make(monkeypatch, tokenizer)
    prompts = ["<|im_start|>user\nhello<|im_end|>\n", "three words here", "three words here"]
    out = b.sample(prompts, n=3, temperature=0.7, max_new_tokens=5, seed=10)
    call = b.llm.calls[-1]
    assert call["prompts"] == [{"prompt_token_ids": encode(tokenizer, p)} for p in prompts]
    assert [(p.n, p.temperature, p.max_tokens, p.seed) for p in call["params"]] == [(3, 0.7, 5, s) for s in (10, 13, 16)]
    assert call["lora"] is None  # no adapter saved yet: the fresh adapter is a no-op
    n0, n1, _ = (len(encode(tokenizer, p)) for p in prompts)
    assert out[0] == [f"len{n0}-seed{s}-lora0" for s in (10, 11, 12)]
    assert out[2] == [f"len{n1}-seed{s}-lora0" for s in (16, 17, 18)]
    flat = [t for texts in out for t in texts]
    assert len(set(flat)) == 9  # the repeated prompt too gets samples of its own
    assert [[t.finished for t in texts] for texts in out] == [[n % 2 == 0] * 3 for n in (n0, n1, n1)]
    assert {n0 % 2, n1 % 2} == {0, 1}  # both finish reasons are read
    # the sampled ids pass through as a tuple, the end token kept exactly where vLLM stopped on it
    assert [[t.token_ids for t in texts] for texts in out] == [
        [(n, j, FAKE_EOS) if n % 2 == 0 else (n, j) for j in range(3)] for n in (n0, n1, n1)]


def test_greedy_is_temperature_zero(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    assert b.greedy(["abc"], max_new_tokens=3) == [f"len{len(encode(tokenizer, 'abc'))}-seedNone-lora0"]
    (p,) = b.llm.calls[-1]["params"]
    assert (p.n, p.temperature, p.max_tokens) == (1, 0.0, 3)


def test_next_token_logprobs_read_back_in_request_order(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    prompts = ["a b c", "a longer prompt here"]
    got = b.next_token_logprobs(prompts, [40, 3, 40])
    lengths = [len(encode(tokenizer, p)) for p in prompts]
    expected = [[-(t + n) / 100 for t in (40, 3, 40)] for n in lengths]
    np.testing.assert_allclose(got, expected)
    (p, _) = b.llm.calls[-1]["params"]
    assert (p.max_tokens, p.temperature, p.logprob_token_ids, p.logprobs) == (1, 0.0, [3, 40], None)


def test_more_token_ids_than_one_request_holds_go_out_in_chunks(monkeypatch, tokenizer):
    """300 distinct ids: vLLM takes at most 128 a request, so three requests of 128, 128 and 44."""
    b = make(monkeypatch, tokenizer)
    ids = list(range(1000, 1300))[::-1]
    got = b.next_token_logprobs(["x y"], ids)
    n = len(encode(tokenizer, "x y"))
    np.testing.assert_allclose(got, [[-(t + n) / 100 for t in ids]])
    assert [len(c["params"][0].logprob_token_ids) for c in b.llm.calls] == [128, 128, 44]


def test_out_of_vocabulary_ids_are_our_error_not_vllms(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    with pytest.raises(ValueError, match=rf"ids in \[0, {VOCAB}\), bad: \[{VOCAB}, -1\]"):
        b.next_token_logprobs(["x y"], [1, VOCAB, -1])
    with pytest.raises(ValueError, match="token_ids"):
        b.next_token_logprobs(["x"], [])
    assert b.llm.calls == []


def test_the_fake_refuses_what_vllm_refuses(monkeypatch):
    """The requests the old backend sent: the whole-vocabulary fallback without max_logprobs=-1,
    both logprobs and logprob_token_ids of another length, more than 128 ids, temperature above 2,
    no new tokens, a rank vLLM does not serve."""
    llm = FakeLLM()
    prompt = [{"prompt_token_ids": [1, 2]}]
    for params in [SamplingParams(max_tokens=1, logprobs=-1), SamplingParams(logprobs=1, logprob_token_ids=[3, 4]),
                   SamplingParams(logprob_token_ids=list(range(129))), SamplingParams(logprob_token_ids=[VOCAB])]:
        with pytest.raises(ValueError):
            llm.generate(prompt, params)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=2.5)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match="max_lora_rank"):
        FakeLLM(max_lora_rank=4)
    with pytest.raises(ValueError, match="maximum model length"):
        FakeLLM(max_model_len=2).generate(prompt, SamplingParams())
    assert LoRARequest("a", 1, "/x") == LoRARequest("a", 2, "/y") != LoRARequest("b", 1, "/x")


def test_sequence_logprobs_sum_the_completion_prompt_logprobs(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer)
    got = b.sequence_logprobs(["Question: two plus two?", "Q"], [" four", ""])
    p, c = encode(tokenizer, "Question: two plus two?"), encode(tokenizer, " four")
    expected = sum(-(t + len(p) + k) / 100 for k, t in enumerate(c))
    np.testing.assert_allclose(got, [expected, 0.0])
    call = b.llm.calls[-1]
    assert call["prompts"] == [{"prompt_token_ids": p + c}]  # the empty completion is not sent
    assert call["params"][0].prompt_logprobs == 0
    n_calls = len(b.llm.calls)
    with pytest.raises(ValueError, match="temperature 1 only"):  # raw prompt log-probs cannot be tempered
        b.sequence_logprobs(["Q"], [" four"], temperature=0.7)
    assert len(b.llm.calls) == n_calls


@pytest.mark.parametrize("cpu", [False, True], ids=["cuda-build", "cpu-build"])
def test_prompt_logprobs_go_one_request_a_call_on_the_cpu_build(monkeypatch, tokenizer, tmp_path, cpu):
    """On vLLM's CPU build, with LoRA enabled, several requests asking for prompt log-probs in one
    step crash its LoRA logits kernel (adapter on or off): there each goes in its own call."""
    b = make(monkeypatch, tokenizer, trainable=FakeTrainable(), cpu=cpu)
    b.save_adapter(tmp_path / "a")
    prompts, completions = ["Q one", "Q two words"], [" yes", " no"]
    for adapter in (True, False):
        b.llm.calls.clear()
        b.sequence_logprobs(prompts, completions, adapter=adapter)
        assert [len(c["prompts"]) for c in b.llm.calls] == ([1, 1] if cpu else [2])
        assert {c["lora"] is None for c in b.llm.calls} == {not adapter}


def test_lengths_are_checked_against_the_engines_max_model_len(monkeypatch, tokenizer):
    """Engine of 12 tokens: a 4-word prompt (4 tokens) may generate 8 but not 9; prompt + completion
    may fill 11 tokens (vLLM generates one more) but not 12."""
    b = make(monkeypatch, tokenizer, max_model_len=12)
    prompt = " a b c d"
    assert len(encode(tokenizer, prompt)) == 4
    b.greedy([prompt], max_new_tokens=8)
    with pytest.raises(ValueError, match=r"prompt 0 is 4 tokens \(\+9 to generate\) > the vLLM engine's max_model_len 12"):
        b.greedy([prompt], max_new_tokens=9)
    assert len(encode(tokenizer, prompt + " e f g h i j k")) == 11
    b.sequence_logprobs([prompt], [" e f g h i j k"])
    with pytest.raises(ValueError, match=r"prompt 0 \+ completion is 12 tokens \(\+1 to generate\) > the vLLM engine"):
        b.sequence_logprobs([prompt], [" e f g h i j k l"])
    with pytest.raises(ValueError, match="max_context"):  # the policy's own budget holds too
        make(monkeypatch, tokenizer, max_model_len=100_000).greedy(["word " * 9000], max_new_tokens=2)


def test_adapter_versions_and_switching(monkeypatch, tokenizer, tmp_path):
    """vLLM compares LoRA requests by name and caches adapters by id: every saved or loaded adapter
    goes out under a new name and id, with its own path."""
    trainable = FakeTrainable()
    b = make(monkeypatch, tokenizer, trainable=trainable)
    assert b.model == "peft-model"

    def sent():
        lora = b.llm.calls[-1]["lora"]
        return None if lora is None else (lora.lora_name, lora.lora_int_id, lora.lora_path)

    b.save_adapter(tmp_path / "it1")
    b.sample(["x"], n=1, temperature=1.0, max_new_tokens=2, seed=0)
    assert sent() == ("qwen3-4b-v1", 1, str(tmp_path / "it1"))
    b.save_adapter(tmp_path / "it2")
    b.greedy(["x"], max_new_tokens=2)
    assert sent() == ("qwen3-4b-v2", 2, str(tmp_path / "it2"))
    assert trainable.saved == [str(tmp_path / "it1"), str(tmp_path / "it2")]

    b.greedy(["x"], max_new_tokens=2, adapter=False)
    assert sent() is None
    b.sample(["x"], n=1, temperature=1.0, max_new_tokens=2, seed=0, adapter=False)
    assert sent() is None
    with b.adapter_disabled():
        b.next_token_logprobs(["x"], [1])
        assert sent() is None
    assert trainable.disabled == 1
    b.next_token_logprobs(["x"], [1])
    assert sent()[1] == 2

    b.load_adapter(tmp_path / "it1")  # the same files as v1, served as a new adapter
    b.greedy(["x"], max_new_tokens=2)
    assert trainable.loaded == [str(tmp_path / "it1")] and sent() == ("qwen3-4b-v3", 3, str(tmp_path / "it1"))


def test_without_trainable_there_is_nothing_to_train(monkeypatch, tokenizer, tmp_path):
    b = make(monkeypatch, tokenizer)
    with pytest.raises(AttributeError, match="trainable=False"):
        _ = b.model
    with pytest.raises(AttributeError, match="trainable=False"):
        b.save_adapter(tmp_path)


def test_sleep_and_wake_up(monkeypatch, tokenizer):
    b = make(monkeypatch, tokenizer, enable_sleep_mode=True)
    b.sleep()
    b.wake_up()
    assert b.llm.events == [("sleep", 1), ("wake_up",)]


def test_without_sleep_mode_sleep_is_a_logged_no_op(monkeypatch, tokenizer, caplog):
    """vLLM's CPU build has no sleep mode (the engine refuses enable_sleep_mode there): sleep and
    wake_up then do nothing, and say so."""
    b = make(monkeypatch, tokenizer, cpu=True)
    caplog.set_level("INFO", logger="selfplay.models.vllm_backend")
    b.sleep()
    b.wake_up()
    assert b.llm.events == [] and "no sleep mode" in caplog.text


@pytest.mark.parametrize("cpu, dtype", [(False, "bfloat16"), (True, "float32")], ids=["cuda", "cpu-build"])
def test_engine_follows_the_platform(monkeypatch, cpu, dtype):
    install_fake_vllm(monkeypatch, cpu=cpu)
    from selfplay.models.vllm_backend import VLLMBackend

    kwargs = VLLMBackend.engine_kwargs(CFG, LoraSettings(), 0.4, 3)
    assert kwargs["dtype"] == dtype and kwargs["enable_sleep_mode"] is (not cpu)


def test_a_judges_own_engine_is_inference_only_and_sleeps_with_the_policy(monkeypatch, tokenizer):
    """judge.model=<policy name> on vLLM: a second engine without a trainable copy, at a smaller
    memory share, put to sleep and woken around the DPO step together with the policy's."""
    install_fake_vllm(monkeypatch)
    import selfplay.models as M
    import selfplay.train as train
    from selfplay.config import JudgeConfig
    from selfplay.models.vllm_backend import VLLMBackend

    built = {}

    def from_config(cfg, **kw):
        built.update(kw, name=cfg.name)
        return VLLMBackend(FakeLLM(enable_sleep_mode=True), tokenizer, cfg, trainable=None, progress=False)

    monkeypatch.setattr(VLLMBackend, "from_config", staticmethod(from_config))
    judge = M.load_judge_backend(JudgeConfig(model="qwen3-4b"), backend="vllm")
    assert built == {"name": "qwen3-4b", "trainable": False,
                     "gpu_memory_utilization": M.JUDGE_GPU_MEMORY_UTILIZATION}
    policy = make(monkeypatch, tokenizer, enable_sleep_mode=True)
    train.sleep_engines(policy, judge)
    assert policy.llm.events == judge.llm.events == [("sleep", 1)]
    train.wake_engines(policy, judge)
    assert policy.llm.events == judge.llm.events == [("sleep", 1), ("wake_up",)]


@pytest.mark.parametrize("r, rank", [(1, 1), (4, 8), (8, 8), (16, 16), (17, 32), (300, 320)])
def test_engine_arguments_and_lora_rank(monkeypatch, r, rank):
    install_fake_vllm(monkeypatch)
    from selfplay.models.vllm_backend import VLLMBackend

    kwargs = VLLMBackend.engine_kwargs(CFG, LoraSettings(r=r), gpu_memory_utilization=0.4, seed=3)
    assert kwargs["model"] == "Qwen/Qwen3-4B" and kwargs["dtype"] == "bfloat16"
    assert kwargs["enable_prefix_caching"] and kwargs["enable_lora"] and kwargs["enable_sleep_mode"]
    assert (kwargs["max_lora_rank"], kwargs["max_model_len"], kwargs["seed"]) == (rank, CFG.max_context, 3)
    assert "max_logprobs" not in kwargs
    FakeLLM(**kwargs)  # the engine starts
    assert VLLMBackend.engine_kwargs(CFG, LoraSettings(), 0.4, 3, {"enable_sleep_mode": False})["enable_sleep_mode"] is False


def test_rank_above_what_vllm_serves_is_refused(monkeypatch):
    install_fake_vllm(monkeypatch)
    from selfplay.models.vllm_backend import VLLMBackend

    with pytest.raises(ValueError, match="r = 600 is above the largest rank vLLM serves"):
        VLLMBackend.engine_kwargs(CFG, LoraSettings(r=600), gpu_memory_utilization=0.4, seed=3)


def test_a_release_without_logprob_token_ids_is_refused(monkeypatch, tokenizer):
    install_fake_vllm(monkeypatch, OldSamplingParams)
    from selfplay.models.vllm_backend import VLLMBackend

    with pytest.raises(RuntimeError, match=r"needs vllm >= 0.32"):
        VLLMBackend(FakeLLM(), tokenizer, CFG, progress=False)


@pytest.mark.parametrize(
    "kw, match",
    [
        pytest.param(dict(temperature=0.0), "temperature must be > 0", id="temperature-0"),
        pytest.param(dict(temperature=2.5), "temperature must be <= 2", id="temperature-above-2"),
        pytest.param(dict(n=0), "n must be", id="n-0"),
        pytest.param(dict(max_new_tokens=0), "max_new_tokens must be >= 1", id="no-new-tokens"),
    ],
)
def test_bad_sampling_arguments_are_refused_before_vllm(monkeypatch, tokenizer, kw, match):
    b = make(monkeypatch, tokenizer)
    args = dict(n=1, temperature=1.0, max_new_tokens=2, seed=0) | kw
    with pytest.raises(ValueError, match=match):
        b.sample(["x"], **args)
    assert b.llm.calls == []


def test_load_backend_routes_to_vllm_and_auto_stays_on_hf_without_cuda(monkeypatch):
    install_fake_vllm(monkeypatch)
    with pytest.raises(ValueError, match="hf backend only"):
        load_backend("tiny-llama", backend="vllm")
    from selfplay.models.hf import HFBackend

    assert isinstance(load_backend("tiny-llama", backend="auto", progress=False), HFBackend)


def test_hf_backend_without_per_row_logits_to_keep_gives_the_same_numbers(monkeypatch):
    """The trainable half of VLLMBackend is an HFBackend running under vLLM's transformers pin
    (<5.20), which has no per-row `logits_to_keep`; its fallback (keep the last k positions, pick
    the rows' own) must give the numbers of the per-row path, on prompts of unequal lengths that
    share a prefix (the KV-reuse path) and on ones that do not."""
    from selfplay.models import hf

    b = load_backend("tiny-llama", backend="hf", device="cpu", progress=False, batch_size=4)
    shared = "A long shared packet of evidence that every candidate prompt begins with, " * 2
    prompts = [shared + "Answer: yes", shared + "Answer: it cannot be settled from the packet", "Short one"]
    completions = [" Yes.", " No, the second trial is null.", " ok"]
    assert hf.ROW_KEEP  # the project's own environment has the per-row path
    want_next = b.next_token_logprobs(prompts, [5, 17, 300])
    want_seq = b.sequence_logprobs(prompts, completions)
    monkeypatch.setattr(hf, "ROW_KEEP", False)
    np.testing.assert_allclose(b.next_token_logprobs(prompts, [5, 17, 300]), want_next, atol=1e-5)
    np.testing.assert_allclose(b.sequence_logprobs(prompts, completions), want_seq, atol=1e-5)
    assert max(plen for plen, _ in hf.prefix_groups(b.encode(prompts), b.min_prefix)) > 16


@pytest.mark.parametrize("version, expected", [((3, 10), "needs Python >= 3.11 (this is 3.10"),
                                               ((3, 11), "pip install -c constraints/gpu.txt")], ids=["py310", "py311"])
def test_backend_vllm_without_vllm_is_one_line(monkeypatch, version, expected):
    """The gpu extra carries vLLM's Python floor as a marker, so on 3.10 it installs no vLLM: asking for
    backend=vllm then says why, in one line."""
    import importlib.util

    import selfplay.models as M

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    monkeypatch.setattr(sys, "version_info", (*version, 0, "final", 0))
    with pytest.raises(M.ModelUnavailableError) as e:
        M.load_backend("qwen3-4b", backend="vllm")
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_the_gpu_extra_states_vllms_python_floor():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    from selfplay.config import PROJECT_ROOT
    from selfplay.models import VLLM_PYTHON

    (vllm_req,) = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert vllm_req.replace(" ", "") == f"vllm==0.32.*;python_version>='{VLLM_PYTHON[0]}.{VLLM_PYTHON[1]}'"
