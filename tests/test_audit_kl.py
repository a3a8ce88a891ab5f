"""The audit's KL(π_t ‖ π_0) estimate: the stage on a tiny model against log-probabilities computed
by hand from its logits, and the per-answer / per-token metrics on hand-made log-ratios."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from audit.collect import Answer, kl_terms
from audit.records import CHECKS, AnswerRow
from audit.summary import StatsSettings, seed_metrics
from selfplay.envs.prompt import policy_messages
from selfplay.models import load_backend
from selfplay.models.adapter_noise import perturb_lora
from selfplay.runs import Prompts, load_data_split


def _by_hand(backend, prompt: str, text: str | list[int], temperature: float = 1.0) -> float:
    """Σ log softmax(logits / temperature)[next token] over the answer's tokens (a text's encoding,
    or the ids given), one plain forward pass."""
    p = backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c = backend.tokenizer(text, add_special_tokens=False)["input_ids"] if isinstance(text, str) else list(text)
    ids = torch.tensor([p + c])
    with torch.no_grad():
        logp = torch.log_softmax(backend.model(input_ids=ids).logits[0].float() / temperature, dim=-1)
    return float(sum(logp[len(p) - 1 + i, tok] for i, tok in enumerate(c)))


@pytest.fixture
def tiny():
    """A tiny model with a fresh LoRA adapter (B = 0), the first mini environment and two answers."""
    backend = load_backend("tiny-llama", lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
                           progress=False)
    env = load_data_split(type("D", (), {"path": "data/mini", "splits": None})(), "all")[0]
    texts = ["The evidence does not support a figure.", "Revenue rose 12% in 2023 [D1]."]
    return backend, env, texts


def kl_stage(backend, temperature: float = 1.0):
    """The KL stage on plain texts of one environment, as rows in order."""
    def run(env, texts):
        answers = [Answer(env.task_id, env.kind, "policy", f"p{j}", t) for j, t in enumerate(texts)]
        prompts = Prompts({env.task_id: backend.render(policy_messages(env.public))}, "")
        got = kl_terms(backend, prompts, answers, temperature)
        return [dataclasses.asdict(got[a]) for a in answers]
    return run


def test_kl_stage_on_a_tiny_model_matches_a_hand_computation(tiny):
    """Fresh adapter (LoRA B = 0): log π_t = log π_0 exactly, KL 0. After setting the LoRA B weights
    to fixed values the stage's log π_t(a) − log π_0(a) equals the difference of two hand-computed
    sums (adapter on, adapter off), and `tokens` is the answer's token count."""
    backend, env, texts = tiny
    stage = kl_stage(backend)
    assert [r["logp"] - r["logp0"] for r in stage(env, texts)] == [0.0, 0.0]

    perturb_lora(backend.model, seed=0, scale=0.5)
    rows = stage(env, texts)
    prompt = backend.render(policy_messages(env.public))
    for text, row in zip(texts, rows, strict=True):
        on = _by_hand(backend, prompt, text)
        with backend.adapter_disabled():
            off = _by_hand(backend, prompt, text)
        assert row["logp"] == pytest.approx(on, abs=1e-4)
        assert row["logp0"] == pytest.approx(off, abs=1e-4)
        assert row["tokens"] == len(backend.tokenizer(text, add_special_tokens=False)["input_ids"])
        assert abs(on - off) > 1e-3  # the perturbed adapter really moved the policy


def test_kl_stage_scores_at_the_sampling_temperature(tiny):
    """Answers drawn at τ = 0.7 are scored under softmax(logits / 0.7), adapter on and off, so the
    mean log-ratio estimates the KL of the distributions really sampled; at τ = 1 the scores differ."""
    backend, env, texts = tiny
    perturb_lora(backend.model, seed=0, scale=0.5)
    prompt = backend.render(policy_messages(env.public))
    rows = kl_stage(backend, 0.7)(env, texts)
    plain = kl_stage(backend)(env, texts)
    for text, row, row1 in zip(texts, rows, plain, strict=True):
        on = _by_hand(backend, prompt, text, 0.7)
        with backend.adapter_disabled():
            off = _by_hand(backend, prompt, text, 0.7)
        assert row["logp"] == pytest.approx(on, abs=1e-4)
        assert row["logp0"] == pytest.approx(off, abs=1e-4)
        assert abs(row["logp"] - row1["logp"]) > 1e-2
    with pytest.raises(ValueError, match="temperature"):
        backend.sequence_logprobs([prompt], [texts[0]], temperature=0.0)


def test_kl_scores_the_sampled_token_ids_end_of_turn_included(tiny):
    """A sampled answer is scored on the ids that were drawn: an answer that ended carries the
    end-of-turn id last, and that token's log-probability is part of log π_t − log π_0 (re-encoding
    the decoded text would drop it); `tokens` counts it."""
    backend, env, texts = tiny
    perturb_lora(backend.model, seed=0, scale=0.5)
    prompt = backend.render(policy_messages(env.public))
    text = texts[0]
    ids = backend.tokenizer(text, add_special_tokens=False)["input_ids"] + [backend.tokenizer.eos_token_id]
    answer = Answer(env.task_id, env.kind, "policy", "p0", text, token_ids=tuple(ids))
    row = dataclasses.asdict(kl_terms(backend, Prompts({env.task_id: prompt}, ""), [answer], 0.7)[answer])
    on = _by_hand(backend, prompt, ids, 0.7)
    with backend.adapter_disabled():
        off = _by_hand(backend, prompt, ids, 0.7)
    assert row["tokens"] == len(ids)
    assert row["logp"] == pytest.approx(on, abs=1e-4) and row["logp0"] == pytest.approx(off, abs=1e-4)
    text_only = kl_stage(backend, 0.7)(env, [text])[0]
    assert abs((row["logp"] - row["logp0"]) - (text_only["logp"] - text_only["logp0"])) > 1e-4


def _row(env: str, j: int, log_ratio: float, tokens: int) -> AnswerRow:
    return AnswerRow(env, "impossible", "policy", f"p{j}", f"a{j}", 0.5, 0.5, "valid", {CHECKS: True},
                     log_ratio=log_ratio, tokens=tokens)


def test_kl_metrics_by_hand():
    """E1: log-ratios 0.4 (5 tokens), 0.2 (3); E2: −0.1 (2), 0.5 (10). Per answer: (0.4 + 0.2 − 0.1 +
    0.5) / 4 = 0.25; per token: 1.0 / 20 = 0.05. The interval resamples environments: E1 alone gives
    0.3 per answer, E2 alone 0.2, so it lies within [0.2, 0.3]."""
    rows = [_row("E1", 0, 0.4, 5), _row("E1", 1, 0.2, 3), _row("E2", 0, -0.1, 2), _row("E2", 1, 0.5, 10)]
    m = seed_metrics({0: rows}, run_seed=0, settings=StatsSettings(B=1000))[0].metrics
    assert m["kl/per_answer"].value == pytest.approx(0.25) and m["kl/per_answer"].n == 4
    assert m["kl/per_token"].value == pytest.approx(0.05)
    assert 0.2 - 1e-12 <= m["kl/per_answer"].ci_low <= m["kl/per_answer"].ci_high <= 0.3 + 1e-12
    assert m["kl/per_answer"].n_undefined == 0
    assert m["kl/per_token"].ci_low <= 0.05 <= m["kl/per_token"].ci_high
