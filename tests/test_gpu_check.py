"""experiments/gpu_check.py and experiments/wheelhouse.py: the CLI contract, the Qwen3-4B shape, the
per-phase bookkeeping, the wheelhouse's selection and size check, and the whole check end to end on
a CPU with the tiny shape (a real selfplay.train + audit.gap run)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "gpu_check.py"
WHEELHOUSE = REPO / "wheelhouse"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


gpu_check = _load("gpu_check")
wheelhouse = _load("wheelhouse")


def _run(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=timeout)


# -- CLI contract --------------------------------------------------------------------------------------

def test_help_lists_the_options_and_exits_0():
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    for option in ("--device", "--shape", "--iterations", "--k", "--max-new-tokens", "--audit-n", "--audit-envs",
                   "--wheelhouse", "--save-tokenizer", "--out"):
        assert option in proc.stdout


def test_cuda_without_a_gpu_is_one_line_and_nothing_written(tmp_path):
    """CUDA hidden from torch, so this holds on a GPU machine too."""
    out = tmp_path / "r.json"
    proc = _run("--out", str(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpu_check: --device cuda needs a CUDA GPU;"), proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--k", "1"], "gpu_check: --k must be >= 2"),
    (["--audit-n", "0"], "gpu_check: --audit-n must be >= 1, got 0"),
])
def test_bad_settings_are_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "r.json"
    assert gpu_check.main([*args, "--device", "cpu", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(message)
    assert not out.exists()


def test_a_missing_wheelhouse_is_one_line(tmp_path, capsys):
    with pytest.raises(gpu_check.CheckError, match=r"requirements.txt does not exist; build the wheelhouse"):
        gpu_check.install_wheelhouse(tmp_path / "nowhere", tmp_path / "site")


# -- shapes and the memory floor -----------------------------------------------------------------------

def test_qwen3_4b_has_the_published_parameter_count():
    """Qwen3-4B: H=2560 nh=32 nkv=8 d=128 I=9728 L=36 V=151936, embeddings tied.
    per layer: q, o 2·2560·4096 + k, v 2·2560·1024 + MLP 3·2560·9728 + norms 2·2560 + q/k norms 2·128
             = 26,214,400 + 74,711,040 + 5,376 = 100,930,816
    total: 36 · 100,930,816 + 151,936·2560 + 2560 = 4,022,468,096 (model card: 4.0B)."""
    assert gpu_check.count_params(gpu_check.qwen3_4b_config()) == 4_022_468_096


def test_lora_count_of_the_training_adapter_on_qwen3_4b():
    """r = 16 on q (2560 -> 4096), k, v (2560 -> 1024), o (4096 -> 2560): 16 · (6656 + 3584 + 3584 +
    6656) = 327,680 per layer, 36 layers: 11,796,480."""
    n = gpu_check.lora_param_count(gpu_check.qwen3_4b_config(), 16, ("q_proj", "k_proj", "v_proj", "o_proj"))
    assert n == 11_796_480


def test_lower_bound_is_weights_lora_grads_and_fp32_moments():
    bound = gpu_check.lower_bound(1000, 10, 4)
    assert bound["parts"] == {"weights": 1000, "lora": 40, "lora_grads": 40, "adamw_fp32_moments": 80}
    assert bound["bytes"] == 1160


# -- per-phase bookkeeping -----------------------------------------------------------------------------

class WordTokenizer:
    """One token per whitespace-separated word; EOS is its own word."""

    eos_token = " <eos>"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": list(range(len(text.split())))}


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_iteration_phases_counts_the_tokens_each_phase_handled(tmp_path):
    """Two answers of env a, one cut at max_new_tokens = 8 (8 tokens), one finished of 3 words (+ EOS:
    4); one pair: prompt (2 words) + chosen (3) + EOS and prompt + rejected (5) + EOS -> 6 + 8 = 14."""
    metrics = {"time/generate_s": 2.0, "time/judge_s": 0.5, "time/dpo_s": 7.0, "time/iteration_s": 10.0,
               "sample/truncated_share": 0.5, "train/steps": 1.0, "train/loss": 0.69}
    (tmp_path / "metrics.json").write_text(json.dumps({"iteration": 1, "metrics": metrics, "pair_drops": {}}))
    _jsonl(tmp_path / "generations.jsonl", [{"task_id": "a", "prompt": "p q", "answers": ["x y z", "w " * 12],
                                             "truncated": [False, True]}])
    _jsonl(tmp_path / "pairs.jsonl", [{"task_id": "a", "chosen": " x y z", "rejected": " w w w w w"}])
    _jsonl(tmp_path / "judgments.jsonl", [{"task_id": "a", "index": 0}, {"task_id": "a", "index": 1}])
    got = gpu_check.iteration_phases(tmp_path, WordTokenizer(), max_new_tokens=8)
    assert got == {
        "generate_s": 2.0, "judge_s": 0.5, "dpo_s": 7.0, "iteration_s": 10.0,
        "answers": 2, "sampled_tokens": 12, "sample_tokens_per_s": 6.0, "truncated_share": 0.5,
        "judged_answers": 2, "judge_answers_per_s": 4.0,
        "dpo_pairs": 1, "dpo_tokens": 14, "dpo_tokens_per_s": 2.0, "dpo_steps": 1.0, "dpo_loss": 0.69,
    }


def test_run_child_is_python_m_with_status_and_the_output_tail(tmp_path):
    data = tmp_path / "in.json"
    data.write_text('{"a": [1, 2]}')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ok = gpu_check.run_child("json.tool", [str(data)], env=env, cwd=tmp_path, timeout=60,
                             device=torch.device("cpu"), log=tmp_path / "ok.log")
    assert ok["command"] == f"python -m json.tool {data}" and ok["returncode"] == 0 and "error" not in ok
    assert json.loads((tmp_path / "ok.log").read_text()) == {"a": [1, 2]}
    assert ok["peak_allocated_bytes"] is None  # the wrapper ran its exit hook; no CUDA here
    bad = gpu_check.run_child("json.tool", [str(tmp_path / "missing.json")], env=env, cwd=tmp_path, timeout=60,
                              device=torch.device("cpu"), log=tmp_path / "bad.log")
    assert bad["returncode"] != 0 and bad["error"] == f"exit status {bad['returncode']}"
    assert "missing.json" in bad["log_tail"]


def test_vllm_part_says_why_it_is_skipped_on_a_cpu():
    assert gpu_check.vllm_part(torch.device("cpu")) == {"skipped": "needs CUDA and an importable vllm"}


# -- the wheelhouse ------------------------------------------------------------------------------------

def test_runtime_names_drop_extras_and_foreign_markers():
    lines = ["a>=1", "b; extra == 'dev'", "c; python_version < '3'", "D_e.f[x]==2"]
    assert wheelhouse.runtime_names(lines) == ["a", "d-e-f"]


def test_selection_travels_pure_packages_the_device_lacks():
    """project -> trl (pure) -> datasets (pure) -> pyarrow (compiled) -> numpy; datasets -> dill (pure);
    project -> matplotlib (compiled) -> cycler (pure, comes with matplotlib); project -> transformers
    (on the device) -> tqdm (so on the device too); trl -> tqdm."""
    graph = {"project": ["trl", "matplotlib", "transformers", "pyyaml"], "trl": ["datasets", "tqdm"],
             "datasets": ["pyarrow", "dill"], "pyarrow": ["numpy"], "matplotlib": ["cycler"],
             "transformers": ["tqdm", "pyyaml"]}
    compiled = {"pyarrow", "matplotlib", "numpy"}
    sel = wheelhouse.select(["project"], ["transformers", "numpy"], lambda n: graph.get(n, []),
                            lambda n: n not in compiled)
    assert sel.travel == ["datasets", "dill", "project", "trl"]
    assert sel.needs_on_device == ["matplotlib", "pyarrow"]


def test_every_travelling_package_needs_a_pin(tmp_path):
    pins = tmp_path / "cpu.txt"
    pins.write_text("# header\ntrl==1.16.0\nPyYAML==6.0.4\n")
    assert wheelhouse.pinned(["trl", "pyyaml"], wheelhouse.read_pins(pins), pins) == ["trl==1.16.0", "pyyaml==6.0.4"]
    with pytest.raises(wheelhouse.WheelhouseError, match=r"cpu.txt: no pin for hydra-core; run `make lock`"):
        wheelhouse.pinned(["trl", "hydra-core"], wheelhouse.read_pins(pins), pins)


def test_size_check_counts_every_file_and_names_the_largest(tmp_path):
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"x" * 600)
    (tmp_path / "tokenizer" / "tokenizer.json").write_bytes(b"x" * 500)
    assert wheelhouse.check_size(tmp_path, 1100) == 1100
    with pytest.raises(wheelhouse.WheelhouseError, match=r": 1100 bytes .* > the 1099 bytes .*largest: a-1-py3-none-any.whl"):
        wheelhouse.check_size(tmp_path, 1099)


def test_the_built_wheelhouse_holds_what_it_lists_within_64_mib():
    if not (WHEELHOUSE / "requirements.txt").is_file():
        pytest.skip("the wheelhouse has not been built here (make wheelhouse needs PyPI)")
    assert wheelhouse.check_size(WHEELHOUSE, 64 * 2**20) > 0
    wheels = {p.name.split("-")[0].lower() for p in WHEELHOUSE.glob("*.whl")}
    listed = [line.split("==")[0] for line in (WHEELHOUSE / "requirements.txt").read_text().split()]
    assert {"trl", "hydra-core", "omegaconf"} <= set(listed)
    assert {wheelhouse.canonical(n).replace("-", "_") for n in listed} <= wheels
    assert not wheels & {"torch", "transformers", "peft", "numpy"}
    assert (WHEELHOUSE / "tokenizer" / "tokenizer.json").is_file()


# -- end to end on a CPU -------------------------------------------------------------------------------

def test_the_whole_check_on_a_cpu_runs_the_loop_and_the_audit(tmp_path):
    """The tiny shape, T = 2, k = 2 on one train environment, 4 new tokens, audit n = 1 on one
    environment: every phase of a real selfplay.train and audit.gap run in the JSON."""
    out, work = tmp_path / "gpu_check.json", tmp_path / "work"
    proc = _run("--device", "cpu", "--shape", "tiny", "--iterations", "2", "--k", "2", "--max-train-envs", "1",
                "--max-new-tokens", "4", "--audit-n", "1", "--audit-envs", "1", "--repeats", "1",
                "--work", str(work), "--out", str(out), env={"OMP_NUM_THREADS": "2"}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert json.loads(proc.stdout) == r

    train = r["train"]
    assert train["returncode"] == 0 and train["backend"] == "hf"
    assert train["command"].startswith("python -m selfplay.train +policy=qwen3-4b policy.name=tiny-random")
    assert set(train["iterations"]) == {"1", "2"}
    for it in train["iterations"].values():
        assert all(it[k] > 0 for k in ("generate_s", "judge_s", "dpo_s", "iteration_s"))
        assert it["answers"] == 2 and it["judged_answers"] == 2 and it["dpo_steps"] == 1.0
        assert 2 <= it["sampled_tokens"] <= 2 * 5  # two answers of at most 4 tokens + EOS
    assert r["audit"]["returncode"] == 0 and r["audit"]["audit_json_written"]
    assert r["audit"]["command"].startswith("python -m audit.gap ckpt=")
    audit = json.loads((work / "outputs" / "gpu_check" / "anchored" / "seed0" / "audit.json").read_text())
    assert audit  # audit.gap's own output, next to the checkpoints

    phases = r["phases_s"]
    assert phases["sample"] == pytest.approx(sum(it["generate_s"] for it in train["iterations"].values()))
    assert phases["dpo"] == pytest.approx(sum(it["dpo_s"] for it in train["iterations"].values()))
    assert phases["audit"] == r["audit"]["wall_s"] > 0
    assert r["rates"]["sample_tokens_per_s"] > 0 and r["rates"]["dpo_tokens_per_s"] > 0

    c = r["components"]
    # the lower bound's LoRA count from the config equals the adapter PEFT actually built
    assert r["lower_bound"]["lora_params"] == c["lora_params"] > 0
    assert c["lower_bound_bytes"] == r["lower_bound"]["bytes"]
    assert c["P7_detail"]["pairs"] == 4 and c["P7_dpo_over_flop_bound"] > 0
    assert c["judge_vs_prefill"]["judge_over_prefill_tokens_per_s"] > 0
    assert r["policy"]["params"] == gpu_check.count_params(gpu_check.model_config("tiny", _tokenizer(work)))


def _tokenizer(work: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(work / "policy")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_whole_check_on_the_gpu_at_small_sizes(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = _run("--iterations", "1", "--k", "2", "--max-train-envs", "2", "--max-new-tokens", "16",
                "--audit-n", "1", "--audit-envs", "1", "--repeats", "1", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["train"]["peak_allocated_bytes"] >= r["lower_bound"]["bytes"]
    assert r["components"]["dpo_step_peak_allocated_bytes"] >= r["components"]["lower_bound_bytes"]


def test_prompt_sharing_matches_the_plain_forward_on_a_cpu():
    """The check `make gpu-check` runs on CUDA before the shared prompt is used there: on a CPU in
    float32 it must pass its own bars (tests/test_train_dpo.py holds the same at 1e-5)."""
    from selfplay.models import load_backend

    be = load_backend("tiny-llama", backend="hf", lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
                      progress=False)
    r = gpu_check.prompt_sharing(be)
    assert r["dtype"] == "float32" and r["pairs"] == 3 and r["grad_tensors"] > 0
    assert r["passed"] and r["loss_abs_diff"] <= 1e-5 and r["grad_rel_diff"] <= 1e-4
