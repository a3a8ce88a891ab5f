"""`HFBackend`: the Backend protocol over a transformers model wrapped in a PEFT LoRA adapter.

- The adapter is created with PEFT's default init (B = 0), so a fresh adapter is an exact no-op and
  "adapter on" equals π_0 until training changes it; `adapter=False` / `adapter_disabled()` run the
  same weights with LoRA off (the DPO reference policy, no second copy).
- Prompts are rendered strings (chat.py) tokenized with `add_special_tokens=False`; a prompt longer
  than `max_context` (minus the generation budget) is an error, never silently truncated.
- Sampling is pure temperature sampling (top-k and top-p off, whatever the model's generation config
  says), seeded inside the call with a forked RNG: same seed and batch size -> same completions on CPU,
  and the caller's global RNG is left untouched. A different `batch_size` draws different (equally
  valid) samples, and CUDA kernels are not bitwise reproducible.
- `next_token_logprobs` and `sequence_logprobs` group prompts that share a token prefix (several
  candidates of one environment inside a judge prompt; several answers to one prompt), run the prefix
  once and reuse a copy of its KV cache for each batch of suffixes. `reuse_prefix=False` is the plain left-padded path, kept as the reference.
- On a CPU, generation's decode steps run every linear layer on a oneDNN-prepacked weight with the
  LoRA adapter folded in (`packed.py`): float32 still, summed in another order, so outputs agree with
  the plain layers to float32 rounding. `packed_decode=False` is the plain path, kept as the reference.
- Inference runs under `torch.inference_mode()` in eval mode; the train/eval mode the trainer set is
  restored afterwards. `model` is the PeftModel, handed as-is to TRL's DPOTrainer.
"""

from __future__ import annotations

import copy
import inspect
import math
import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from peft.utils import load_peft_weights
from tqdm.auto import tqdm
from transformers import DynamicCache, GenerationConfig, StaticCache
from transformers.cache_utils import StaticLayer

from selfplay.models import chat
from selfplay.models.backend import Completion, check_sampling, completion_ids
from selfplay.models.config import LoraSettings, PolicyConfig
from selfplay.models.forward import ROW_KEEP, completion_logprob_sums, native_gqa
from selfplay.models.loading import load_model
from selfplay.models.packed import PackedLinears
from selfplay.models.packed import available as packed_available


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prefix_groups(seqs: Sequence[Sequence[int]], min_prefix: int) -> list[tuple[int, list[int]]]:
    """Partition sequence indices into (shared prefix length, members) groups.

    Sequences are visited in lexicographic order; the next one joins the current group when the
    prefix the group would keep (at most each member's length - 1, so every member keeps at least
    one suffix token) is >= `min_prefix` and the tokens saved do not drop: with g members and prefix
    P, a joiner that shrinks the prefix to P' is taken when g * P' >= (g - 1) * P. Otherwise it starts
    a new group. A group of one has prefix length 0 (nothing to share).
    """
    order = sorted(range(len(seqs)), key=lambda i: tuple(seqs[i]))
    groups: list[tuple[int, list[int]]] = []
    members: list[int] = []
    plen = 0
    for i in order:
        if members:
            shrunk = min(plen, common_prefix_len(seqs[members[0]], seqs[i]), len(seqs[i]) - 1)
            if shrunk >= min_prefix and len(members) * shrunk >= (len(members) - 1) * plen:
                members.append(i)
                plen = shrunk
                continue
            groups.append((plen if len(members) > 1 else 0, members))
        members, plen = [i], len(seqs[i]) - 1
    if members:
        groups.append((plen if len(members) > 1 else 0, members))
    return groups


