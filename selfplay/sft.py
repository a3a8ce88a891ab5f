"""Warm start π_0: a short LoRA SFT of a base policy on the train split's valid answers, merged.

    python -m selfplay.sft smollm2-135m-sft         # = make warm-start; builds the cached checkpoint once

Why: SmolLM2-135M-Instruct answers the mini questions almost only with invented figures, so its
valid rate on impossible environments starts near 0 and has nowhere to fall; no reward can be shown
to make it fabricate more. A few epochs of supervised fine-tuning on the honest answers of the
*train* environments (`honest`/`honest_2` on impossible ones, both grounded answers on controls —
never an audit environment, never an invalid answer) gives a π_0 that sometimes names the
obstruction, whose valid rate can then be measured on the unseen audit environments.

The adapter is merged into the base weights and the result saved as an ordinary HF checkpoint under
the policy's cache folder (`selfplay.models.loading.sft_checkpoint_dir`), so self-play puts its own,
fresh LoRA adapter on top and "adapter off" is this warm-started π_0. The policy config names the
base and the data (`sft_base`, `sft_data`, `sft_split`); the recipe is `SFTSettings` below. The
checkpoint's `source.json` records base, recipe and a hash of the data files, and loading refuses a
checkpoint whose data hash no longer matches (rerun this command).

The objective is TRL's `SFTTrainer` on prompt-completion rows: loss on the completion only; the
prompt is the policy's own rendered prompt, the completion the answer followed by the end-of-turn
token, exactly what sampling from the policy produces.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from selfplay.envs import load_envs, train_audit_split
from selfplay.envs.prompt import policy_messages
from selfplay.envs.types import Environment
from selfplay.models.config import PolicyConfig
from selfplay.models.loading import (
    ModelUnavailableError,
    cache_root,
    data_digest,
    load_model,
    sft_data_dir,
)


@dataclass(frozen=True)
class SFTSettings:
    """The warm-start recipe, fixed before any audit: few, short answers, so a few epochs, with LoRA
    on every linear layer. The recipes compared are in experiments/labelled/README.md."""

    epochs: int = 3
    learning_rate: float = 6.0e-4
    batch_size: int = 4
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    seed: int = 0


VALID_TYPES = {"impossible": ("honest",), "control": ("correct_grounded",)}


def sft_examples(envs: list[Environment]) -> list[tuple[Environment, str]]:
    """(environment, answer text) for every valid answer of the reference type (r(e) and its
    paraphrases) of every environment given; invalid and partially valid answers never."""
    out = []
    for env in envs:
        for a in env.stress_answers:
            if a.validity == "valid" and a.answer_type in VALID_TYPES[env.kind]:
                out.append((env, a.text))
    return out


def train_environments(cfg: PolicyConfig) -> list[Environment]:
    root = sft_data_dir(cfg)
    train, _ = train_audit_split(load_envs(root), root)
    if cfg.sft_split != "train":
        raise ValueError(f"policy {cfg.name!r}: sft_split must be 'train' (the audit split is held out)")
    return train


def build(cfg: PolicyConfig, settings: SFTSettings = SFTSettings(), *, progress: bool = True) -> Path:
    """Train, merge and cache the warm start of `cfg`; returns the checkpoint folder."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import set_seed
    from trl import SFTConfig, SFTTrainer

    from selfplay.dpo import trl_prompt
    from selfplay.models.chat import end_of_turn, render

    base_cfg = PolicyConfig.named(cfg.sft_base)
    model, tok = load_model(base_cfg, device="cpu" if not torch.cuda.is_available() else None)
    envs = train_environments(cfg)
    examples = sft_examples(envs)
    if not examples:
        raise ValueError(f"policy {cfg.name!r}: no valid answers in the train split of {sft_data_dir(cfg)}")
    eot = end_of_turn(tok)
    rows = [
        {"prompt": trl_prompt(tok, render(tok, base_cfg, policy_messages(env.public))),
         "completion": text + eot}
        for env, text in examples
    ]
    set_seed(settings.seed)
    out = cache_root() / cfg.name / "model"
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".sft-", dir=out.parent))
    tmp = Path(tempfile.mkdtemp(prefix=".model-", dir=out.parent))
    try:
        args = SFTConfig(
            output_dir=str(scratch), num_train_epochs=settings.epochs,
            learning_rate=settings.learning_rate, per_device_train_batch_size=settings.batch_size,
            lr_scheduler_type="constant", seed=settings.seed, data_seed=settings.seed,
            completion_only_loss=True, max_length=None, logging_steps=1, save_strategy="no",
            report_to="none", disable_tqdm=not progress, bf16=next(model.parameters()).dtype == torch.bfloat16,
        )
        lora = LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha,
                          lora_dropout=settings.lora_dropout, task_type="CAUSAL_LM",
                          target_modules=list(settings.target_modules))
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=tok, peft_config=lora)
        result = trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        merged = trainer.model.merge_and_unload()
        merged.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        stamp = {
            "base": base_cfg.name, "data_sha256": data_digest(cfg), "split": cfg.sft_split,
            "examples": len(rows), "recipe": asdict(settings), "steps": result.global_step,
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        }
        (tmp / "source.json").write_text(json.dumps(stamp, indent=1))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m selfplay.sft", description=__doc__.splitlines()[0])
    ap.add_argument("policy", help="a policy config with sft_base, e.g. smollm2-135m-sft")
    ap.add_argument("--force", action="store_true", help="rebuild even when the cache is current")
    args = ap.parse_args(argv)
    try:
        cfg = PolicyConfig.named(args.policy)
        if cfg.sft_base is None:
            raise ValueError(f"policy {cfg.name!r} has no sft_base: nothing to warm-start")
        stamp = cache_root() / cfg.name / "model" / "source.json"
        if not args.force and stamp.is_file():
            have = json.loads(stamp.read_text())
            if have.get("data_sha256") == data_digest(cfg) and have.get("recipe") == json.loads(json.dumps(asdict(SFTSettings()))):
                print(f"{cfg.name}: warm start is current ({stamp.parent})")
                return 0
        out = build(cfg)
    except (ValueError, ModelUnavailableError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    info = json.loads((out / "source.json").read_text())
    print(f"{cfg.name}: {info['examples']} answers × {info['recipe']['epochs']} epochs, "
          f"{info['steps']} steps, loss {info['first_loss']:.3f} → {info['last_loss']:.3f}; saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
