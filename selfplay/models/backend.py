"""The one model interface the rest of the code uses: sampling, greedy decoding and log-probabilities,
with a LoRA adapter that can be switched off (adapter off = the initial policy π_0).

Prompts are plain strings already rendered with the model's chat template (see `chat.py`), so the
judge, the trainer and the audit tokenize exactly what the backend sees.

Two protocols, one inside the other:
- `Backend`: what judges, the oracle and the audit's sampling and KL stages call. The endpoint
  backend (`endpoint.py`, judges and the oracle on an OpenAI-compatible server) is one.
- `PolicyBackend`: a `Backend` that also trains, what `selfplay/train.py` and the audit's checkpoint
  loading call: the PeftModel TRL trains (`model`), the adapter saved and loaded, and the GPU memory
  released around a DPO step. `load_backend` builds one (`HFBackend`, `VLLMBackend`; the registry is
  `selfplay.models.BACKENDS`); tests/test_contracts.py checks both against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np


class Completion(str):
    """A generated answer: the decoded text, plus whether generation stopped on its own and the token
    ids the model sampled.

    `finished` is False when the model produced no end-of-turn within `max_new_tokens` (a truncated
    sample). A `str` subclass so every caller that only wants text keeps working; the training loop
    reads `finished` to keep truncated samples out of DPO pairs, where TRL would otherwise append an
    end token the policy never wrote.

    `token_ids` are the sampled ids as the model wrote them, ending with the end-of-turn id it stopped
    on when `finished` (nothing after it), so scoring the answer need not re-tokenize its text (which
    may split differently). Empty for a Completion built from text alone.
    """

    finished: bool
    token_ids: tuple[int, ...]

    def __new__(cls, text: str, finished: bool = True, token_ids: Sequence[int] = ()) -> Completion:
        obj = super().__new__(cls, text)
        obj.finished = bool(finished)
        obj.token_ids = tuple(int(t) for t in token_ids)
        return obj

    def __reduce__(self):  # pickling (multiprocessing) keeps the flag and the ids
        return (Completion, (str(self), self.finished, self.token_ids))


def is_truncated(text: str) -> bool:
    """True for a Completion that hit the token budget; plain strings count as finished."""
    return not getattr(text, "finished", True)


@runtime_checkable
class Backend(Protocol):
    """Generation and log-probabilities, with the LoRA adapter on or off per call."""

    name: str  # policy config name, e.g. "smollm2-135m"
    tokenizer: object  # a transformers tokenizer (shared by the hf and vllm backends)

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        """Chat messages -> prompt string, through the model's chat template (chat.py)."""

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
        """n sampled completions per prompt (same seed -> same completions on CPU)."""

    def greedy(self, prompts: Sequence[str], *, max_new_tokens: int, adapter: bool = True) -> list[str]:
        """One greedy completion per prompt."""

    def next_token_logprobs(
        self, prompts: Sequence[str], token_ids: Sequence[int], *, adapter: bool = True
    ) -> np.ndarray:
        """log p(token | prompt) under the full softmax, shape [len(prompts), len(token_ids)].

        Prompts that share a token prefix (several candidates of one environment) have that prefix
        computed once.
        """

    def sequence_logprobs(
        self, prompts: Sequence[str], completions: Sequence[str | Sequence[int]], *, adapter: bool = True,
        temperature: float = 1.0,
    ) -> np.ndarray:
        """Sum of log p(completion tokens | prompt), shape [len(prompts)], under the distribution
        that sampling at `temperature` draws from (softmax of logits / temperature). A completion is
        a text (encoded without special tokens) or the token ids themselves (a sampled answer's
        `Completion.token_ids`, scored as drawn, end-of-turn included)."""

    def adapter_disabled(self) -> AbstractContextManager[None]:
        """Context in which the model runs as π_0 (LoRA off, no second copy)."""


@runtime_checkable
class PolicyBackend(Backend, Protocol):
    """A `Backend` whose adapter is trained: the training loop's policy and the audit's checkpoints."""

    model: object  # the PeftModel TRL trains: `dpo_step(policy.model, policy.tokenizer, ...)`

    def save_adapter(self, path: str | Path) -> Path:
        """Write the LoRA adapter (adapter_config.json + weights) to `path`; returns the path. A
        backend that serves a copy of the weights (vLLM) serves the adapter written from then on."""

    def load_adapter(self, path: str | Path) -> None:
        """Replace the adapter with the one saved at `path` (same LoRA shape): resuming a run, an
        audited checkpoint, and after each iteration the renamed final copy of what was saved."""

    def sleep(self) -> None:
        """Release the memory inference holds before a DPO step (vLLM: weights to CPU, KV cache
        dropped); a no-op where the inference model is the one trained (hf)."""

    def wake_up(self) -> None:
        """Take back what `sleep` released, after the DPO step."""


def completion_ids(tokenizer, completions: Sequence[str | Sequence[int]]) -> list[list[int]]:
    """The token ids `sequence_logprobs` scores: a text encoded without special tokens, ids as given."""
    return [tokenizer(c, add_special_tokens=False)["input_ids"] if isinstance(c, str) else [int(i) for i in c]
            for c in completions]


MAX_TEMPERATURE = 2.0  # vLLM refuses more; the HF backend keeps the same range so both accept one set


def check_sampling(n: int, temperature: float, max_new_tokens: int) -> None:
    """The argument checks every backend's `sample` shares (one message for both backends)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use greedy() for argmax), got {temperature}")
    if not temperature <= MAX_TEMPERATURE:
        raise ValueError(f"temperature must be <= {MAX_TEMPERATURE}, got {temperature}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
