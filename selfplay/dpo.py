"""One LoRA-DPO step per iteration: TRL's `DPOTrainer` on the policy's own PeftModel, continuing its adapter.

The objective is TRL's (sigmoid DPO loss, β from the config); nothing here overrides it. What this
module decides is the data, the length limit and the reference policy, with no second model copy.

Reference log-probs are computed here, on the very token ids TRL trains on, just before the step,
and handed to TRL through its precomputed-reference columns (`ref_chosen_logps`,
`ref_rejected_logps`, which TRL reads once its `precompute_ref_logps` is on; it is switched on after
the trainer is built, so TRL's own precompute pass, which would be thrown away, never runs):
- reference="previous" (π_{t-1}): with the adapter on, i.e. the policy as it stands before the step.
- reference="initial" (π_0): with the adapter disabled, which is π_0 because one adapter carries on
  across iterations and the base weights never change.
So neither depends on how TRL builds its own reference for a PeftModel. (This TRL release, handed a
PeftModel that already has an adapter, adds a frozen copy named "ref" and precomputes its own
columns with it when asked to; the copy is deleted before training, so the optimizer and
`save_adapter` only see the one adapter. tests/test_train_dpo.py fails if TRL stops reading the
columns.)

Lengths: prompts are the backend's rendered strings. TRL tokenizes a plain-text prompt with the
tokenizer's special tokens, while the backend does not (its template already holds them); a leading
BOS the template wrote is therefore stripped from the text so both see the same ids. TRL's
`max_length` is set to the longest prompt+answer of the iteration (EOS included), capped by
`max_seq_len`; sequences over the cap are counted (`train/truncated`), and pairs whose prompt alone
reaches the cap, which TRL drops, are counted too (`train/dropped_long_prompts`).

Speed and memory on a CPU (`cpu_fast_paths`, each tested equal to the plain path): each pair's
prompt runs once for chosen and rejected, TRL's fused head projects only the labelled positions,
and attention reads the KV heads natively. TRL's loss code runs unchanged on top.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset

from selfplay.models.forward import completion_logprob_sums, native_gqa, right_padded
from selfplay.pairs import Pair


@dataclass(frozen=True)
class DPOSettings:
    beta: float
    learning_rate: float
    epochs: int
    batch_size: int
    grad_accum: int
    max_seq_len: int
    reference: str  # previous | initial
    seed: int
    gradient_checkpointing: bool = False
    progress: bool = True


@dataclass(frozen=True)
class LengthPlan:
    max_length: int  # TRL's max_length for this iteration
    longest: int  # longest prompt+answer(+EOS) in tokens
    truncated: int  # sequences (chosen or rejected) longer than max_length
    dropped_long_prompts: int  # pairs whose prompt alone reaches max_length (TRL drops them)


def trl_prompt(tokenizer, prompt: str) -> str:
    """The prompt text that TRL's tokenization (special tokens added) turns into the backend's ids."""
    bos = getattr(tokenizer, "bos_token", None)
    if bos and prompt.startswith(bos):
        plain = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        added = tokenizer(prompt)["input_ids"]
        if len(added) == len(plain) + 1 and added[1:] == plain:
            return prompt[len(bos) :]
    return prompt


def dataset_rows(tokenizer, pairs: Sequence[Pair]) -> list[dict[str, str]]:
    return [{"prompt": trl_prompt(tokenizer, p.prompt), "chosen": p.chosen, "rejected": p.rejected} for p in pairs]


def plan_lengths(tokenizer, rows: Sequence[dict[str, str]], max_seq_len: int) -> LengthPlan:
    """Token counts as TRL computes them (prompt + completion + EOS, tokenizer special tokens on)."""
    eos = tokenizer.eos_token or ""

    def n(text: str) -> int:
        return len(tokenizer(text)["input_ids"])

    prompts = [n(r["prompt"]) for r in rows]
    totals = [n(r["prompt"] + c + ("" if c.endswith(eos) else eos)) for r in rows for c in (r["chosen"], r["rejected"])]
    longest = max(totals, default=0)
    max_length = max(1, min(longest, max_seq_len))
    return LengthPlan(
        max_length=max_length,
        longest=longest,
        truncated=sum(t > max_length for t in totals),
        dropped_long_prompts=sum(p >= max_length for p in prompts),
    )


REF_COLUMNS = ("ref_chosen_logps", "ref_rejected_logps")  # TRL's precomputed-reference columns


@torch.no_grad()
def completion_logp(model, prompt_ids: Sequence[int], completion_ids: Sequence[int], max_length: int) -> float:
    """Sum of log p(completion token | everything before it), over the completion tokens that
    survive TRL's truncation of prompt + completion to `max_length` (its default "keep_start")."""
    seq = (list(prompt_ids) + list(completion_ids))[:max_length]
    k = len(seq) - len(prompt_ids)  # completion tokens kept; TRL drops rows where none are
    device = next(model.parameters()).device
    # the last k + 1 positions' logits predict the k completion tokens (the very last predicts nothing)
    logits = model(input_ids=torch.tensor([seq], device=device), logits_to_keep=k + 1, use_cache=False).logits[0, :-1]
    targets = torch.tensor(seq[-k:], device=device)
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[:, None]).sum().item()


