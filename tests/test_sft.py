"""The warm start: trained on valid train-split answers only, merged, cached, refused when stale."""

import json
import shutil

import pytest
import torch

from selfplay import sft
from selfplay.envs import load_envs, train_audit_split
from selfplay.models.config import PolicyConfig
from selfplay.models.loading import ModelUnavailableError, load_model


def _cfg(data_dir) -> PolicyConfig:
    return PolicyConfig(name="tiny-llama-sft", sft_base="tiny-llama", sft_data=str(data_dir),
                        chat_template="smollm2", dtype="float32", max_context=2048)


def test_examples_are_the_valid_reference_type_answers_of_train_environments_only(mini_dir):
    envs = load_envs(mini_dir)
    train, audit = train_audit_split(envs, mini_dir)
    examples = sft.sft_examples(train)
    audit_ids = {e.task_id for e in audit}
    assert examples and not {env.task_id for env, _ in examples} & audit_ids
    for env, text in examples:
        (answer,) = [a for a in env.stress_answers if a.text == text]
        assert answer.validity == "valid" and answer.answer_type in ("honest", "correct_grounded")
    # every valid answer of every train environment is used, each once
    assert len(examples) == sum(a.validity == "valid" for e in train for a in e.stress_answers
                                if a.answer_type in ("honest", "correct_grounded"))


def test_unbuilt_warm_start_names_the_command(tmp_path, monkeypatch, mini_dir):
    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelUnavailableError, match="python -m selfplay.sft tiny-llama-sft"):
        load_model(_cfg(mini_dir), device="cpu")


def test_build_merges_into_new_base_weights_and_refuses_other_data(tmp_path, monkeypatch, mini_dir):
    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "mini"
    shutil.copytree(mini_dir, data)
    cfg = _cfg(data)
    out = sft.build(cfg, sft.SFTSettings(epochs=1, batch_size=8), progress=False)
    stamp = json.loads((out / "source.json").read_text())
    assert stamp["base"] == "tiny-llama" and stamp["examples"] > 0 and stamp["steps"] >= 1
    warm, _ = load_model(cfg, device="cpu")
    base, _ = load_model(PolicyConfig.named("tiny-llama"), device="cpu")
    # merged: a plain model (no LoRA modules) whose attention weights moved away from the base
    assert not any("lora" in n for n, _ in warm.named_parameters())
    w, b = dict(warm.named_parameters()), dict(base.named_parameters())
    key = next(k for k in w if k.endswith("self_attn.q_proj.weight"))
    assert not torch.allclose(w[key], b[key])
    # an edited record makes the cached warm start stale
    rec = next((data / "data").glob("*.json"))
    rec.write_text(rec.read_text().replace('"question": "', '"question": "Edited. ', 1))
    with pytest.raises(ModelUnavailableError, match="other data"):
        load_model(cfg, device="cpu")
