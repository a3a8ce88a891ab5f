"""The vLLM part of `make gpu-check` (experiments/gpu_check_vllm.py) on the real vLLM CPU build: it
runs end to end on a small workload and its numbers say what they claim."""

from __future__ import annotations

import math


def test_vllm_check_reports_generation_logprobs_and_sleep():
    from experiments.gpu_check_vllm import check

    r = check(batch=2, k=2, new_tokens=8, seed=0, gpu_memory_utilization=0.15)
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
