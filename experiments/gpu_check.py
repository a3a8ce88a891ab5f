"""GPU check: speed and memory of the GPU policies' shapes, with random weights, in one JSON.

    python experiments/gpu_check.py --out experiments/results/gpu_check.json

Contract. On a CUDA machine, for each model in --models (Qwen3-4B and Gemma-3-4B text model, built
from their public config.json values written out below, randomly initialised, bf16, plain
transformers — the `hf` backend), it measures and writes to one JSON (rewritten after each model, so
a crash keeps what was done):

- generation: `generate` at --batch prompts of --prompt-len random token ids, --new-tokens sampled
  tokens (EOS disabled so every row makes exactly that many); tokens/s counts new tokens only, with
  prefill included in the wall time, and a decode-only estimate that subtracts the measured prefill.
- judge vs prefill on the same token batches: judge scoring is one forward pass without a KV cache
  that keeps only the last position's logits and reads the normalised probabilities of a few verdict
  token ids (SPEC §4); plain prefill is the forward pass `generate` starts with (KV cache built, last
  logits kept). Ratio = judge tokens/s ÷ prefill tokens/s, medians of --repeats interleaved runs.
- LoRA-DPO: a real `trl.DPOTrainer.train()` for two steps (PEFT LoRA r=16 on every attention and MLP
  projection, sigmoid loss, reference = the policy with its adapter disabled, TRL's defaults
  otherwise — including its gradient checkpointing) on an in-memory preference set of random-word
  strings, tokenised by a word-level tokenizer built in code (nothing is downloaded). Step 1 carries
  the one-off costs (optimizer state allocation, kernel selection); step 2 is the steady-state step.
  Peak memory = torch.cuda.max_memory_allocated over both steps, compared with the lower bound
  weights + LoRA params + their grads + AdamW's two fp32 moments per LoRA param (activations,
  logits and the reference pass come on top of it).

Then, when vLLM and this project both import, the vLLM part (`gpu_check_vllm.py`, under the key
`vllm`): the project's VLLMBackend against its HF path on SmolLM2-135M with a LoRA adapter —
generation tokens/s of both, chosen-token log-prob agreement, sleep and wake; otherwise that key
says why it was skipped.

Apart from that part, it imports only torch, transformers, peft, trl, accelerate and the standard library (plus `datasets`
and `tokenizers`, which trl and transformers install as their own requirements), never the
project's packages, so it runs on a bare CUDA machine. Without CUDA it exits with status 2 and a
one-line message; `--help` never touches CUDA. Random weights make the timings those of the real
shapes but say nothing about quality; batch rows are unpadded, equal-length prompts.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, Gemma3TextConfig, PretrainedConfig, Qwen3Config

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "gpu_check.json"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Any fixed ids do: with random weights no token means anything; a pointwise 1-5 scale has five.
VERDICT_TOKEN_IDS = (16, 17, 18, 19, 20)
# Word-level vocabulary for the DPO strings, capped by the model's vocabulary (tiny test models).
N_WORDS = 4096
SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")


def qwen3_4b_config(**overrides) -> Qwen3Config:
    """Qwen/Qwen3-4B config.json (≈4.0B parameters, embeddings tied)."""
    values = dict(
        vocab_size=151936,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        hidden_act="silu",
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        tie_word_embeddings=True,
        attention_bias=False,
        use_sliding_window=False,
        max_window_layers=36,
        bos_token_id=151643,
        eos_token_id=151645,
    )
    return Qwen3Config(**{**values, **overrides})


def gemma3_4b_config(**overrides) -> Gemma3TextConfig:
    """text_config of google/gemma-3-4b-it (≈3.9B parameters without the vision tower).

    Five sliding-window layers (window 1024, local RoPE base 1e4) per global layer (RoPE base 1e6
    with linear scaling ×8), as in the public config's `sliding_window_pattern: 6`.
    """
    values = dict(
        vocab_size=262208,
        hidden_size=2560,
        intermediate_size=10240,
        num_hidden_layers=34,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=131072,
        rms_norm_eps=1e-6,
        query_pre_attn_scalar=256,
        sliding_window=1024,
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    return Gemma3TextConfig(**{**values, **overrides})


MODEL_CONFIGS = {"qwen3-4b": qwen3_4b_config, "gemma-3-4b": gemma3_4b_config}


def count_params(config: PretrainedConfig) -> int:
    """Parameters of the causal LM `config` describes, counted on the meta device (no memory)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class Settings:
    """Workload of one check; every field is echoed into the JSON."""

    batch: int = 32
    prompt_len: int = 512
    new_tokens: int = 128
    dpo_batch: int = 4
    lora_r: int = 16
    repeats: int = 3
    seed: int = 0

    def __post_init__(self):
        for name, value in asdict(self).items():
            if name != "seed" and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")


