"""The DPO step's speed and memory on a CPU (`cpu_fast_paths`, each tested equal to the plain path):
each pair's prompt runs once for chosen and rejected, TRL's fused head projects only the labelled
positions, and attention reads the KV heads natively. They patch TRL and transformers internals for
the length of a step; TRL's loss code runs unchanged on top.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch

from selfplay.models.forward import native_gqa

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
    """What a CPU step runs under: the shared prompt, labelled positions only, and native GQA. Only
    on a CPU, where tests/test_train_dpo.py checks the shared prompt against the plain forward: on
    CUDA (other attention kernels, bf16) `make gpu-check` compares the two (loss and gradients,
    `prompt_shared_once` in experiments/results/gpu_check.json) and the plain forward runs until
    that comparison has passed on a device."""
    stack = ExitStack()
    if next(model.parameters()).device.type == "cpu":
        stack.enter_context(prompt_shared_once(model, enabled=enabled))
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