class HFBackend:
    """Backend over transformers + PEFT. Build with `HFBackend.from_config(policy_cfg, ...)`."""

    def __init__(
        self,
        model,
        tokenizer,
        cfg: PolicyConfig,
        *,
        lora: LoraSettings | None = None,
        batch_size: int = 8,
        progress: bool = True,
        reuse_prefix: bool = True,
        min_prefix: int = 16,
        share_prefill: bool = True,
        # off by default for inference, where it does not pay (bench/README.md); DPO keeps it (dpo.py)
        native_gqa: bool = False,
        static_cache: bool = True,
        packed_decode: bool = True,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not isinstance(model, PeftModel):
            lora = lora or LoraSettings()
            # Gemma 3 checkpoints carry a vision tower with q/k/v projections of its own; the
            # adapter is for the language model only (vLLM serves no other)
            vision = r".*(vision_tower|multi_modal_projector).*"
            has_vision = any(re.fullmatch(vision, name) for name, _ in model.named_modules())
            with warnings.catch_warnings():  # PEFT calls a transformers method deprecated in v5
                warnings.simplefilter("ignore", FutureWarning)
                model = self._wrap(model, lora, vision if has_vision else None)
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.name = cfg.name
        self.batch_size = batch_size
        self.progress = progress
        self.reuse_prefix = reuse_prefix
        self.min_prefix = min_prefix
        self.share_prefill = share_prefill
        self.native_gqa = native_gqa
        self.static_cache = static_cache
        self.packed_decode = packed_decode
        self._packed = PackedLinears()
        self.device = next(model.parameters()).device
        params = inspect.signature(type(model.get_base_model()).forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @staticmethod
    def _wrap(model, lora: LoraSettings, exclude: str | None) -> PeftModel:
        config = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=list(lora.target_modules),
            exclude_modules=exclude,
            task_type="CAUSAL_LM",
        )
        return get_peft_model(model, config)

    @classmethod
    def from_config(
        cls,
        cfg: PolicyConfig,
        *,
        lora: LoraSettings | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        **kwargs,
    ) -> HFBackend:
        model, tokenizer = load_model(cfg, device, dtype)
        return cls(model, tokenizer, cfg, lora=lora, **kwargs)

    # -- protocol -------------------------------------------------------------------------------

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
        gen = dict(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0, num_return_sequences=n)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            flat = self._generate(prompts, max_new_tokens, gen, max(1, self.batch_size // n), adapter)
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    def greedy(self, prompts: Sequence[str], *, max_new_tokens: int, adapter: bool = True) -> list[str]:
        return self._generate(prompts, max_new_tokens, dict(do_sample=False), self.batch_size, adapter)

    def next_token_logprobs(
        self, prompts: Sequence[str], token_ids: Sequence[int], *, adapter: bool = True
    ) -> np.ndarray:
        ids = self.encode(prompts)
        tokens = torch.tensor(self._check_tokens(token_ids), device=self.device)
        out = np.zeros((len(ids), len(tokens)), dtype=np.float64)
        plain, shared = self._prefix_split(ids, range(len(ids)))
        with self._inference(adapter):
            for batch in self._batches(plain, "next-token log-probs"):
                logits = self._last_logits_plain([ids[i] for i in batch])
                out[batch] = self._pick(logits, tokens)
            for plen, members in shared:
                cache = self._prefix_cache(ids[members[0]][:plen])
                for batch in self._batches(members, "next-token log-probs (shared prefix)"):
                    logits = self._last_logits_after(cache, plen, [ids[i][plen:] for i in batch])
                    out[batch] = self._pick(logits, tokens)
        return out

    def sequence_logprobs(
        self, prompts: Sequence[str], completions: Sequence[str | Sequence[int]], *, adapter: bool = True,
        temperature: float = 1.0,
    ) -> np.ndarray:
        if not (temperature > 0 and math.isfinite(temperature)):
            raise ValueError(f"temperature must be > 0 and finite, got {temperature}")
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        p_ids, c_ids = self.encode(prompts), completion_ids(self.tokenizer, completions)
        for i, (p, c) in enumerate(zip(p_ids, c_ids, strict=True)):
            if len(p) + len(c) > self.cfg.max_context:
                raise ValueError(f"prompt {i} + completion is {len(p) + len(c)} tokens > max_context {self.cfg.max_context}")
        out = np.zeros(len(p_ids), dtype=np.float64)
        todo = [i for i in range(len(p_ids)) if c_ids[i]]  # an empty completion has log-prob 0
        # Prompts that share a prefix (the probe's and the KL's answers of one environment share their
        # whole prompt) run it once: the rows continue its KV cache. The prefix stops before each
        # member's last prompt token, whose logits score the completion's first token.
        plain, shared = self._prefix_split(p_ids, todo)
        with self._inference(adapter):
            for batch in self._batches(plain, "sequence log-probs"):
                out[batch] = completion_logprob_sums(
                    self.model, [p_ids[i] + c_ids[i] for i in batch], [len(p_ids[i]) for i in batch],
                    temperature=temperature, pad_id=self._pad_id, row_keep=ROW_KEEP)
            for plen, rows in shared:
                cache = self._prefix_cache(p_ids[rows[0]][:plen])
                for batch in self._batches(rows, "sequence log-probs (shared prefix)"):
                    out[batch] = completion_logprob_sums(
                        self.model, [(p_ids[i] + c_ids[i])[plen:] for i in batch], [len(p_ids[i]) - plen for i in batch],
                        temperature=temperature, pad_id=self._pad_id, row_keep=ROW_KEEP, prefix_len=plen,
                        **{self._cache_kw: self._batch_cache(cache, len(batch))})
        return out

    def adapter_disabled(self):
        return self.model.disable_adapter()

    # -- adapter I/O and colocation hooks ---------------------------------------------------------

    def save_adapter(self, path: str | Path) -> Path:
        """Write the LoRA adapter (adapter_config.json + weights) to `path`; returns the path."""
        self.model.save_pretrained(str(path))
        return Path(path)

    def load_adapter(self, path: str | Path) -> None:
        """Replace the current adapter weights with those saved at `path` (same LoRA shape)."""
        weights = load_peft_weights(str(path), device=str(self.device))
        result = set_peft_model_state_dict(self.model, weights)
        if result.unexpected_keys:
            raise ValueError(f"adapter at {path} does not fit this model: unexpected {result.unexpected_keys[:5]}")

    def sleep(self) -> None:
        """Nothing to release: the HF model is the one being trained."""

    def wake_up(self) -> None:
        """Nothing to restore (see `sleep`)."""

    # -- helpers ----------------------------------------------------------------------------------

    def encode(self, texts: Sequence[str], *, check_length: bool = True, budget: int = 0) -> list[list[int]]:
        """Token ids exactly as the backend feeds them (no special tokens added)."""
        if isinstance(texts, str):
            raise TypeError("expected a sequence of strings, got one string")
        ids = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
        if check_length:
            for i, seq in enumerate(ids):
                if not seq:
                    raise ValueError(f"prompt {i} is empty")
                if len(seq) + budget > self.cfg.max_context:
                    raise ValueError(
                        f"prompt {i} is {len(seq)} tokens (+{budget} to generate) > max_context "
                        f"{self.cfg.max_context} of {self.name}"
                    )
        return ids

    @property
    def _pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    def _check_tokens(self, token_ids: Sequence[int]) -> list[int]:
        vocab = self.model.get_input_embeddings().num_embeddings
        tokens = [int(t) for t in token_ids]
        bad = [t for t in tokens if not 0 <= t < vocab]
        if not tokens or bad:
            raise ValueError(f"token_ids must be a non-empty list of ids in [0, {vocab}), bad: {bad}")
        return tokens

    @contextmanager
    def _inference(self, adapter: bool) -> Iterator[None]:
        was_training = self.model.training
        self.model.eval()
        gqa = native_gqa if self.native_gqa and self.device.type == "cpu" else nullcontext
        try:
            with torch.inference_mode(), (nullcontext() if adapter else self.model.disable_adapter()), gqa():
                yield
        finally:
            self.model.train(was_training)

    def _batches(self, items: Sequence[int], what: str, size: int | None = None) -> Iterator[list[int]]:
        size = size or self.batch_size
        chunks = [list(items[i : i + size]) for i in range(0, len(items), size)]
        yield from tqdm(chunks, desc=f"{self.name}: {what}", disable=not self.progress or len(chunks) < 2, leave=False)

    def _left_pad(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(map(len, seqs))
        input_ids = torch.full((len(seqs), width), self._pad_id, dtype=torch.long)
        attention = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            input_ids[row, width - len(seq) :] = torch.tensor(seq)
            attention[row, width - len(seq) :] = 1
        return input_ids.to(self.device), attention.to(self.device)

    def _generate(self, prompts, max_new_tokens: int, gen: dict, per_batch: int, adapter: bool = True) -> list[str]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        ids = self.encode(prompts, budget=max_new_tokens)
        eos = self.model.generation_config.eos_token_id or self.tokenizer.eos_token_id
        config = base_config = GenerationConfig(max_new_tokens=max_new_tokens, pad_token_id=self._pad_id,
                                                eos_token_id=eos, **gen)
        texts: list[str] = []
        with self._inference(adapter), self._decode_kernels():
            for batch in self._batches(range(len(ids)), "generate", per_batch):
                input_ids, attention = self._left_pad([ids[i] for i in batch])
                kw = {}
                n = config.num_return_sequences or 1
                if n > 1 and self.share_prefill and input_ids.shape[1] > 1:
                    input_ids, attention, kw = self._shared_prefill(input_ids, attention, n, max_new_tokens)
                    config = copy.copy(config)
                    config.num_return_sequences = 1
                out = self.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config, **kw)
                config = base_config
                texts += self._completions(out[:, input_ids.shape[1] :], eos)
        return texts

    def _completions(self, new: torch.Tensor, eos: int | Sequence[int]) -> list[Completion]:
        """Generated rows -> Completions: each row cut after its first end token (generate() pads a
        finished row with pad ids up to the batch's longest), the text decoded from what is kept."""
        stops = torch.tensor(sorted({eos} if isinstance(eos, int) else set(eos)), device=new.device)
        hit = torch.isin(new, stops)
        finished = hit.any(dim=1)
        lengths = torch.where(finished, hit.int().argmax(dim=1) + 1, new.shape[1]).tolist()
        rows = [row[:k] for row, k in zip(new.tolist(), lengths, strict=True)]
        decoded = self.tokenizer.batch_decode(rows, skip_special_tokens=True)
        return [Completion(t, f, ids) for t, f, ids in zip(decoded, finished.tolist(), rows, strict=True)]

    def _decode_kernels(self):
        """On a CPU, decode steps run the linear layers on oneDNN-prepacked weights with the LoRA
        adapter folded in (packed.py); `packed_decode=False` is the plain path, kept as the reference."""
        if self.packed_decode and self.device.type == "cpu" and packed_available():
            return self._packed.active(self.model)
        return nullcontext()

    def _shared_prefill(self, input_ids: torch.Tensor, attention: torch.Tensor, n: int, max_new_tokens: int):
        """Prefill each prompt once for its n samples: all but the last prompt token go through the
        model at batch B, the KV cache is repeated n times, and generate() starts from the last token.
        `generate(num_return_sequences=n)` would expand the batch first and prefill every prompt n times,
        which on a CPU costs more than the whole decode. Same rows, order and RNG draws as that path
        (`share_prefill=False`, kept as the reference), so a fixed seed gives the same samples.
        On a CPU the cache is transformers' StaticCache, preallocated for the whole answer: the
        DynamicCache concatenates every layer's K and V into a new tensor at each step (bench/README.md
        has its share of decode time); on a GPU a static cache would make generate() compile."""
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        self.model(input_ids=input_ids[:, :-1], attention_mask=attention[:, :-1], position_ids=positions[:, :-1],
                   use_cache=True, logits_to_keep=1, **{self._cache_kw: cache})
        cache.batch_repeat_interleave(n)
        if self.device.type == "cpu" and self.static_cache:
            static = StaticCache(config=self.model.config, max_cache_len=input_ids.shape[1] + max_new_tokens)
            # sliding-window layers (Gemma 3) keep the DynamicCache: their static form wraps around
            if all(type(layer) is StaticLayer for layer in static.layers):
                for i, layer in enumerate(cache.layers):  # the first update allocates it at batch B·n
                    static.update(layer.keys, layer.values, i)
                cache = static
        return (input_ids.repeat_interleave(n, dim=0), attention.repeat_interleave(n, dim=0),
                {"past_key_values": cache})

    def _last_logits_plain(self, seqs: Sequence[Sequence[int]]) -> torch.Tensor:
        input_ids, attention = self._left_pad(seqs)
        # left padding shifts positions unless they are given; generate() does the same
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions, logits_to_keep=1)
        return out.logits[:, -1]

    def _prefix_split(self, ids: Sequence[Sequence[int]], rows: Sequence[int]):
        """`rows` (indices into `ids`) as (rows run whole, [(shared prefix length, rows)]): groups of
        `prefix_groups` over their ids; all whole when `reuse_prefix` is off."""
        rows = list(rows)
        groups = prefix_groups([ids[i] for i in rows], self.min_prefix) if self.reuse_prefix else [(0, list(range(len(rows))))]
        plain = [rows[m] for plen, members in groups if plen == 0 for m in members]
        return plain, [(plen, [rows[m] for m in members]) for plen, members in groups if plen > 0]

    @staticmethod
    def _batch_cache(cache: DynamicCache, n: int) -> DynamicCache:
        """A copy of a one-row prefix cache repeated for `n` rows; the prefix's own stays untouched."""
        out = copy.deepcopy(cache)
        out.batch_repeat_interleave(n)
        return out

    def _prefix_cache(self, prefix: Sequence[int]) -> DynamicCache:
        cache = DynamicCache(config=self.model.config)
        input_ids = torch.tensor([list(prefix)], device=self.device)
        self.model(input_ids=input_ids, use_cache=True, logits_to_keep=1, **{self._cache_kw: cache})
        return cache

    def _last_logits_after(self, cache: DynamicCache, plen: int, suffixes: Sequence[Sequence[int]]) -> torch.Tensor:
        """Logits after each prefix + suffix. Suffixes are right-padded, so every real token keeps its
        true position and the pads (after it) cannot influence it; the last real token is read per row."""
        width = max(map(len, suffixes))
        input_ids = torch.full((len(suffixes), width), self._pad_id, dtype=torch.long)
        attention = torch.zeros((len(suffixes), plen + width), dtype=torch.long)
        attention[:, :plen] = 1
        for row, seq in enumerate(suffixes):
            input_ids[row, : len(seq)] = torch.tensor(seq)
            attention[row, plen : plen + len(seq)] = 1
        last = torch.tensor([[len(s) - 1] for s in suffixes])
        positions = plen + torch.arange(width)[None].expand(len(suffixes), -1)
        batch_cache = self._batch_cache(cache, len(suffixes))
        kw = dict(
            input_ids=input_ids.to(self.device),
            attention_mask=attention.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=True,
            **{self._cache_kw: batch_cache},
        )
        if ROW_KEEP:
            return self.model(**kw, logits_to_keep=last.to(self.device)).logits[:, 0]
        k = width - int(last.min())  # the last k positions hold every row's last real token
        logits = self.model(**kw, logits_to_keep=k).logits
        return logits[torch.arange(len(suffixes)), last[:, 0] - (width - k)]

    @staticmethod
    def _pick(logits: torch.Tensor, tokens: torch.Tensor) -> np.ndarray:
        return torch.log_softmax(logits.float(), dim=-1)[:, tokens].double().cpu().numpy()