def reference_logps(model, rows, max_length: int, *, adapter: bool, batch_pairs: int = 8) -> tuple[list[float], list[float]]:
    """Reference log-probs of chosen and rejected for each tokenized row (`prompt_ids`, `chosen_ids`,
    `rejected_ids`): the policy with its adapter on (π_{t-1}) or disabled (π_0), in eval mode.
    Batched as TRL batches them ([chosen; rejected], truncated to `max_length`, right-padded), each
    pair's prompt run once; `completion_logp` is the one-sequence path it is tested against."""
    was_training = model.training
    model.eval()
    chosen: list[float] = []
    rejected: list[float] = []
    # TRL's DPOTrainer puts its fused log-prob head on the model (an instance `forward` wrapping the class's)
    fused = hasattr(vars(model.get_base_model()).get("forward"), "__wrapped__")
    try:
        with torch.no_grad(), nullcontext() if adapter else model.disable_adapter(), cpu_fast_paths(model):
            for start in range(0, len(rows), batch_pairs):
                batch = [rows[i] for i in range(start, min(start + batch_pairs, len(rows)))]
                seqs, prompt_lens = [], []
                for key in ("chosen_ids", "rejected_ids"):
                    for r in batch:
                        seqs.append((list(r["prompt_ids"]) + list(r[key]))[:max_length])
                        prompt_lens.append(len(r["prompt_ids"]))
                if fused:  # the very head (and float rounding) TRL's loss will use
                    sums = fused_logprob_sums(model, seqs, prompt_lens)
                else:
                    sums = completion_logprob_sums(model, seqs, prompt_lens, use_cache=False)
                chosen += sums[: len(batch)]
                rejected += sums[len(batch) :]
    finally:
        model.train(was_training)
    return chosen, rejected


def fused_logprob_sums(model, seqs: Sequence[Sequence[int]], prompt_lens: Sequence[int]) -> list[float]:
    """`completion_logprob_sums` through TRL's fused log-prob head: right-padded rows, labels on the
    tokens after each prompt, -100 elsewhere."""
    device = next(model.parameters()).device
    input_ids, attention, keep = right_padded(seqs, prompt_lens)
    labels = input_ids.masked_fill(~keep.roll(1, dims=1), -100)  # each kept position's next token
    out = model(input_ids=input_ids.to(device), attention_mask=attention.to(device), labels=labels.to(device),
                use_cache=False, fused_lm_head=True)
    return out.log_probs.sum(1).tolist()


def _mean(history: list[dict], key: str) -> float | None:
    values = [h[key] for h in history if key in h]
    return float(sum(values) / len(values)) if values else None


