"""`make gpu-check`: the project's own loop on one GPU, random Qwen3-4B-shaped weights, in one JSON.

    python experiments/gpu_check.py [--device cuda|cpu] [--shape qwen3-4b|tiny] [--wheelhouse DIR]
                                    [--out FILE]

WORK is --work, or a temporary directory in outputs/ removed at the end. Phases, in order; each one's result goes into the JSON as it comes (written after every phase), so
a failing phase keeps what came before it and the exit status is 1:

0. wheelhouse (`--wheelhouse DIR`, built by `make wheelhouse`; `make gpu-check` passes it when it
   exists): `pip install --no-index --find-links DIR --no-deps --target WORK/site -r
   DIR/requirements.txt`, WORK/site first on this process's path and every child's. Then the entry
   modules are imported in a child; one that does not import stops the check here, exit 2, in one
   line naming the missing module (compiled packages cannot travel: DIR/manifest.json lists those
   the device must have).
1. policy: a random-weight checkpoint in WORK/policy built from config, nothing downloaded: Qwen3-4B's
   public config.json values (`--shape tiny`: `selfplay.models.loading.tiny_config("qwen3")`, the
   tiny test policy's shape), and the tokenizer the tiny policies share (SmolLM2's with the qwen3
   template; DIR/tokenizer when a wheelhouse is given, saved there by `make wheelhouse`).
   conf/policy/qwen3-4b.yaml with `policy.hf_id` set to that directory is then loaded by the loop
   exactly as the hub checkpoint is (bf16 on CUDA, float32 on a CPU).
2. train: `python -m selfplay.train +policy=qwen3-4b policy.hf_id=WORK/policy reward=anchored
   iterations=T ...` (backend vllm where `import vllm` works and the device is CUDA, so the loop
   sleeps and wakes it around each DPO step; hf otherwise). Per iteration, from its metrics.json:
   time/generate_s, time/judge_s, time/dpo_s, time/iteration_s, and from its files the tokens each
   phase handled: sampled tokens (an answer cut at max_new_tokens counts that many, a finished one
   its re-tokenized length + EOS), answers judged, DPO tokens (prompt + answer + EOS over chosen and
   rejected, what TRL trains on).
3. audit: `python -m audit.gap ckpt=<the run's seed dir> n=... max_envs=... bootstrap.B=1000` (the
   least B it accepts), every checkpoint t = 0..T: its wall time.
   Both children run under a short wrapper (`PEAK_WRAPPER`, the same as `python -m MODULE ARGS`)
   that writes torch.cuda.max_memory_allocated / max_memory_reserved at exit; this process samples
   the device's used memory every 0.2 s meanwhile (CUDA context, allocator cache and a vLLM
   engine's own process included). Both are compared with the lower bound of a LoRA-DPO step:
   weights + LoRA parameters + their gradients + AdamW's two fp32 moments.
4. components, in this process, on the same policy (hf backend, the training LoRA):
   - P7 exactly as `bench/run.py` computes it (`bench.run.p7`: the whole `dpo_step` at the default
     training settings on 4 mini pairs ÷ 6·N FLOP per trained token at a matmul rate measured here
     at the model's own linear shapes: bf16 with 4096 rows on CUDA, `bench.run.machine` on a CPU),
     with the step's peak allocated memory against the lower bound above.
   - judge vs prefill: the run's judge design scoring stress answers, tokens/s ÷ a plain prefill of
     the same prompts (KV cache built, last logits kept), medians of --repeats.
   - prompt_shared_once: the DPO step's shared-prompt forward (`selfplay.dpo_cpu.prompt_shared_once`)
     against the plain one on this device, DPO loss and LoRA gradients, with a pass/fail against
     bars for the weights' dtype (`prompt_sharing`); the DPO step uses it on a CPU only until this
     has passed on a GPU.
   - vLLM against HF (`gpu_check_vllm.py`, SmolLM2-135M) when vLLM imports and CUDA is there.

Random weights give the timings of the real shapes and say nothing about quality: the answers run
to max_new_tokens (`pair_truncated=true` keeps them as pairs) and the judge's mass on its verdict
tokens is tiny (`reward.min_verdict_mass=0`). The model keeps Qwen3's 151,936-row vocabulary while
the tokenizer has 49,152 tokens; sampled ids beyond it decode to nothing, so the DPO sequences are
shorter than the tokens sampled. Without CUDA, `--device cuda` exits 2 in one line; `--device cpu`
runs every phase on a CPU (tests/test_gpu_check.py, `--shape tiny`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, PretrainedConfig, Qwen3Config

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a file: the project's packages and bench/ live at the root
    sys.path.insert(0, str(REPO))

DEFAULT_OUT = REPO / "experiments" / "results" / "gpu_check.json"
SHAPES = ("qwen3-4b", "tiny")
BASE_POLICY = "qwen3-4b"  # conf/policy/ file whose template and context the random policy keeps
TOKENIZER_POLICY = "tiny-qwen3"  # whose tokenizer (SmolLM2's, qwen3 template) the random policy gets
REWARD = "anchored"
EXPERIMENT = "gpu_check"
MIN_B = 1000  # the fewest bootstrap resamples audit.gap accepts (audit.stats.MIN_B)
ENTRY_MODULES = ("selfplay.train", "selfplay.dpo", "audit.gap", "bench.run", "judges")
# `python -m MODULE ARGS`, plus the torch allocator's peaks written to FILE at exit
PEAK_WRAPPER = """\
import atexit, json, runpy, sys
out, module, *args = sys.argv[1:]
def _peaks():
    torch = sys.modules.get("torch")
    peaks = {}
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        peaks = {"allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved()}
    with open(out, "w") as f:
        json.dump(peaks, f)
atexit.register(_peaks)
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


class CheckError(RuntimeError):
    """The check cannot go on here; the message says why, in one line."""


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


def count_params(config: PretrainedConfig) -> int:
    """Parameters of the causal LM `config` describes, counted on the meta device (no memory)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def lora_param_count(config: PretrainedConfig, r: int, target_modules) -> int:
    """Parameters of a rank-r LoRA on every linear layer named in `target_modules`: r·(in + out) each."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(r * (m.in_features + m.out_features) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in target_modules)


def lower_bound(weight_bytes: int, n_lora: int, lora_bytes_per_param: int) -> dict:
    """A LoRA-DPO step's memory floor: weights, LoRA parameters and their gradients in their dtype,
    AdamW's exp_avg and exp_avg_sq in fp32 (activations, logits and caches come on top)."""
    parts = {"weights": weight_bytes, "lora": n_lora * lora_bytes_per_param,
             "lora_grads": n_lora * lora_bytes_per_param, "adamw_fp32_moments": 8 * n_lora}
    return {"bytes": sum(parts.values()), "parts": parts}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The workload; every field is echoed into the JSON."""

    shape: str = "qwen3-4b"
    iterations: int = 2
    k: int = 4
    max_train_envs: int = 4
    max_new_tokens: int = 128
    audit_n: int = 2
    audit_envs: int = 4
    repeats: int = 2
    seed: int = 0
    budget_s: float = 480.0

    def __post_init__(self):
        if self.shape not in SHAPES:
            raise ValueError(f"--shape must be one of {', '.join(SHAPES)}, got {self.shape!r}")
        if self.k < 2:
            raise ValueError(f"--k must be >= 2 (a pair needs two answers), got {self.k}")
        for name in ("iterations", "max_train_envs", "max_new_tokens", "audit_n", "audit_envs", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.budget_s <= 0:
            raise ValueError(f"--budget-s must be > 0, got {self.budget_s}")


class Clock:
    """Wall time of a block, waiting for queued CUDA work on both sides so that it is counted."""

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


class DeviceMemoryPeak:
    """The device's used memory (total − free, every process on it), sampled every 0.2 s in a thread
    while the block runs; `peak` and `baseline` (at entry) in bytes, None off CUDA."""

    def __init__(self, device: torch.device, every_s: float = 0.2):
        self.device, self.every_s = device, every_s
        self.peak = self.baseline = None
        self._stop = threading.Event()

    def _used(self) -> int:
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free

    def _poll(self):
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, self._used())

    def __enter__(self):
        if self.device.type == "cuda":
            self.baseline = self.peak = self._used()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self._used())


# -- phase 0: the wheelhouse -------------------------------------------------------------------------

def install_wheelhouse(wheelhouse: Path, site: Path) -> dict:
    """The wheelhouse's packages into `site` (first on this process's path); nothing from the network."""
    req = wheelhouse / "requirements.txt"
    if not req.is_file():
        raise CheckError(f"{req} does not exist; build the wheelhouse with `make wheelhouse` first")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse),
                           "--no-deps", "--target", str(site), "-r", str(req)], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CheckError(f"pip install from {wheelhouse} failed: {tail}")
    sys.path.insert(0, str(site))
    manifest = wheelhouse / "manifest.json"
    return {"dir": str(wheelhouse), "site": str(site), "install_s": time.perf_counter() - start,
            "requirements": req.read_text().split(),
            "needs_on_device": json.loads(manifest.read_text())["needs_on_device"] if manifest.is_file() else None}


def check_imports(env: dict) -> None:
    """The entry modules import in a fresh child with `env`; else one line naming what is missing."""
    proc = subprocess.run([sys.executable, "-c", "import " + ", ".join(ENTRY_MODULES)], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CheckError(f"the project does not import here ({tail}); the device must have the compiled "
                         "packages that wheelhouse/manifest.json lists under needs_on_device")


# -- phase 1: the random policy ---------------------------------------------------------------------

def project_tokenizer():
    """The tokenizer the tiny policies share (SmolLM2's, qwen3 template), through the models layer."""
    from selfplay.models import PolicyConfig, load_tokenizer

    return load_tokenizer(PolicyConfig.named(TOKENIZER_POLICY))


def model_config(shape: str, tokenizer) -> PretrainedConfig:
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    if shape == "tiny":
        from selfplay.models.loading import tiny_config

        return tiny_config("qwen3", len(tokenizer), ids["bos_token_id"], ids["eos_token_id"], ids["pad_token_id"])
    return qwen3_4b_config(**ids)


def build_policy(config: PretrainedConfig, tokenizer, dest: Path, device: torch.device, dtype, seed: int) -> dict:
    """A randomly initialised checkpoint of `config` with `tokenizer`, saved to `dest`."""
    start = time.perf_counter()
    torch.manual_seed(seed)
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    info = {
        "dir": str(dest),
        "architecture": type(model).__name__,
        "params": sum(p.numel() for p in model.parameters()),
        "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "dtype": str(dtype),
        "config": {k: getattr(config, k, None) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "tie_word_embeddings")},
        "tokenizer_size": len(tokenizer),
    }
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    info["build_s"] = time.perf_counter() - start
    return info


