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

On a CPU the step runs under `selfplay.dpo_cpu.cpu_fast_paths` (the shared prompt, labelled
positions only, native GQA), each tested equal to the plain path; TRL's loss code runs unchanged.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset

from selfplay.dpo_cpu import cpu_fast_paths
from selfplay.models.forward import completion_logprob_sums, right_padded
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