def dpo_step(model, tokenizer, pairs: Sequence[Pair], settings: DPOSettings, scratch: Path) -> dict[str, float]:
    """Train `model` (a PeftModel, in place) on `pairs`; return `train/` metrics. `scratch` is an empty
    directory the trainer may write into; the caller removes it."""
    from trl import DPOConfig, DPOTrainer

    rows = dataset_rows(tokenizer, pairs)
    plan = plan_lengths(tokenizer, rows, settings.max_seq_len)
    metrics = {
        "train/pairs": float(len(rows)),
        "train/max_length": float(plan.max_length),
        "train/longest_sequence": float(plan.longest),
        "train/truncated": float(plan.truncated),
        "train/dropped_long_prompts": float(plan.dropped_long_prompts),
    }
    if len(rows) - plan.dropped_long_prompts == 0:
        return metrics | {"train/steps": 0.0}

    dtype = next(model.parameters()).dtype
    args = DPOConfig(
        output_dir=str(scratch),
        beta=settings.beta,
        learning_rate=settings.learning_rate,
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        max_length=plan.max_length,
        # False here, switched on below once the columns are ours: with True, this TRL release would
        # hash every weight and run a whole reference pass of its own in __init__, only to be replaced
        precompute_ref_log_probs=False,
        gradient_checkpointing=settings.gradient_checkpointing,
        bf16=dtype == torch.bfloat16,
        fp16=False,
        seed=settings.seed,
        data_seed=settings.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=not settings.progress,
    )
    trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    trainer.precompute_ref_logps = True  # TRL reads the reference from the dataset's columns
    if "ref" in model.peft_config:
        model.delete_adapter("ref")
    model.set_adapter("default")
    data = trainer.train_dataset  # TRL's tokenized rows (EOS added, long prompts dropped)
    chosen, rejected = reference_logps(model, data, plan.max_length, adapter=settings.reference == "previous")
    trainer.train_dataset = (
        data.remove_columns([c for c in REF_COLUMNS if c in data.column_names])
        .add_column(REF_COLUMNS[0], chosen)
        .add_column(REF_COLUMNS[1], rejected)
    )
    try:
        with cpu_fast_paths(model, enabled=not settings.gradient_checkpointing):
            result = trainer.train()
        history = trainer.state.log_history
    finally:
        model.eval()
        del trainer
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    metrics |= {"train/steps": float(result.global_step), "train/loss": float(result.training_loss)}
    for key, name in TRL_LOG_KEYS.items():
        value = _mean(history, key)
        if value is not None:
            metrics[f"train/{name}"] = value
    return metrics


# TRL's per-step log keys -> our `train/` names (means over the iteration's optimizer steps)
TRL_LOG_KEYS = {
    "rewards/accuracies": "rewards_accuracy", "rewards/margins": "rewards_margin",
    "rewards/chosen": "rewards_chosen", "rewards/rejected": "rewards_rejected",
    "logps/chosen": "logps_chosen", "logps/rejected": "logps_rejected", "grad_norm": "grad_norm",
}


# -- one prompt pass per pair -----------------------------------------------------------------------
# TRL runs chosen and rejected as two full rows, so every pair's prompt (most of its tokens) goes
# through the model twice, forward and backward, and TRL has no option that shares it (its
# padding-free mode is disabled in this release). Causal attention makes a row's hidden states at the
# positions of a shared prefix independent of what follows, so the backbone below runs each pair's
# common prefix once, keeps its KV with their autograd history, and runs the two continuations on
# top of it; the result is laid out exactly as the plain backbone's `last_hidden_state` (same rows,
# same positions), so TRL's fused head and loss run unchanged and gradients sum over both uses of the
# prefix by the chain rule. tests/test_train_dpo.py checks log-probs, losses and gradients against
# the plain forward.


def pair_prefix_lens(input_ids: torch.Tensor, lengths: Sequence[int]) -> list[int] | None:
    """Shared prefix length of rows i and i + B (TRL's [chosen; rejected] batch), kept below each row's
    length so both rows keep a token of their own; None when a pair shares nothing."""
    half = len(lengths) // 2
    out = []
    for i in range(half):
        a, b = input_ids[i, : lengths[i]], input_ids[i + half, : lengths[i + half]]
        n = min(len(a), len(b))
        diff = (a[:n] != b[:n]).nonzero()
        common = int(diff[0, 0]) if len(diff) else n
        out.append(min(common, n - 1))
    return out if out and min(out) >= 1 else None


