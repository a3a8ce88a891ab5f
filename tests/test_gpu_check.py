"""experiments/gpu_check.py: CLI contract on CPU, the real model shapes, and its measurements on a
tiny model (CPU) and on the real shapes (GPU only)."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "gpu_check.py"
ALLOWED_THIRD_PARTY = {
    "torch",
    "transformers",
    "peft",
    "trl",
    "accelerate",
    "datasets",
    "tokenizers",
}


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


gpu_check = _load()


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_help_lists_every_option_and_exits_0():
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    for option in (
        "--models",
        "--batch",
        "--prompt-len",
        "--new-tokens",
        "--dpo-batch",
        "--repeats",
        "--seed",
        "--out",
    ):
        assert option in proc.stdout
    assert "qwen3-4b" in proc.stdout and "gemma-3-4b" in proc.stdout


def test_refuses_without_cuda_with_one_clear_line(tmp_path):
    """CUDA hidden from torch, so this holds on a GPU machine too."""
    out = tmp_path / "r.json"
    proc = _run("--out", str(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpu_check: needs a CUDA GPU;"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_unknown_model_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["--models", "qwen3-4b,llama-7b"])
    assert exit_info.value.code == 2
    assert "llama-7b" in capsys.readouterr().err


def test_imports_only_the_allowed_packages():
    """The script must run on a machine with just torch/transformers/peft/trl/accelerate
    (datasets and tokenizers come with trl and transformers); never the project's packages."""
    imported = set()
    for node in ast.walk(ast.parse(SCRIPT.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    # the vLLM part is the sibling gpu_check_vllm.py, imported lazily once vllm and the project import
    third_party = imported - set(sys.stdlib_module_names) - {"__future__", "gpu_check_vllm", "experiments"}
    assert third_party <= ALLOWED_THIRD_PARTY, third_party - ALLOWED_THIRD_PARTY
    assert {"torch", "transformers", "peft", "trl"} <= third_party


def test_vllm_part_says_why_it_is_skipped_without_vllm():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is importable here; tests/vllm_real runs the part itself")
    settings = gpu_check.Settings(batch=2, new_tokens=4)
    assert gpu_check._vllm_part(settings) == {"skipped": "not importable here: vllm"}


# Hand-derived parameter counts, embeddings tied (counted once):
#   per layer = q (H·nh·d) + k, v (2·H·nkv·d) + o (nh·d·H) + MLP (3·H·I) + norms
#   total     = L · per layer + V·H (embeddings) + H (final norm)
# Qwen3-4B: H=2560 nh=32 nkv=8 d=128 I=9728 L=36 V=151936, norms 2·H + q/k norms 2·d
#   26,214,400 + 74,711,040 + 5,376 = 100,930,816 per layer
#   36 · 100,930,816 + 388,956,160 + 2,560 = 4,022,468,096   (model card: 4.0B, 3.6B non-embedding)
# Gemma-3-4B text: H=2560 nh=8 nkv=4 d=256 I=10240 L=34 V=262208, norms 4·H + 2·d
#   15,728,640 + 78,643,200 + 10,752 = 94,382,592 per layer
#   34 · 94,382,592 + 671,252,480 + 2,560 = 3,880,263,168
@pytest.mark.parametrize(
    "name, expected",
    [
        pytest.param("qwen3-4b", 4_022_468_096, id="qwen3-4b"),
        pytest.param("gemma-3-4b", 3_880_263_168, id="gemma-3-4b"),
    ],
)
def test_real_shapes_have_the_published_parameter_counts(name, expected):
    n = gpu_check.count_params(gpu_check.MODEL_CONFIGS[name]())
    assert n == expected
    assert 3.8e9 < n < 4.1e9


def test_gemma_has_five_local_layers_per_global_one():
    config = gpu_check.gemma3_4b_config()
    full = [i for i, kind in enumerate(config.layer_types) if kind == "full_attention"]
    assert full == [5, 11, 17, 23, 29]
    assert config.sliding_window == 1024
    assert config.rope_parameters["full_attention"]["factor"] == 8.0


def test_qwen_attends_globally_everywhere():
    config = gpu_check.qwen3_4b_config()
    assert set(config.layer_types) == {"full_attention"}
    assert config.tie_word_embeddings and config.rope_parameters["rope_theta"] == 1e6


def test_settings_reject_nonpositive_sizes():
    with pytest.raises(ValueError, match="prompt_len"):
        gpu_check.Settings(prompt_len=0)


def _tiny_qwen3():
    """Real Qwen3 code at toy size: H=32, 4 heads of 8 (2 kv heads), MLP 64, 2 layers."""
    return gpu_check.qwen3_4b_config(
        vocab_size=1200,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )


def _model(config):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(config).eval()


def test_judge_scores_are_distributions_over_the_verdict_tokens():
    torch.manual_seed(0)
    model = _model(_tiny_qwen3())
    ids = torch.randint(0, 1200, (3, 7))
    probs = gpu_check.judge_scores(model, ids, (16, 17, 18))
    assert probs.shape == (3, 3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(3))


def test_check_model_on_cpu_measures_all_three_parts():
    """LoRA on 7 projections per layer, r=16: r·Σ(in+out) with (in, out) = q (32, 32), k (32, 16),
    v (32, 16), o (32, 32), gate (32, 64), up (32, 64), down (64, 32) -> 16·512 = 8192 per layer,
    16384 for 2 layers, fp32. LoRA's B starts at zero, so the first step's policy equals the
    adapter-off reference and the sigmoid DPO loss is exactly -log σ(0) = ln 2."""
    settings = gpu_check.Settings(batch=2, prompt_len=8, new_tokens=3, dpo_batch=1, repeats=1)
    report = gpu_check.check_model(_tiny_qwen3(), settings, torch.device("cpu"), torch.float32)

    assert report["generation"]["new_tokens"] == 2 * 3
    judge = report["judge_vs_prefill"]
    assert judge["tokens"] == 2 * 8 and judge["verdict_probs_finite"]
    assert judge["judge_over_prefill_tokens_per_s"] > 0

    dpo = report["dpo"]
    assert dpo["lora_params"] == 16_384 and dpo["lora_dtype"] == "torch.float32"
    parts = dpo["lower_bound_parts"]
    assert parts == {
        "weights": report["weights_bytes"],
        "lora": 4 * 16_384,
        "lora_grads": 4 * 16_384,
        "adamw_fp32_moments": 8 * 16_384,
    }
    assert dpo["lower_bound_bytes"] == sum(parts.values())
    assert len(dpo["step_s"]) == 2 and len(dpo["loss"]) == 2
    assert dpo["loss"][0] == pytest.approx(math.log(2), abs=1e-4)
    assert dpo["peak_bytes"] is None  # CUDA-only statistic
    json.dumps(report)  # main() writes it as is


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_script_runs_on_the_real_shapes_at_small_sizes(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = _run(
        "--batch",
        "2",
        "--prompt-len",
        "64",
        "--new-tokens",
        "8",
        "--dpo-batch",
        "1",
        "--repeats",
        "1",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert set(results["models"]) == {"qwen3-4b", "gemma-3-4b"}
    for report in results["models"].values():
        assert report["generation"]["new_tokens"] == 2 * 8
        assert report["judge_vs_prefill"]["verdict_probs_finite"]
        dpo = report["dpo"]
        assert dpo["peak_bytes"] >= dpo["lower_bound_bytes"]
        assert all(math.isfinite(loss) for loss in dpo["loss"])


def test_one_failing_model_keeps_the_others_numbers(monkeypatch, tmp_path, capsys):
    """main() on a pretend GPU: gemma runs out of memory, qwen's numbers still reach the JSON,
    and the exit status says something failed."""

    def fake_check(config, settings, device, dtype):
        if config.model_type == "gemma3_text":
            raise torch.OutOfMemoryError("CUDA out of memory")
        return {"params": 1, "settings_batch": settings.batch}

    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check, "_environment", lambda: {"gpu": "fake"})
    monkeypatch.setattr(gpu_check, "check_model", fake_check)
    out = tmp_path / "sub" / "r.json"

    assert gpu_check.main(["--batch", "4", "--out", str(out)]) == 1
    results = json.loads(out.read_text())
    assert results["models"]["qwen3-4b"] == {"params": 1, "settings_batch": 4}
    assert results["models"]["gemma-3-4b"] == {"error": "OutOfMemoryError: CUDA out of memory"}
    assert results["settings"]["batch"] == 4 and results["dtype"] == "bfloat16"
    assert json.loads(capsys.readouterr().out) == results