class _Clock:
    """Wall time of a block, waiting for queued CUDA work on both sides so it is counted."""

    def __init__(self, device: torch.device):
        self.device, self.seconds = device, 0.0

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self):
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self._sync()
        self.seconds = time.perf_counter() - self._start


def _random_ids(settings: Settings, vocab_size: int, device: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(settings.seed)
    # Low ids are special tokens in both vocabularies; keep prompts to ordinary ones.
    low = min(1000, vocab_size // 2)
    ids = torch.randint(low, vocab_size, (settings.batch, settings.prompt_len), generator=gen)
    return ids.to(device)


@torch.inference_mode()
def judge_scores(model, input_ids: torch.Tensor, verdict_ids: tuple[int, ...]) -> torch.Tensor:
    """Verdict probabilities, renormalised over `verdict_ids`, read at the last position."""
    logits = model(input_ids=input_ids, use_cache=False, logits_to_keep=1).logits[:, -1]
    return torch.softmax(logits.float()[:, list(verdict_ids)], dim=-1)


@torch.inference_mode()
def _prefill(model, input_ids: torch.Tensor):
    return model(input_ids=input_ids, use_cache=True, logits_to_keep=1).logits


def measure_judge_vs_prefill(model, ids: torch.Tensor, settings: Settings) -> dict:
    device, n_tokens = ids.device, ids.numel()
    judge_scores(model, ids, VERDICT_TOKEN_IDS)  # warm-up: kernel selection, allocator
    _prefill(model, ids)
    judge_s, prefill_s = [], []
    for _ in range(settings.repeats):
        with _Clock(device) as c:
            probs = judge_scores(model, ids, VERDICT_TOKEN_IDS)
        judge_s.append(c.seconds)
        with _Clock(device) as c:
            _prefill(model, ids)
        prefill_s.append(c.seconds)
    judge, prefill = statistics.median(judge_s), statistics.median(prefill_s)
    return {
        "tokens": n_tokens,
        "judge_s": judge_s,
        "prefill_s": prefill_s,
        "judge_tokens_per_s": n_tokens / judge,
        "prefill_tokens_per_s": n_tokens / prefill,
        "judge_over_prefill_tokens_per_s": prefill / judge,
        "verdict_probs_finite": bool(torch.isfinite(probs).all()),
    }


@torch.inference_mode()
def measure_generation(model, ids: torch.Tensor, settings: Settings, prefill_s: float) -> dict:
    kwargs = dict(
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        # Random weights emit EOS at random; without an EOS every row makes the full count.
        eos_token_id=None,
        pad_token_id=0,
    )
    model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kwargs)  # warm-up
    torch.manual_seed(settings.seed)
    on_cuda = ids.device.type == "cuda"
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(ids.device)
    with _Clock(ids.device) as clock:
        out = model.generate(
            ids, max_new_tokens=settings.new_tokens, min_new_tokens=settings.new_tokens, **kwargs
        )
    new = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    decode_s = clock.seconds - prefill_s
    return {
        "new_tokens": new,
        "wall_s": clock.seconds,
        "tokens_per_s": new / clock.seconds,
        "decode_only_tokens_per_s_estimate": new / decode_s if decode_s > 0 else None,
        "peak_bytes": torch.cuda.max_memory_allocated(ids.device) if on_cuda else None,
    }


def _word_tokenizer(n_words: int):
    """A fast word-level tokenizer over "w<i>" words, made in code so nothing is downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = list(SPECIAL_TOKENS)
    vocab = {tok: i for i, tok in enumerate(specials)}
    vocab.update({f"w{i}": len(specials) + i for i in range(n_words)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # Special tokens are split out before whitespace splitting, so TRL's "...<eos>" stays two tokens.
    core.add_special_tokens(specials)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def _preference_rows(settings: Settings, n_rows: int, n_words: int) -> dict[str, list[str]]:
    gen = torch.Generator().manual_seed(settings.seed + 1)

    def words(n: int) -> str:
        return " ".join(f"w{i}" for i in torch.randint(0, n_words, (n,), generator=gen).tolist())

    return {
        "prompt": [words(settings.prompt_len) for _ in range(n_rows)],
        "chosen": [" " + words(settings.new_tokens) for _ in range(n_rows)],
        "rejected": [" " + words(settings.new_tokens) for _ in range(n_rows)],
    }


def measure_dpo(model, settings: Settings, device: torch.device) -> dict:
    """Two LoRA-DPO steps through TRL; see the module docstring for what is timed and bounded."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import DPOConfig, DPOTrainer

    on_cuda = device.type == "cuda"
    steps = 2
    n_words = min(N_WORDS, model.config.vocab_size - len(SPECIAL_TOKENS))
    step_s: list[float] = []

    class StepTimer(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.clock = _Clock(device).__enter__()

        def on_step_end(self, args, state, control, **kwargs):
            self.clock.__exit__(None, None, None)
            step_s.append(self.clock.seconds)

    with tempfile.TemporaryDirectory() as out_dir:
        config = DPOConfig(
            output_dir=out_dir,
            max_steps=steps,
            per_device_train_batch_size=settings.dpo_batch,
            max_length=settings.prompt_len + settings.new_tokens + 2,
            learning_rate=1e-5,
            bf16=on_cuda,
            use_cpu=not on_cuda,
            save_strategy="no",
            logging_steps=1,
            report_to="none",
            disable_tqdm=True,
            seed=settings.seed,
        )
        lora = LoraConfig(
            r=settings.lora_r,
            lora_alpha=2 * settings.lora_r,
            lora_dropout=0.0,
            target_modules=list(LORA_TARGETS),
            task_type="CAUSAL_LM",
        )
        rows = Dataset.from_dict(_preference_rows(settings, steps * settings.dpo_batch, n_words))
        trainer = DPOTrainer(
            model=model,
            args=config,
            train_dataset=rows,
            processing_class=_word_tokenizer(n_words),
            peft_config=lora,
            callbacks=[StepTimer()],
        )
        params = list(trainer.model.parameters())
        lora_params = [p for p in params if p.requires_grad]
        lora_bytes = sum(p.numel() * p.element_size() for p in lora_params)
        n_lora = sum(p.numel() for p in lora_params)
        weight_bytes = sum(p.numel() * p.element_size() for p in params if not p.requires_grad)
        # params + grads in their own dtype, AdamW's exp_avg and exp_avg_sq in fp32
        lower_bound = weight_bytes + 2 * lora_bytes + 8 * n_lora
        if on_cuda:
            torch.cuda.reset_peak_memory_stats(device)
        result = trainer.train()
        peak = torch.cuda.max_memory_allocated(device) if on_cuda else None
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    del trainer
    return {
        "trainer": "trl.DPOTrainer.train()",
        "loss_type": config.loss_type,
        "beta": config.beta,
        "reference": "adapter disabled (peft_config, no ref_model)",
        # transformers 5 renamed it; older versions only have the first name
        "gradient_checkpointing": getattr(
            config, "activation_checkpointing", config.gradient_checkpointing
        ),
        "optim": str(config.optim),
        "pairs_per_step": settings.dpo_batch,
        "sequence_tokens": settings.prompt_len + settings.new_tokens + 1,
        "lora_params": n_lora,
        "lora_dtype": str(lora_params[0].dtype),
        "step_s": step_s,
        "step_s_steady": step_s[-1] if step_s else None,
        "train_runtime_s": result.metrics.get("train_runtime"),
        "loss": losses,
        "peak_bytes": peak,
        "lower_bound_bytes": lower_bound,
        "lower_bound_parts": {
            "weights": weight_bytes,
            "lora": lora_bytes,
            "lora_grads": lora_bytes,
            "adamw_fp32_moments": 8 * n_lora,
        },
        "peak_over_lower_bound": peak / lower_bound if peak else None,
    }


def check_model(config: PretrainedConfig, settings: Settings, device: torch.device, dtype) -> dict:
    """All three measurements on one randomly initialised model; frees it before returning."""
    torch.manual_seed(settings.seed)
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    report = {
        "architecture": type(model).__name__,
        "attn_implementation": model.config._attn_implementation,
        "params": n_params,
        "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "config": {
            k: getattr(config, k)
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "tie_word_embeddings",
                "sliding_window",
                "layer_types",
            )
        },
    }
    ids = _random_ids(settings, config.vocab_size, device)
    report["judge_vs_prefill"] = measure_judge_vs_prefill(model, ids, settings)
    prefill_s = statistics.median(report["judge_vs_prefill"]["prefill_s"])
    report["generation"] = measure_generation(model, ids, settings, prefill_s)
    del ids
    model.train()
    report["dpo"] = measure_dpo(model, settings, device)  # last: it injects LoRA layers in place
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return report