def shared_prefix_hidden(run, cache_kw: str, config, input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """`run(...)` (the plain backbone) on TRL's right-padded [chosen; rejected] rows with each pair's
    common prefix computed once; returns the (2B, W, H) hidden states, or None when it does not apply."""
    from transformers import DynamicCache

    rows, width = input_ids.shape
    lengths = attention_mask.sum(-1).tolist()
    if rows % 2 or any(int(attention_mask[r, :n].sum()) != n for r, n in enumerate(lengths)):
        return None  # not right-padded pairs
    shared = pair_prefix_lens(input_ids, lengths)
    if shared is None:
        return None
    half, device, pad = rows // 2, input_ids.device, 0
    wp = max(shared)
    p_ids = torch.full((half, wp), pad, dtype=input_ids.dtype, device=device)
    p_mask = torch.zeros((half, wp), dtype=attention_mask.dtype, device=device)
    for i, s in enumerate(shared):  # right-padded too: no query row is left without a key to attend to
        p_ids[i, :s] = input_ids[i, :s]
        p_mask[i, :s] = 1
    cache = DynamicCache(config=config)
    positions = torch.arange(wp, device=device)[None].expand(half, -1)
    prefix = run(input_ids=p_ids, attention_mask=p_mask, position_ids=positions, use_cache=True,
                 **{cache_kw: cache}).last_hidden_state
    # continuation rows interleaved (chosen_i, rejected_i), the order batch_repeat_interleave gives the cache
    order = [r for i in range(half) for r in (i, i + half)]
    tails = [lengths[r] - shared[r % half] for r in order]
    ws = max(tails)
    s_ids = torch.full((rows, ws), pad, dtype=input_ids.dtype, device=device)
    s_mask = torch.zeros((rows, wp + ws), dtype=attention_mask.dtype, device=device)
    s_mask[:, :wp] = p_mask.repeat_interleave(2, dim=0)
    s_pos = torch.zeros((rows, ws), dtype=torch.long, device=device)
    for j, r in enumerate(order):
        s = shared[r % half]
        s_ids[j, : tails[j]] = input_ids[r, s : lengths[r]]
        s_mask[j, wp : wp + tails[j]] = 1
        s_pos[j] = s + torch.arange(ws, device=device)
    cache.batch_repeat_interleave(2)
    tail = run(input_ids=s_ids, attention_mask=s_mask, position_ids=s_pos, use_cache=True,
               **{cache_kw: cache}).last_hidden_state
    out = [None] * rows
    for j, r in enumerate(order):
        s, n = shared[r % half], tails[j]
        out[r] = torch.cat([prefix[r % half, :s], tail[j, :n], tail.new_zeros(width - s - n, tail.shape[-1])])
    return torch.stack(out)


@contextmanager
def labelled_positions_only() -> Iterator[None]:
    """TRL's fused head projects only the positions that carry a label when it runs on a GPU, and
    every position elsewhere, so that a compiler (Neuron's) sees one tile shape per batch. On a CPU
    that is no gain, and projecting every prompt position through the vocabulary-wide head sets the
    step's memory peak. Inside the block the GPU rule holds everywhere:
    the same per-token log-probs (unlabelled positions are 0 either way), tested in test_train_dpo."""
    import trl.trainer.utils as trl_utils

    gpu_rule = trl_utils._use_triton
    trl_utils._use_triton = lambda device: True  # read there only to choose the positions to project
    try:
        yield
    finally:
        trl_utils._use_triton = gpu_rule


def cpu_fast_paths(model, enabled: bool = True):
    """What a CPU step runs under: the shared prompt, labelled positions only, and native GQA."""
    stack = ExitStack()
    stack.enter_context(prompt_shared_once(model, enabled=enabled))
    if next(model.parameters()).device.type == "cpu":
        stack.enter_context(labelled_positions_only())
        stack.enter_context(native_gqa())
    return stack


@contextmanager
def prompt_shared_once(model, enabled: bool = True) -> Iterator[None]:
    """Inside the block, the backbone of `model` (a PeftModel over a text-only causal LM) computes each
    pair's shared prompt once when handed TRL's [chosen; rejected] batch without a cache; every other
    call (generation, single rows) goes to the plain forward."""
    from transformers.modeling_outputs import BaseModelOutputWithPast

    lm = model.get_base_model()
    backbone = lm.base_model  # what TRL's fused head and the model's own forward call
    params = inspect.signature(type(backbone).forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    # sliding-window layers (Gemma 3) crop the prefix KV they hand on; those models take the plain forward
    layers = getattr(lm.config, "layer_types", None) or (["sliding"] if getattr(lm.config, "sliding_window", None)
                                                         and getattr(lm.config, "use_sliding_window", True) else [])
    full = all(t == "full_attention" for t in layers)
    if (not enabled or not full or lm.config.get_text_config() is not lm.config or cache_kw not in params
            or "position_ids" not in params):
        yield
        return
    plain = backbone.forward

    def forward(input_ids=None, attention_mask=None, **kwargs):
        extra = {k: v for k, v in kwargs.items() if v is not None and k not in ("use_cache", "return_dict")}
        hidden = None
        if input_ids is not None and attention_mask is not None and not extra and not kwargs.get("use_cache"):
            hidden = shared_prefix_hidden(plain, cache_kw, lm.config, input_ids, attention_mask)
        if hidden is None:
            return plain(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        return BaseModelOutputWithPast(last_hidden_state=hidden)

    had = "forward" in vars(backbone)
    backbone.forward = forward
    try:
        yield
    finally:
        if had:
            backbone.forward = plain
        else:
            del backbone.forward  # the instance attribute; the class's forward shows through again