def policy_overrides(policy_dir: Path, name: str) -> list[str]:
    return [f"+policy={BASE_POLICY}", f"policy.name={name}", f"policy.hf_id={policy_dir}"]


# -- phases 2 and 3: the loop and the audit as commands ---------------------------------------------

def train_args(s: Settings, policy: list[str], backend: str, output_root: Path) -> list[str]:
    return [*policy, f"reward={REWARD}", "reward.min_verdict_mass=0.0", "logger=none", f"iterations={s.iterations}",
            f"k={s.k}", f"max_new_tokens={s.max_new_tokens}", f"max_train_envs={s.max_train_envs}", "margin=0.0",
            "pair_truncated=true", f"backend={backend}", f"seed={s.seed}", f"output_root={output_root}",
            f"experiment_name={EXPERIMENT}"]


def audit_args(s: Settings, seed_dir: Path) -> list[str]:
    return [f"ckpt={seed_dir}", f"n={s.audit_n}", f"max_envs={s.audit_envs}", f"bootstrap.B={MIN_B}",
            f"batch_size={s.audit_n * s.audit_envs}", "probe_labelled=false", "logger=none", "progress=false"]


def run_child(module: str, args: list[str], *, env: dict, cwd: Path, timeout: float, device: torch.device,
              log: Path) -> dict:
    """`python -m module args` (through PEAK_WRAPPER): wall time, status, memory peaks, stderr's tail."""
    peaks = log.with_suffix(".peaks.json")
    out = {"command": f"python -m {module} " + " ".join(args)}
    start = time.perf_counter()
    with DeviceMemoryPeak(device) as used, log.open("w") as stream:
        try:
            proc = subprocess.run([sys.executable, "-c", PEAK_WRAPPER, str(peaks), module, *args], cwd=cwd, env=env,
                                  stdout=stream, stderr=subprocess.STDOUT, timeout=timeout)
            out["returncode"] = proc.returncode
        except subprocess.TimeoutExpired:
            out["returncode"] = None
            out["error"] = f"timed out after {timeout:.0f} s"
    out["wall_s"] = time.perf_counter() - start
    if peaks.is_file() and peaks.read_text().strip():
        p = json.loads(peaks.read_text())
        out["peak_allocated_bytes"], out["peak_reserved_bytes"] = p.get("allocated"), p.get("reserved")
    if used.peak is not None:
        out["device_used_peak_bytes"] = used.peak - used.baseline
    if out["returncode"] != 0:
        out.setdefault("error", f"exit status {out['returncode']}")
        out["log_tail"] = log.read_text(errors="replace")[-3000:]
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def iteration_phases(it_dir: Path, tokenizer, max_new_tokens: int) -> dict:
    """Per-phase wall time (metrics.json) and the tokens each phase handled (its files)."""
    metrics = json.loads((it_dir / "metrics.json").read_text())["metrics"]
    gens = _jsonl(it_dir / "generations.jsonl")

    def n_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    sampled = sum(max_new_tokens if cut else n_tokens(a) + 1
                  for g in gens for a, cut in zip(g["answers"], g["truncated"], strict=True))
    prompts = {g["task_id"]: g["prompt"] for g in gens}
    eos = tokenizer.eos_token or ""
    pairs = _jsonl(it_dir / "pairs.jsonl")
    dpo_tokens = sum(n_tokens(prompts[p["task_id"]] + p[side] + eos) for p in pairs for side in ("chosen", "rejected"))
    judged = len(_jsonl(it_dir / "judgments.jsonl"))
    t = {k: metrics.get(f"time/{k}_s") for k in ("generate", "judge", "dpo", "iteration")}

    def rate(n, s):
        return n / s if s else None

    return {
        "generate_s": t["generate"], "judge_s": t["judge"], "dpo_s": t["dpo"], "iteration_s": t["iteration"],
        "answers": sum(len(g["answers"]) for g in gens), "sampled_tokens": sampled,
        "sample_tokens_per_s": rate(sampled, t["generate"]), "truncated_share": metrics.get("sample/truncated_share"),
        "judged_answers": judged, "judge_answers_per_s": rate(judged, t["judge"]),
        "dpo_pairs": len(pairs), "dpo_tokens": dpo_tokens, "dpo_tokens_per_s": rate(dpo_tokens, t["dpo"]),
        "dpo_steps": metrics.get("train/steps"), "dpo_loss": metrics.get("train/loss"),
    }


