"""`VLLMBackend`: the Backend protocol served by vLLM (GPU only; `pip install '.[gpu]'`).

Verified here only by tests/test_models_vllm.py, which drive this module against a fake `vllm`
module: they check how our calls are translated into vLLM requests and how its responses are read
back, not vLLM itself. Check it on a GPU (HF-vs-vLLM log-probs on a small model) before relying on
its numbers.

A thin translation layer:
- Engine: `LLM(enable_prefix_caching=True, enable_lora=True, enable_sleep_mode=True)`; prompts are
  sent as token ids (`{"prompt_token_ids": ...}`) encoded exactly as the HF backend encodes them
  (no special tokens added), so both backends see the same tokens.
- Adapter: vLLM cannot train, so an `HFBackend` on the same GPU (`trainable`) holds the PeftModel
  that TRL trains. `save_adapter(path)` writes it and points vLLM at the new files with a fresh
  `LoRARequest(name, int id, path)` (vLLM caches adapters by id, so every version gets a new one).
  Before any adapter is saved the fresh adapter is a no-op, and requests go out without LoRA.
  `adapter=False` / `adapter_disabled()` send no LoRA request: π_0.
- Sampling: `SamplingParams(n, temperature, max_tokens, seed)` with top-k/top-p left off, one
  params object per prompt with seed `seed + i`, so repeated prompts still get distinct samples.
- Next-token log-probs of given tokens: one greedy step per prompt. Recent vLLM takes the ids in
  `SamplingParams(logprob_token_ids=[...])` and returns exactly those; older V1 releases only return
  top-k, so there we ask for the whole vocabulary (`logprobs=-1`, engine built with
  `max_logprobs=-1`). `logprobs=K` alone would miss tokens outside the top K. Both read the
  log-softmax of the raw logits (vLLM's default `logprobs_mode="raw_logprobs"`); prefix caching
  computes a shared prompt prefix once.
- Sequence log-probs: prompt + completion sent as one prompt with `prompt_logprobs=0`, which returns
  the log-prob of every prompt token; the completion's are summed.
- `sleep()` / `wake_up()` release and restore the GPU memory vLLM holds around a training step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from selfplay.models import chat
from selfplay.models.backend import check_sampling
from selfplay.models.config import LoraSettings, PolicyConfig
from selfplay.models.loading import checkpoint_dir, load_tokenizer


def _has_field(cls, name: str) -> bool:
    fields = getattr(cls, "__struct_fields__", None)  # vLLM's SamplingParams is a msgspec Struct
    if fields is None:
        fields = getattr(cls, "__dataclass_fields__", {})
    return name in fields


class VLLMBackend:
    """Backend over a `vllm.LLM`; build with `VLLMBackend.from_config(policy_cfg, ...)`."""

    def __init__(self, llm, tokenizer, cfg: PolicyConfig, *, trainable=None, progress: bool = True):
        import vllm

        self.llm = llm
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.name = cfg.name
        self.trainable = trainable
        self.progress = progress
        self._vllm = vllm
        self._token_ids_field = _has_field(vllm.SamplingParams, "logprob_token_ids")
        self._lora = None
        self._lora_version = 0
        self._adapter_off = False

    @staticmethod
    def engine_kwargs(cfg: PolicyConfig, lora: LoraSettings, gpu_memory_utilization: float, seed: int) -> dict:
        """Arguments of `vllm.LLM` for a policy (kept separate so tests can check them)."""
        import vllm

        if cfg.tiny_arch is not None:
            raise ValueError(f"{cfg.name}: tiny random models run on the hf backend only")
        model = str(checkpoint_dir(cfg)) if cfg.gguf_file is not None else cfg.hf_id
        kwargs = dict(
            model=model,
            dtype="bfloat16" if cfg.dtype == "auto" else cfg.dtype,
            max_model_len=cfg.max_context,
            enable_prefix_caching=True,
            enable_lora=True,
            max_lora_rank=lora.r,
            max_loras=1,
            enable_sleep_mode=True,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
        )
        if not _has_field(vllm.SamplingParams, "logprob_token_ids"):
            kwargs["max_logprobs"] = -1  # the whole-vocabulary fallback of next_token_logprobs
        return kwargs

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
        **hf_kwargs,
    ) -> VLLMBackend:
        """The engine plus, unless `trainable=False`, the HFBackend whose adapter is trained."""
        import vllm

        lora = lora or LoraSettings()
        llm = vllm.LLM(**cls.engine_kwargs(cfg, lora, gpu_memory_utilization, seed))
        hf = None
        if trainable:
            from selfplay.models.hf import HFBackend

            hf = HFBackend.from_config(cfg, lora=lora, device="cuda", progress=progress, **hf_kwargs)
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
        check_sampling(n, temperature)
        params = [
            self._vllm.SamplingParams(n=n, temperature=float(temperature), max_tokens=max_new_tokens, seed=seed + i)
            for i in range(len(prompts))
        ]
        outs = self._generate(self._encode(prompts, max_new_tokens), params, adapter)
        return [[c.text for c in out.outputs] for out in outs]

    def greedy(self, prompts: Sequence[str], *, max_new_tokens: int, adapter: bool = True) -> list[str]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        params = self._vllm.SamplingParams(n=1, temperature=0.0, max_tokens=max_new_tokens)
        outs = self._generate(self._encode(prompts, max_new_tokens), params, adapter)
        return [out.outputs[0].text for out in outs]

    def next_token_logprobs(
        self, prompts: Sequence[str], token_ids: Sequence[int], *, adapter: bool = True
    ) -> np.ndarray:
        tokens = [int(t) for t in token_ids]
        if not tokens:
            raise ValueError("token_ids must not be empty")
        if self._token_ids_field:
            params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=sorted(set(tokens)))
        else:
            params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1)
        outs = self._generate(self._encode(prompts, 1), params, adapter)
        result = np.zeros((len(outs), len(tokens)), dtype=np.float64)
        for i, out in enumerate(outs):
            step = out.outputs[0].logprobs[0]  # {token id: Logprob} for the one generated step
            missing = [t for t in tokens if t not in step]
            if missing:
                raise RuntimeError(f"vLLM returned no log-prob for tokens {missing} after prompt {i}")
            result[i] = [step[t].logprob for t in tokens]
        return result

    def sequence_logprobs(
        self, prompts: Sequence[str], completions: Sequence[str], *, adapter: bool = True
    ) -> np.ndarray:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        p_ids = self._encode(prompts, 0)
        c_ids = [self.tokenizer(c, add_special_tokens=False)["input_ids"] for c in completions]
        todo = [i for i, c in enumerate(c_ids) if c]  # an empty completion has log-prob 0
        result = np.zeros(len(prompts), dtype=np.float64)
        if not todo:
            return result
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        outs = self._generate([p_ids[i] + c_ids[i] for i in todo], params, adapter)
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
        self.llm.sleep(level=1)

    def wake_up(self) -> None:
        self.llm.wake_up()

    # -- helpers ----------------------------------------------------------------------------------

    def _encode(self, prompts: Sequence[str], budget: int) -> list[list[int]]:
        if isinstance(prompts, str):
            raise TypeError("expected a sequence of strings, got one string")
        ids = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"] if prompts else []
        for i, seq in enumerate(ids):
            if not seq:
                raise ValueError(f"prompt {i} is empty")
            if len(seq) + budget > self.cfg.max_context:
                raise ValueError(f"prompt {i} is {len(seq)} tokens (+{budget}) > max_context {self.cfg.max_context}")
        return ids

    def _generate(self, ids: list[list[int]], params, adapter: bool):
        if not ids:
            return []
        lora = self._lora if adapter and not self._adapter_off else None
        return self.llm.generate(
            [{"prompt_token_ids": seq} for seq in ids], params, use_tqdm=self.progress, lora_request=lora
        )
