"""`VLLMBackend`: the Backend protocol served by vLLM (`pip install '.[gpu]'`, vllm >= 0.32).

Checked two ways: tests/test_models_vllm.py drives it against a fake `vllm` that refuses what the
real one refuses (sleep/wake and CUDA paths, which the CPU build cannot show), and `make test-vllm`
(tests/vllm_real/) runs it on vLLM's CPU build with SmolLM2 against the HF backend: log-probs within
1e-4, identical greedy text, a LoRA adapter switched on, off and swapped.

A thin translation layer:
- Engine: `LLM(enable_prefix_caching=True, enable_lora=True, enable_sleep_mode=True)`; prompts are
  sent as token ids (`{"prompt_token_ids": ...}`) encoded exactly as the HF backend encodes them
  (no special tokens added), so both backends see the same tokens. `max_lora_rank` is the smallest
  rank vLLM allows (`LORA_RANKS`) that holds the adapter's r.
- Lengths: vLLM refuses a prompt that leaves no room for one generated token, so every request is
  checked here first against the engine's own `max_model_len` (and the policy's `max_context`): a
  prompt + `max_new_tokens`, or for `sequence_logprobs` prompt + completion + the one token vLLM
  generates.
- Adapter: vLLM cannot train, so an `HFBackend` beside it (`trainable`) holds the PeftModel that TRL
  trains. `save_adapter(path)` writes it and points vLLM at the new files with a fresh
  `LoRARequest(name, int id, path)`: vLLM caches adapters by id and compares requests by name, so
  every version gets a new name and id and is loaded anew. Before any adapter is saved the fresh
  adapter is a no-op, and requests go out without LoRA. `adapter=False` / `adapter_disabled()` send
  no LoRA request: π_0.
- Sampling and greedy return `Completion`s, unfinished where vLLM's `finish_reason` is "length",
  with vLLM's sampled `token_ids` (the end token it stopped on included, as the HF backend does).
  `SamplingParams(n, temperature, max_tokens, seed)` with top-k/top-p left off. vLLM seeds
  sample j of a request `seed + j`, so prompt i is sent with seed `seed + i * n`: sample (i, j) draws
  with seed `seed + i * n + j`, distinct for every pair, and repeated prompts get distinct samples.
- Next-token log-probs of given tokens: one greedy step per prompt with
  `SamplingParams(logprob_token_ids=[...])`, which returns exactly those (plus the sampled token), at
  most `MAX_TOKEN_IDS` ids a request, so longer lists go out in chunks. They are the log-softmax of
  the raw logits (vLLM's default `logprobs_mode="raw_logprobs"`); prefix caching computes a shared
  prompt prefix once.
- Sequence log-probs: prompt + completion sent as one prompt with `prompt_logprobs=0`, which returns
  the log-prob of every prompt token; the completion's are summed. On vLLM's CPU build each
  sequence goes in a call of its own (its LoRA logits kernel cannot batch prompt log-probs).
- `sleep()` / `wake_up()` release and restore the GPU memory vLLM holds around a training step. Sleep
  mode exists on CUDA (and ROCm, XPU) only: elsewhere (vLLM's CPU build) the engine is built without
  it and both are no-ops, said once in the log. `dtype: auto` is bfloat16 on a GPU and float32 on a
  CPU, as on the hf backend.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from selfplay.models import chat
from selfplay.models.backend import Completion, check_sampling, completion_ids
from selfplay.models.config import LoraSettings, PolicyConfig
from selfplay.models.loading import checkpoint_dir, load_tokenizer, sft_checkpoint_dir

log = logging.getLogger(__name__)

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm.config.lora.MaxLoRARanks
MAX_TOKEN_IDS = 128  # vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS: ids one request may ask for


def _has_field(cls, name: str) -> bool:
    fields = getattr(cls, "__struct_fields__", None)  # vLLM's SamplingParams is a msgspec Struct
    if fields is None:
        fields = getattr(cls, "__dataclass_fields__", {})
    return name in fields


def _completion(output) -> Completion:
    # vLLM's finish_reason: "stop" on an end token or stop string, "length" at max_tokens. Its
    # token_ids keep the end token a request stopped on (the detokenizer leaves it out of the text
    # only); no stop strings are sent, so "stop" always means an end token.
    return Completion(output.text, finished=output.finish_reason == "stop", token_ids=output.token_ids)


def lora_rank(r: int) -> int:
    """vLLM's `max_lora_rank` for an adapter of rank r: the smallest allowed rank >= r."""
    for rank in LORA_RANKS:
        if rank >= r:
            return rank
    raise ValueError(f"lora: r = {r} is above the largest rank vLLM serves ({LORA_RANKS[-1]})")