def _environment() -> dict:
    import accelerate
    import peft
    import trl

    return {
        "gpu": torch.cuda.get_device_name(0),
        "gpu_total_bytes": torch.cuda.get_device_properties(0).total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "trl": trl.__version__,
        "accelerate": accelerate.__version__,
        "python": platform.python_version(),
    }


def _vllm_part(settings: Settings) -> dict:
    """The project's vLLM backend against its HF path (gpu_check_vllm.py), when both import; the
    rest of this script stays runnable on a bare CUDA machine without them."""
    import importlib.util

    missing = [m for m in ("vllm", "selfplay") if importlib.util.find_spec(m) is None]
    if missing:
        return {"skipped": f"not importable here: {', '.join(missing)}"}
    try:
        try:  # run as a script (python experiments/gpu_check.py) or imported as a package module
            from gpu_check_vllm import check
        except ImportError:
            from experiments.gpu_check_vllm import check

        return check(batch=settings.batch, k=4, new_tokens=settings.new_tokens, seed=settings.seed)
    except Exception as err:  # the 4B numbers above are kept whatever happens here
        return {"error": f"{type(err).__name__}: {err}"}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Speed and memory of random-weight Qwen3-4B / Gemma-3-4B (bf16, transformers) "
        "on one CUDA GPU: generation, judge scoring vs prefill, one LoRA-DPO step. Writes one JSON."
    )
    parser.add_argument(
        "--models",
        default=",".join(MODEL_CONFIGS),
        help=f"comma-separated, from {', '.join(MODEL_CONFIGS)} (default: all)",
    )
    parser.add_argument("--batch", type=int, default=32, help="prompts per batch (default: 32)")
    parser.add_argument(
        "--prompt-len", type=int, default=512, help="prompt tokens, about one packet (default: 512)"
    )
    parser.add_argument(
        "--new-tokens",
        type=int,
        default=128,
        help="generated tokens per prompt; also the DPO completion length (default: 128)",
    )
    parser.add_argument(
        "--dpo-batch", type=int, default=4, help="preference pairs per DPO step (default: 4)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed judge/prefill repeats, median reported (default: 3)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="JSON path (default: experiments/results/gpu_check.json)",
    )
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in MODEL_CONFIGS]
    if unknown or not args.models:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(MODEL_CONFIGS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "gpu_check: needs a CUDA GPU; torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda}). Nothing was measured.",
            file=sys.stderr,
        )
        return 2
    try:
        settings = Settings(
            batch=args.batch,
            prompt_len=args.prompt_len,
            new_tokens=args.new_tokens,
            dpo_batch=args.dpo_batch,
            repeats=args.repeats,
            seed=args.seed,
        )
    except ValueError as err:
        print(f"gpu_check: {err}", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0)
    results = {
        "command": "python experiments/gpu_check.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": _environment(),
        "settings": asdict(settings),
        "dtype": "bfloat16",
        "models": {},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.models:
        print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
        try:
            results["models"][name] = check_model(
                MODEL_CONFIGS[name](), settings, device, torch.bfloat16
            )
        except Exception as err:  # one model's OOM must not lose the other's numbers
            failed = True
            results["models"][name] = {"error": f"{type(err).__name__}: {err}"}
        # outside the except block, so the traceback no longer pins the failed model's tensors
        gc.collect()
        torch.cuda.empty_cache()
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    results["vllm"] = _vllm_part(settings)
    failed = failed or "error" in results["vllm"]
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    print(f"gpu_check: wrote {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
