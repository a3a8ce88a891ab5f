"""The GPU user's loop under the real vLLM (CPU build), as a user runs it: `python -m selfplay.train
... backend=vllm` on SmolLM2 for T = 2 (vLLM samples and judges, the HF copy beside it trains each
iteration's LoRA adapter, which vLLM then serves fresh), then `python -m audit.gap` on the run's
checkpoints, both as subprocesses.

What must hold: the three adapters (iter_0 = the fresh no-op, iter_1, iter_2) differ; iteration 2's
samples come from iteration 1's adapter — the same engine settings with iter_1's adapter loaded
redraw exactly the answers iteration 2 wrote, with the seed the loop derives, and vLLM's log-probs of
those answers equal the HF backend's with that adapter (1e-4) while iter_0's differ; the audit writes
every file. A learning rate of 5e-3 makes one DPO step move the adapter far beyond that tolerance.
Sleep/wake is CUDA's: on the CPU build the engine has no sleep mode, which the loop logs, and the
sleep check is skipped with that reason.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from selfplay.config import PROJECT_ROOT
from selfplay.models import LoraSettings, PolicyConfig

T, K, MAX_NEW, SEED = 2, 2, 16, 0
LORA = LoraSettings(r=8, alpha=16, target_modules=("q_proj", "k_proj", "v_proj", "o_proj"))
ENV = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
TRAIN = ["+policy=smollm2-135m", "reward=anchored", "backend=vllm", f"iterations={T}", f"k={K}",
         f"max_new_tokens={MAX_NEW}", "max_train_envs=2", "pair_truncated=true", "margin=0.0",
         "learning_rate=5e-3", f"lora.r={LORA.r}", f"lora.alpha={LORA.alpha}", "logger=none", f"seed={SEED}"]


def run_module(module: str, args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", module, *args, f"hydra.run.dir={tmp / 'hydra'}"],
                          cwd=PROJECT_ROOT, env=ENV, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{module} failed:\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loop")
    proc = run_module("selfplay.train", [*TRAIN, f"output_root={tmp / 'out'}"], tmp)
    return tmp / "out" / "selfplay" / "anchored" / f"seed{SEED}", proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def audited(trained, tmp_path_factory):
    run, _ = trained
    run_module("audit.gap", [f"ckpt={run}", "n=1", "max_envs=1", "bootstrap.B=1000", "probe_labelled=false",
                             "logger=none", "progress=false"], tmp_path_factory.mktemp("audit"))
    return run


def adapter_tensors(it: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(it / "adapter" / "adapter_model.safetensors"))


def test_every_iteration_is_complete_and_each_adapter_differs(trained):
    run, _ = trained
    assert [(run / f"iter_{t}" / "DONE").exists() for t in range(T + 1)] == [True] * (T + 1)
    adapters = [adapter_tensors(run / f"iter_{t}") for t in range(T + 1)]
    for a, b in [(0, 1), (1, 2), (0, 2)]:
        assert adapters[a].keys() == adapters[b].keys()
        moved = max(float(np.max(np.abs(adapters[a][k] - adapters[b][k]))) for k in adapters[a])
        assert moved > 1e-4, f"iter_{a} and iter_{b} hold the same adapter"
    for t in (1, 2):
        metrics = json.loads((run / f"iter_{t}" / "metrics.json").read_text())["metrics"]
        assert metrics["pairs/kept"] >= 1 and metrics["train/steps"] >= 1


@pytest.fixture(scope="module")
def served(trained):
    """The loop's engine settings, with iteration 1's adapter served and loaded on the HF side."""
    from selfplay.models.vllm_backend import VLLMBackend

    run, _ = trained
    # the loop's engine but for its memory share (on the CPU build a share of the node's memory for
    # the KV cache), which draws nothing differently
    b = VLLMBackend.from_config(PolicyConfig.named("smollm2-135m"), lora=LORA, seed=0, progress=False, device="cpu",
                                gpu_memory_utilization=0.15)
    b.load_adapter(run / "iter_1" / "adapter")
    yield b
    del b
    gc.collect()


def test_iteration_2_samples_come_from_iteration_1s_adapter(trained, served):
    from selfplay.train import SAMPLE, derive_seed

    run, _ = trained
    rows = [json.loads(line) for line in (run / "iter_2" / "generations.jsonl").read_text().splitlines()]
    prompts = [r["prompt"] for r in rows]
    redrawn = served.sample(prompts, n=K, temperature=1.0, max_new_tokens=MAX_NEW, seed=derive_seed(SEED, SAMPLE, 2, 0))
    assert [[str(a) for a in env] for env in redrawn] == [r["answers"] for r in rows]

    flat_prompts = [p for p, r in zip(prompts, rows, strict=True) for _ in r["answers"]]
    answers = [a for r in rows for a in r["answers"]]
    on_vllm = served.sequence_logprobs(flat_prompts, answers)
    on_hf = served.trainable.sequence_logprobs(flat_prompts, answers)
    # sums of ~100 float32 token log-probs from two kernels: their rounding grows with the sum (1.1e-4
    # seen on a -51.5 nat answer), so the tolerance is relative; a wrong or missing adapter moves them
    # by more than 1e-3 (below)
    np.testing.assert_allclose(on_vllm, on_hf, rtol=1e-5, atol=1e-4)
    off = served.sequence_logprobs(flat_prompts, answers, adapter=False)  # iter_0's adapter is a no-op
    assert float(np.max(np.abs(on_vllm - off))) > 1e-3


def test_sleep_and_wake_around_dpo(trained):
    from vllm.platforms import current_platform

    _, log = trained
    if not current_platform.is_sleep_mode_available():
        assert "no sleep mode" in log  # the loop said why it kept the engine's memory
        pytest.skip(f"vLLM on {current_platform.device_type} has no sleep mode (CUDA, ROCm and XPU only): "
                    "the engine keeps its memory during the DPO step; sleep/wake is checked against the "
                    "fake vllm in tests/test_models_vllm.py and by `make gpu-check`")
    assert "no sleep mode" not in log


def test_the_audit_of_the_vllm_run_is_complete(audited):
    run = audited
    audit = json.loads((run / "audit.json").read_text())
    assert (run / "audit.csv").stat().st_size > 0
    assert list((run / "figures").glob("*.png"))
    text = json.dumps(audit)
    for t in range(T + 1):
        assert f"iter_{t}" in text or f'"iteration": {t}' in text
    for t in range(T + 1):
        assert list((run / f"iter_{t}" / "audit_cache").glob("answers-*.jsonl"))
