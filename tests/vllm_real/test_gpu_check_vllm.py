"""The vLLM part of `make gpu-check` (experiments/gpu_check_vllm.py) on the real vLLM CPU build: it
runs end to end on a small workload and its numbers say what they claim."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "gpu_check_vllm.py"


def test_vllm_check_reports_generation_logprobs_and_sleep(tmp_path):
    # its own process: an engine left in this one holds the CPU KV-cache budget that the engine of
    # tests/vllm_real/test_vllm_backend.py then cannot allocate
    out = tmp_path / "vllm.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--batch", "2", "--k", "2", "--new-tokens", "8",
                           "--gpu-memory-utilization", "0.15", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=SCRIPT.parents[1],
                          env={**os.environ, "PYTHONPATH": str(SCRIPT.parents[1])})
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(out.read_text())
    gen = r["generation"]
    # 2 prompts x 2 answers x at most 8 tokens each, on both backends
    assert 0 < gen["vllm_tokens"] <= 32 and 0 < gen["hf_tokens"] <= 32
    assert math.isclose(gen["vllm_over_hf_tokens_per_s"],
                        (gen["vllm_tokens"] / gen["vllm_wall_s"]) / (gen["hf_tokens"] / gen["hf_wall_s"]))
    # float32 on both sides: vLLM serves the same adapter the HF side holds
    assert max(r["logprobs"]["max_abs_diff_vs_hf"].values()) <= 1e-4
    # and the adapter is not a no-op, so that agreement is not vacuous
    assert r["logprobs"]["adapter_on_minus_off_max_abs"] > 1e-2
    assert r["device"] == "cpu" and r["sleep_wake"]["supported"] is False
