"""The real CPU path: SmolLM2-135M-Instruct, 1 iteration on 2 mini environments, k = 2, 32 new tokens.
The saved adapter loads into a fresh backend and moves the log-probabilities away from π_0's.
The evidence is cut as in test_train_loop.py (full packets make this test several minutes long).
"""

import json

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from test_train_loop import short_envs

import selfplay.train as train
from selfplay import artifacts as A
from selfplay.config import CONF_DIR

LORA = ["lora.r=8", "lora.alpha=16", "lora.target_modules=[q_proj,v_proj]"]


@pytest.mark.slow
def test_smollm2_one_iteration_produces_a_loadable_trained_adapter(tmp_path, monkeypatch):
    from selfplay.models import load_backend

    overrides = ["+policy=smollm2-135m", "reward=generic", "reward.min_verdict_mass=0.0", "logger=none",
                 "iterations=1", "k=2", "max_new_tokens=32", "max_train_envs=2", "margin=0.0",
                 "learning_rate=1e-3", "batch_size=2", "pair_truncated=true", f"output_root={tmp_path}", *LORA]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    monkeypatch.setattr(train, "load_train_envs", short_envs)
    run_dir = train.run(cfg)

    it = run_dir / "iter_1"
    assert (it / "DONE").is_file()
    metrics = json.loads((it / "metrics.json").read_text())["metrics"]
    assert metrics["pairs/kept"] >= 1 and metrics["train/steps"] >= 1, metrics

    gens = A.read_jsonl(it / "generations.jsonl")
    prompts = [g["prompt"] for g in gens for _ in g["answers"]]
    answers = [a for g in gens for a in g["answers"]]
    backend = load_backend("smollm2-135m", backend="hf", lora={"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
                           progress=False)
    backend.load_adapter(it / "adapter")
    trained = backend.sequence_logprobs(prompts, answers, adapter=True)
    initial = backend.sequence_logprobs(prompts, answers, adapter=False)
    assert np.all(np.isfinite(trained)) and np.max(np.abs(trained - initial)) > 1e-3