# -- phase 4: components in this process ------------------------------------------------------------

def cuda_matmul_rate(model, device: torch.device, repeats: int, rows: int = 4096) -> dict:
    """bf16 matmul FLOP/s on `device` over the model's own linear shapes (each projection of a
    decoder layer, per layer, and the LM head once), as bench.run.machine measures fp32 on a CPU."""
    cfg = model.config.get_text_config()
    h, inter, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    head_dim = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * head_dim, cfg.num_key_value_heads * head_dim
    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)]
    dtype = torch.bfloat16
    weights = {s: torch.randn(s, device=device, dtype=dtype) for s in set(shapes) | {(h, vocab)}}
    inputs = {i: torch.randn(rows, i, device=device, dtype=dtype) for i in {s[0] for s in weights}}

    def one_pass():
        for _ in range(cfg.num_hidden_layers):
            for s in shapes:
                inputs[s[0]] @ weights[s]
        inputs[h] @ weights[(h, vocab)]

    flop = 2 * rows * (cfg.num_hidden_layers * sum(a * b for a, b in shapes) + h * vocab)
    one_pass()
    times = []
    for _ in range(max(3, repeats)):
        with Clock(device) as c:
            one_pass()
        times.append(c.seconds)
    return {"matmul_flops": flop / statistics.median(times), "matmul_detail": {"rows": rows, "dtype": "bfloat16",
                                                                               "flop": flop, "s": times}}


