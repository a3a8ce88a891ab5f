"""Forward passes over a transformers causal LM shared by `HFBackend` and the DPO step.

- `completion_logprob_sums`: per sequence, the sum of log p(token | everything before it) over the
  tokens after its prompt, in one right-padded forward (`right_padded`) that projects only those
  positions.
- `native_gqa`: attention reads the KV heads as they are instead of copying them per query head.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import modeling_utils

# Per-row `logits_to_keep` (a 2-D tensor of positions or a boolean mask) came with transformers'
# `slice_logits_to_keep`; older releases, such as the one vLLM pins, index with it as if 1-D, so
# there the last k positions are kept and the wanted ones picked out of them.
ROW_KEEP = hasattr(modeling_utils, "slice_logits_to_keep")


def right_padded(
    seqs: Sequence[Sequence[int]], prompt_lens: Sequence[int], pad_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, keep) on the CPU, rows right-padded to the longest sequence; `keep`
    marks the positions whose logits predict a token after the prompt (position t predicts t + 1)."""
    if len(seqs) != len(prompt_lens):
        raise ValueError(f"{len(seqs)} sequences but {len(prompt_lens)} prompt lengths")
    if any(not 1 <= p <= len(s) for s, p in zip(seqs, prompt_lens, strict=True)):
        raise ValueError("each prompt length must be between 1 and its sequence's length")
    width = max(map(len, seqs))
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.long)
    keep = torch.zeros((len(seqs), width), dtype=torch.bool)
    for row, (seq, p) in enumerate(zip(seqs, prompt_lens, strict=True)):
        input_ids[row, : len(seq)] = torch.tensor(seq)
        attention[row, : len(seq)] = 1
        keep[row, p - 1 : len(seq) - 1] = True
    return input_ids, attention, keep


def completion_logprob_sums(
    model, seqs: Sequence[Sequence[int]], prompt_lens: Sequence[int], *, temperature: float = 1.0,
    pad_id: int = 0, row_keep: bool | None = None, prefix_len: int = 0, **forward_kw,
) -> list[float]:
    """For each token sequence, sum over positions t >= prompt_lens[i] of
    log softmax(logits_{t-1} / temperature)[seq[t]]; 0 for a sequence with nothing after its prompt.

    The rows are right-padded, so pads come after every real token and a causal model's real
    positions never see them. `row_keep` (default `ROW_KEEP`) picks per-row `logits_to_keep` or the
    last-k fallback; `forward_kw` goes to the model's forward as is. With `prefix_len` > 0 the rows
    continue a prefix of that many tokens whose KV cache `forward_kw` carries (one row's worth per
    row): they sit at positions prefix_len onward and attend to all of it."""
    device = next(model.parameters()).device
    input_ids, attention, keep = right_padded(seqs, prompt_lens, pad_id)
    if prefix_len:
        attention = torch.cat([torch.ones((len(seqs), prefix_len), dtype=attention.dtype), attention], dim=1)
        positions = prefix_len + torch.arange(input_ids.shape[1])
        forward_kw = dict(forward_kw, position_ids=positions[None].expand(len(seqs), -1).to(device), use_cache=True)
    kw = dict(input_ids=input_ids.to(device), attention_mask=attention.to(device), **forward_kw)
    if ROW_KEEP if row_keep is None else row_keep:
        logits = model(**kw, logits_to_keep=keep.to(device)).logits
    else:  # the last k positions hold every kept one
        k = input_ids.shape[1] - min(prompt_lens) + 1
        logits = model(**kw, logits_to_keep=k).logits[keep[:, -k:].to(device)]
    targets = torch.tensor([t for s, p in zip(seqs, prompt_lens, strict=True) for t in s[p:]], device=device)
    picked = torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, targets[:, None])[:, 0]
    sums = torch.split(picked, [len(s) - p for s, p in zip(seqs, prompt_lens, strict=True)])
    return [s.sum().item() for s in sums]


@contextmanager
def native_gqa() -> Iterator[None]:
    """Attention reads the few KV heads as they are (SDPA's `enable_gqa`) instead of copying each one
    out to every query head it serves. transformers does the copy whenever a mask is given, for CUDA's
    sake; torch's CPU flash kernel takes a mask with GQA, so there the copy only moves more KV bytes
    at every decode step and holds more for backward in DPO. The switch is transformers' own
    (TRANSFORMERS_SDPA_FORCE_GQA), read at each attention call; outputs equal the copying path
    (tests/test_models.py)."""
    key = "TRANSFORMERS_SDPA_FORCE_GQA"
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[key]
        else:
            os.environ[key] = before