class VLLMBackend:
    """Backend over a `vllm.LLM`; build with `VLLMBackend.from_config(policy_cfg, ...)`."""

    def __init__(self, llm, tokenizer, cfg: PolicyConfig, *, trainable=None, progress: bool = True):
        import vllm

        if not _has_field(vllm.SamplingParams, "logprob_token_ids"):
            raise RuntimeError(
                f"vllm {getattr(vllm, '__version__', '?')} has no SamplingParams.logprob_token_ids: "
                "the vllm backend needs vllm >= 0.32 (pip install '.[gpu]')"
            )
        self.llm = llm
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.name = cfg.name
        self.trainable = trainable
        self.progress = progress
        self._vllm = vllm
        model_config = llm.llm_engine.model_config
        self.max_model_len = int(model_config.max_model_len)
        self.sleep_mode = bool(model_config.enable_sleep_mode)
        self.vocab_size = int(model_config.get_vocab_size())
        self._lora = None
        self._lora_version = 0
        self._adapter_off = False
        # vLLM's CPU LoRA logits kernel (punica_cpu.add_lora_logits, run whenever LoRA is enabled)
        # indexes adapters per request, not per prompt token: prompt log-probs of several requests
        # in one step crash there
        from vllm.platforms import current_platform

        self._prompt_logprobs_one_at_a_time = current_platform.is_cpu()

    @staticmethod
    def engine_kwargs(
        cfg: PolicyConfig,
        lora: LoraSettings,
        gpu_memory_utilization: float,
        seed: int,
        overrides: Mapping[str, Any] | None = None,
    ) -> dict:
        """Arguments of `vllm.LLM` for a policy (kept separate so tests can check them); `overrides`
        replace or add engine arguments (e.g. `max_model_len`, `enable_sleep_mode=False` on a CPU)."""
        if cfg.tiny_arch is not None:
            raise ValueError(f"{cfg.name}: tiny random models run on the hf backend only")
        from vllm.platforms import current_platform

        auto_dtype = "float32" if current_platform.is_cpu() else "bfloat16"
        model = (str(checkpoint_dir(cfg)) if cfg.gguf_file is not None
                 else str(sft_checkpoint_dir(cfg)) if cfg.sft_base is not None else cfg.hf_id)
        kwargs = dict(
            model=model,
            dtype=auto_dtype if cfg.dtype == "auto" else cfg.dtype,
            max_model_len=cfg.max_context,
            enable_prefix_caching=True,
            enable_lora=True,
            max_lora_rank=lora_rank(lora.r),
            max_loras=1,
            # vLLM refuses the engine where the platform has no sleep mode (its CPU build)
            enable_sleep_mode=current_platform.is_sleep_mode_available(),
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
        )
        return kwargs | dict(overrides or {})

    @classmethod
    def from_config(
        cls,
        cfg: PolicyConfig,
        *,
        lora: LoraSettings | None = None,
        gpu_memory_utilization: float = 0.45,
        seed: int = 0,
        trainable: bool = True,
        progress: bool = True,
        engine: Mapping[str, Any] | None = None,
        device: str | None = None,
        **hf_kwargs,
    ) -> VLLMBackend:
        """The engine plus, unless `trainable=False`, the HFBackend whose adapter is trained
        (on `device`, default CUDA when present). `engine`: overrides of `engine_kwargs`."""
        import vllm

        lora = lora or LoraSettings()
        llm = vllm.LLM(**cls.engine_kwargs(cfg, lora, gpu_memory_utilization, seed, engine))
        hf = None
        if trainable:
            from selfplay.models.hf import HFBackend

            hf = HFBackend.from_config(cfg, lora=lora, device=device, progress=progress, **hf_kwargs)
        return cls(llm, hf.tokenizer if hf else load_tokenizer(cfg), cfg, trainable=hf, progress=progress)

    # -- protocol -------------------------------------------------------------------------------

    @property
    def model(self):
        """The PeftModel TRL trains (held by the `trainable` HFBackend)."""
        if self.trainable is None:
            raise AttributeError(f"{self.name}: built with trainable=False, there is no model to train")
        return self.trainable.model

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        return chat.render(self.tokenizer, self.cfg, messages, add_generation_prompt)

    def sample(
        self,
        prompts: Sequence[str],
        *,
        n: int,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        adapter: bool = True,
    ) -> list[list[str]]:
        check_sampling(n, temperature, max_new_tokens)
        params = [
            self._vllm.SamplingParams(n=n, temperature=float(temperature), max_tokens=max_new_tokens, seed=seed + i * n)
            for i in range(len(prompts))
        ]
        outs = self._generate(self._encode(prompts, max_new_tokens), params, adapter)
        return [[_completion(c) for c in out.outputs] for out in outs]

    def greedy(self, prompts: Sequence[str], *, max_new_tokens: int, adapter: bool = True) -> list[str]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        params = self._vllm.SamplingParams(n=1, temperature=0.0, max_tokens=max_new_tokens)
        outs = self._generate(self._encode(prompts, max_new_tokens), params, adapter)
        return [_completion(out.outputs[0]) for out in outs]

    def next_token_logprobs(
        self, prompts: Sequence[str], token_ids: Sequence[int], *, adapter: bool = True
    ) -> np.ndarray:
        tokens = self._check_tokens(token_ids)
        ids = self._encode(prompts, 1)
        result = np.zeros((len(ids), len(tokens)), dtype=np.float64)
        wanted = sorted(set(tokens))
        column = {t: [k for k, u in enumerate(tokens) if u == t] for t in wanted}
        for lo in range(0, len(wanted), MAX_TOKEN_IDS):
            chunk = wanted[lo : lo + MAX_TOKEN_IDS]
            params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=chunk)
            for i, out in enumerate(self._generate(ids, params, adapter)):
                step = out.outputs[0].logprobs[0]  # {token id: Logprob} for the one generated step
                missing = [t for t in chunk if t not in step]
                if missing:
                    raise RuntimeError(f"vLLM returned no log-prob for tokens {missing} after prompt {i}")
                for t in chunk:
                    result[i, column[t]] = step[t].logprob
        return result

    def sequence_logprobs(
        self, prompts: Sequence[str], completions: Sequence[str | Sequence[int]], *, adapter: bool = True,
        temperature: float = 1.0,
    ) -> np.ndarray:
        # vLLM's prompt log-probs come from the raw logits; a tempered one needs the whole
        # vocabulary's normaliser, which it does not return. The audit scores with the hf backend.
        if temperature != 1.0:
            raise ValueError(f"the vllm backend scores at temperature 1 only (got {temperature}); use backend=hf")
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        p_ids = self._encode(prompts, 0)
        c_ids = completion_ids(self.tokenizer, completions)
        for i, (p, c) in enumerate(zip(p_ids, c_ids, strict=True)):
            self._check_length(f"prompt {i} + completion", len(p) + len(c), 0)
        todo = [i for i, c in enumerate(c_ids) if c]  # an empty completion has log-prob 0
        result = np.zeros(len(prompts), dtype=np.float64)
        if not todo:
            return result
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        seqs = [p_ids[i] + c_ids[i] for i in todo]
        if self._prompt_logprobs_one_at_a_time:
            outs = [out for seq in seqs for out in self._generate([seq], params, adapter)]
        else:
            outs = self._generate(seqs, params, adapter)
        for i, out in zip(todo, outs, strict=True):
            start = len(p_ids[i])
            per_token = out.prompt_logprobs[start:]  # position j holds log p(token j | tokens < j)
            result[i] = sum(step[t].logprob for step, t in zip(per_token, c_ids[i], strict=True))
        return result

    @contextmanager
    def adapter_disabled(self) -> Iterator[None]:
        self._adapter_off = True
        try:
            if self.trainable is not None:
                with self.trainable.adapter_disabled():
                    yield
            else:
                yield
        finally:
            self._adapter_off = False

    # -- adapter I/O and colocation ---------------------------------------------------------------

    def save_adapter(self, path: str | Path) -> Path:
        """Write the trained adapter to `path` and serve it from now on."""
        if self.trainable is None:
            raise AttributeError(f"{self.name}: built with trainable=False, there is no adapter to save")
        self.trainable.save_adapter(path)
        self.use_adapter(path)
        return Path(path)

    def load_adapter(self, path: str | Path) -> None:
        """Serve (and, when trainable, load for training) the adapter saved at `path`."""
        if self.trainable is not None:
            self.trainable.load_adapter(path)
        self.use_adapter(path)

    def use_adapter(self, path: str | Path) -> None:
        from vllm.lora.request import LoRARequest

        self._lora_version += 1
        self._lora = LoRARequest(
            lora_name=f"{self.name}-v{self._lora_version}", lora_int_id=self._lora_version, lora_path=str(path)
        )

    def sleep(self) -> None:
        """Free vLLM's GPU memory (weights to CPU, KV cache dropped) before a training step."""
        if not self.sleep_mode:
            log.info("%s: this vLLM engine has no sleep mode (not on this platform), so it keeps its "
                     "memory during the DPO step", self.name)
            return
        self.llm.sleep(level=1)

    def wake_up(self) -> None:
        if self.sleep_mode:
            self.llm.wake_up()

    # -- helpers ----------------------------------------------------------------------------------

    def _check_length(self, what: str, length: int, budget: int) -> None:
        # vLLM refuses a prompt of max_model_len tokens or more: one token must still fit after it
        if length + budget > self.cfg.max_context:
            raise ValueError(f"{what} is {length} tokens (+{budget} to generate) > max_context {self.cfg.max_context} of {self.name}")
        if length + max(budget, 1) > self.max_model_len:
            raise ValueError(
                f"{what} is {length} tokens (+{max(budget, 1)} to generate) > the vLLM engine's max_model_len "
                f"{self.max_model_len}"
            )

    def _encode(self, prompts: Sequence[str], budget: int) -> list[list[int]]:
        if isinstance(prompts, str):
            raise TypeError("expected a sequence of strings, got one string")
        ids = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"] if prompts else []
        for i, seq in enumerate(ids):
            if not seq:
                raise ValueError(f"prompt {i} is empty")
            self._check_length(f"prompt {i}", len(seq), budget)
        return ids

    def _check_tokens(self, token_ids: Sequence[int]) -> list[int]:
        tokens = [int(t) for t in token_ids]
        bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if not tokens or bad:
            raise ValueError(f"token_ids must be a non-empty list of ids in [0, {self.vocab_size}), bad: {bad}")
        return tokens

    def _generate(self, ids: list[list[int]], params, adapter: bool):
        if not ids:
            return []
        lora = self._lora if adapter and not self._adapter_off else None
        return self.llm.generate(
            [{"prompt_token_ids": seq} for seq in ids], params, use_tqdm=self.progress, lora_request=lora
        )