def _prefill(model, seqs: list[list[int]], batch: int, device: torch.device) -> None:
    """The forward pass generation starts with: prompts left-padded, KV cache built, last logits."""
    with torch.inference_mode():
        for i in range(0, len(seqs), batch):
            chunk = seqs[i : i + batch]
            width = max(map(len, chunk))
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, s in enumerate(chunk):
                ids[r, width - len(s) :] = torch.tensor(s)
                mask[r, width - len(s) :] = 1
            model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=True, logits_to_keep=1)


def judge_vs_prefill(be, device: torch.device, repeats: int) -> dict:
    import bench.run as bench
    from judges import build_judge

    judge = build_judge(REWARD, be, identity=EXPERIMENT, params={"name": REWARD, "min_verdict_mass": 0.0})
    items = bench.judge_items(bench.mini_envs()[:4], per_env=2)
    seqs = be.encode([p for it in items for p in judge.prompts_for(it, None)], check_length=False)
    tokens = sum(map(len, seqs))
    judge.score(items[:1])  # warm-up: kernel selection, allocator
    judge_s, prefill_s = [], []
    for _ in range(repeats):
        with Clock(device) as c:
            judge.score(items)
        judge_s.append(c.seconds)
        with be.adapter_disabled(), Clock(device) as c:
            _prefill(be.model, seqs, be.batch_size, device)
        prefill_s.append(c.seconds)
    j, p = statistics.median(judge_s), statistics.median(prefill_s)
    return {"design": REWARD, "items": len(items), "tokens": tokens, "judge_s": judge_s, "prefill_s": prefill_s,
            "judge_tokens_per_s": tokens / j, "prefill_tokens_per_s": tokens / p, "judge_over_prefill_tokens_per_s": p / j}


def components(policy_cfg, device: torch.device, repeats: int) -> dict:
    """P7 of the project's own DPO step and the judge against prefill, on `policy_cfg` (hf backend)."""
    import bench.run as bench
    from selfplay.config import TrainConfig
    from selfplay.models import load_backend

    lora = TrainConfig().lora_settings
    be = load_backend(policy_cfg, backend="hf", lora=lora, device=device.type, progress=False)
    named = list(be.model.named_parameters())
    adapter = [p for n, p in named if "lora_" in n]
    weight_bytes = sum(p.numel() * p.element_size() for n, p in named if "lora_" not in n)
    n_lora = sum(p.numel() for p in adapter)
    bound = lower_bound(weight_bytes, n_lora, adapter[0].element_size())
    out: dict = {"lora": dataclasses.asdict(lora), "lora_params": n_lora, "lora_dtype": str(adapter[0].dtype),
                 "lower_bound_bytes": bound["bytes"], "lower_bound_parts": bound["parts"]}
    machine = bench.machine(be.model, repeats) if device.type == "cpu" else cuda_matmul_rate(be.model, device, repeats)
    out["machine"] = machine
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    # dpo_step returns after TRL has read the last step's loss on the host, so the step is complete
    out |= bench.p7(be, machine, repeats)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        out["dpo_step_peak_allocated_bytes"] = peak
        out["dpo_step_peak_over_lower_bound"] = peak / bound["bytes"]
    out["judge_vs_prefill"] = judge_vs_prefill(be, device, repeats)
    out["prompt_shared_once"] = prompt_sharing(be)
    del be
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


# bars of the shared-prompt forward against the plain one in the policy's dtype: float32 kernels
# differ only in summation order (tests/test_train_dpo.py holds 1e-5 on a CPU); bf16 rounds each
# matmul to 8 bits of mantissa, so relative errors of a few 1e-3 are rounding, not a different loss
PROMPT_SHARING_BARS = {"float32": {"loss_abs": 1e-4, "grad_rel": 1e-3}, "bfloat16": {"loss_abs": 2e-2, "grad_rel": 5e-2}}


def prompt_sharing(be, seed: int = 0) -> dict:
    """`selfplay.dpo_cpu.prompt_shared_once` against the plain forward on this device: TRL's fused head
    over a [chosen; rejected] batch of pairs that share their prompts, the DPO loss and the LoRA
    gradients (adapter moved off zero), each way. `passed` says whether the differences lie within
    `PROMPT_SHARING_BARS` of the weights' dtype; the DPO step turns the shared forward on only on a
    CPU (selfplay.dpo_cpu.cpu_fast_paths) until this has passed on a GPU."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference
    from trl.trainer.utils import add_fused_lm_head

    from selfplay import dpo_cpu
    from selfplay.models.adapter_noise import perturb_lora

    model, tok = be.model, be.tokenizer
    param = next(model.parameters())
    perturb_lora(model, seed=seed, scale=0.3)
    add_fused_lm_head(model.get_base_model())
    prompts = [be.render([{"role": "user", "content": q}]) for q in
               ("Is 7 prime? Say why in one sentence.", "Did mortality fall in the trial arm? Answer from the packet.")]
    texts = [(prompts[0], "Yes, 7 is prime: no divisor but 1 and itself.", "No."),
             (prompts[1], "The packet cannot settle it: it reports one arm only.", "Yes, it fell by a third."),
             (prompts[0], "It is prime.", "It is divisible by 3.")]
    rows = [{"prompt_ids": tok(p)["input_ids"], "chosen_ids": tok(c + tok.eos_token)["input_ids"],
             "rejected_ids": tok(r + tok.eos_token)["input_ids"]} for p, c, r in texts]
    batch = {k: v.to(param.device) for k, v in DataCollatorForPreference(pad_token_id=tok.pad_token_id)(rows).items()
             if hasattr(v, "to")}
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    model.train()

    def run(shared: bool):
        model.zero_grad()
        with dpo_cpu.prompt_shared_once(model, enabled=shared):
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels,
                        fused_lm_head=True, use_cache=False)
        chosen, rejected = out.log_probs.float().sum(1).chunk(2)
        loss = -torch.nn.functional.logsigmoid(0.1 * (chosen - rejected)).mean()
        loss.backward()
        return loss.item(), {n: q.grad.detach().float().clone() for n, q in model.named_parameters() if q.grad is not None}

    try:
        plain_loss, plain = run(False)
        shared_loss, shared = run(True)
    finally:
        model.zero_grad()
        model.eval()
    num = sum(float((shared[n] - plain[n]).pow(2).sum()) for n in plain)
    den = sum(float(plain[n].pow(2).sum()) for n in plain)
    dtype = str(param.dtype).removeprefix("torch.")
    bars = PROMPT_SHARING_BARS.get(dtype, PROMPT_SHARING_BARS["bfloat16"])
    out = {"dtype": dtype, "device": param.device.type, "pairs": len(rows), "loss_plain": plain_loss,
           "loss_shared": shared_loss, "loss_abs_diff": abs(shared_loss - plain_loss),
           "grad_rel_diff": (num / den) ** 0.5 if den > 0 else float("nan"), "grad_tensors": len(plain),
           "same_tensors": shared.keys() == plain.keys(), "bars": bars}
    out["passed"] = bool(out["same_tensors"] and out["loss_abs_diff"] <= bars["loss_abs"]
                         and out["grad_rel_diff"] <= bars["grad_rel"])
    return out


def vllm_imports(env: dict) -> bool:
    """Whether `import vllm` works in a child (an install that is there but broken counts as absent)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    return subprocess.run([sys.executable, "-c", "import vllm"], env=env, capture_output=True).returncode == 0


def vllm_part(device: torch.device) -> dict:
    """The project's vLLM backend against its HF path (gpu_check_vllm.py), where both can run."""
    import importlib.util

    if device.type != "cuda" or importlib.util.find_spec("vllm") is None:
        return {"skipped": "needs CUDA and an importable vllm"}
    try:
        from experiments.gpu_check_vllm import check

        return check()
    except Exception as err:  # the loop's numbers are kept whatever happens here
        return {"error": f"{type(err).__name__}: {err}"}


# -- the whole check ----------------------------------------------------------------------------------

def _environment(device: torch.device) -> dict:
    import peft

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__, "peft": peft.__version__}
    try:
        import trl

        env["trl"] = trl.__version__
    except ImportError:
        env["trl"] = None
    if device.type == "cuda":
        env |= {"gpu": torch.cuda.get_device_name(device),
                "gpu_total_bytes": torch.cuda.get_device_properties(device).total_memory}
    return env


def summarise(results: dict) -> None:
    """Per-phase totals and the memory ratios, from what the phases wrote."""
    iters = (results.get("train") or {}).get("iterations") or {}
    phases = {name: sum(it[key] or 0.0 for it in iters.values())
              for name, key in (("sample", "generate_s"), ("judge", "judge_s"), ("dpo", "dpo_s"))}
    if "audit" in results:
        phases["audit"] = results["audit"]["wall_s"]
    if iters:
        phases["train_setup_and_load"] = results["train"]["wall_s"] - sum(it["iteration_s"] or 0.0 for it in iters.values())
        for name, key, s in (("sample_tokens_per_s", "sampled_tokens", "sample"),
                             ("dpo_tokens_per_s", "dpo_tokens", "dpo")):
            n = sum(it[key] for it in iters.values())
            results.setdefault("rates", {})[name] = n / phases[s] if phases[s] else None
    results["phases_s"] = phases
    bound = (results.get("components") or {}).get("lower_bound_bytes") or results.get("lower_bound", {}).get("bytes")
    if bound:
        for child in ("train", "audit"):
            peak = (results.get(child) or {}).get("peak_allocated_bytes")
            if peak:
                results[child]["peak_allocated_over_lower_bound"] = peak / bound


def check(s: Settings, device: torch.device, work: Path, wheelhouse: Path | None, tokenizer_dir: Path | None,
          results: dict, write) -> bool:
    """Every phase, each filling its key of `results`, `write()` after each. True when all succeeded."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if device.type == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the children too, on a machine that has a GPU
    if wheelhouse is not None:
        results["wheelhouse"] = install_wheelhouse(wheelhouse, work / "site")
        env["PYTHONPATH"] = os.pathsep.join([str(work / "site"), env["PYTHONPATH"]])
    check_imports(env)
    results["environment"] = _environment(device)
    deadline = time.perf_counter() + s.budget_s

    from transformers import AutoTokenizer

    from selfplay.models import PolicyConfig

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir else project_tokenizer()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = model_config(s.shape, tokenizer)
    policy_dir, name = work / "policy", f"{s.shape}-random"
    results["policy"] = build_policy(config, tokenizer, policy_dir, device, dtype, s.seed)
    from selfplay.config import TrainConfig

    tr_lora = TrainConfig().lora_settings
    n_lora = lora_param_count(config, tr_lora.r, tr_lora.target_modules)
    # PEFT keeps the adapter in fp32 over a bf16 or fp32 model (autocast_adapter_dtype)
    results["lower_bound"] = lower_bound(results["policy"]["weights_bytes"], n_lora, 4) | {"lora_params": n_lora}
    write()

    backend = "vllm" if device.type == "cuda" and vllm_imports(env) else "hf"
    policy = policy_overrides(policy_dir, name)
    outputs = work / "outputs"
    train = run_child("selfplay.train", train_args(s, policy, backend, outputs), env=env, cwd=work,
                      timeout=max(60.0, deadline - time.perf_counter() - 0.35 * s.budget_s), device=device,
                      log=work / "train.log")
    train["backend"] = backend
    seed_dir = outputs / EXPERIMENT / REWARD / f"seed{s.seed}"
    train["iterations"] = {str(t): iteration_phases(seed_dir / f"iter_{t}", tokenizer, s.max_new_tokens)
                           for t in range(1, s.iterations + 1) if (seed_dir / f"iter_{t}" / "DONE").is_file()}
    results["train"] = train
    summarise(results)
    write()
    ok = train["returncode"] == 0 and len(train["iterations"]) == s.iterations
    if ok:
        audit = run_child("audit.gap", audit_args(s, seed_dir), env=env, cwd=work,
                          timeout=max(60.0, deadline - time.perf_counter() - 0.1 * s.budget_s), device=device,
                          log=work / "audit.log")
        audit_json = seed_dir / "audit.json"
        audit["audit_json_written"] = audit_json.is_file()
        results["audit"] = audit
        ok = audit["returncode"] == 0 and audit["audit_json_written"]
        summarise(results)
        write()

    policy_cfg = dataclasses.replace(PolicyConfig.named(BASE_POLICY), name=name, hf_id=str(policy_dir))
    try:
        results["components"] = components(policy_cfg, device, s.repeats)
    except Exception as err:  # the loop's numbers above are kept
        ok = False
        results["components"] = {"error": f"{type(err).__name__}: {err}"}
    results["components"]["vllm"] = vllm_part(device)
    summarise(results)
    write()
    return ok


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = Settings()
    p = argparse.ArgumentParser(description="The project's own loop (selfplay.train, then audit.gap) on random "
                                "Qwen3-4B-shaped weights, with per-phase times, tokens/s, peak memory and P7; one JSON.")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--shape", choices=SHAPES, default=d.shape, help="qwen3-4b, or tiny: the tiny test policy's shape")
    p.add_argument("--iterations", type=int, default=d.iterations, help="T of selfplay.train")
    p.add_argument("--k", type=int, default=d.k, help="answers per train environment")
    p.add_argument("--max-train-envs", type=int, default=d.max_train_envs)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--audit-n", type=int, default=d.audit_n, help="answers per audit environment")
    p.add_argument("--audit-envs", type=int, default=d.audit_envs, help="audit environments (max_envs)")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed repeats of the component measurements")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--budget-s", type=float, default=d.budget_s, help="wall-time budget the children share")
    p.add_argument("--wheelhouse", type=Path, default=None,
                   help="install its requirements.txt offline first and take its tokenizer/ (make wheelhouse)")
    p.add_argument("--tokenizer", type=Path, default=None, help="a saved tokenizer (default: the tiny policies')")
    p.add_argument("--save-tokenizer", type=Path, default=None, metavar="DIR",
                   help="save the tokenizer the random policy gets to DIR and exit (make wheelhouse)")
    p.add_argument("--work", type=Path, default=None, help="working directory, kept (default: a temporary one in outputs/, removed)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.save_tokenizer:
        project_tokenizer().save_pretrained(args.save_tokenizer)
        print(f"gpu_check: tokenizer saved to {args.save_tokenizer}", file=sys.stderr)
        return 0
    try:
        s = Settings(shape=args.shape, iterations=args.iterations, k=args.k, max_train_envs=args.max_train_envs,
                     max_new_tokens=args.max_new_tokens, audit_n=args.audit_n, audit_envs=args.audit_envs,
                     repeats=args.repeats, seed=args.seed, budget_s=args.budget_s)
    except ValueError as err:
        print(f"gpu_check: {err}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: --device cuda needs a CUDA GPU; torch.cuda.is_available() is False here (torch "
              f"{torch.__version__}, CUDA build {torch.version.cuda}); --device cpu runs the same on a CPU. "
              "Nothing was measured.", file=sys.stderr)
        return 2
    tokenizer_dir = args.tokenizer or (args.wheelhouse / "tokenizer" if args.wheelhouse else None)
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    # the checkpoint is 8 GB at the real shape: beside the outputs, not in a /tmp that may be small
    (REPO / "outputs").mkdir(exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_check-", dir=REPO / "outputs"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = {"command": "python experiments/gpu_check.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": str(device),
               "settings": dataclasses.asdict(s), "work": str(work)}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        results["total_s"] = time.perf_counter() - started
        args.out.write_text(json.dumps(results, indent=2) + "\n")

    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the one JSON (TRL prints its logs)
            ok = check(s, device, work, args.wheelhouse, tokenizer_dir, results, write)
    except CheckError as err:
        print(f"gpu_check: {err}", file=sys.stderr)
        return 2
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    write()
    print(json.dumps(results, indent=2))
    print(f"gpu_check: wrote {args.out}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
