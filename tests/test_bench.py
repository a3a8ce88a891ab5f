"""bench/run.py: the machine bounds its ratios are measured against, on a tiny model (fast)."""

import pytest

from bench import run


def test_shared_and_own_tokens_by_hand():
    # all three start with [1, 2]; after it: 2 + 1 + 0 tokens
    assert run.shared_and_own_tokens([[1, 2, 3, 4], [1, 2, 5], [1, 2]]) == (2, 3)
    assert run.shared_and_own_tokens([[7, 8], [9]]) == (0, 3)


@pytest.fixture(scope="module")
def tiny():
    from selfplay.models import load_backend

    return load_backend("tiny-llama", backend="hf", progress=False)


def test_machine_counts_the_model_shapes(tiny):
    """FLOP of one pass: 512 rows through each decoder layer's 7 projections and the LM head once."""
    cfg = tiny.model.config
    h, i, v, layers = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    d = cfg.head_dim if getattr(cfg, "head_dim", None) else h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    per_layer = h * q + 2 * h * kv + q * h + 2 * h * i + i * h
    m = run.machine(tiny.model, repeats=1)
    assert m["matmul_detail"]["flop"] == 2 * 512 * (layers * per_layer + h * v)
    assert m["matmul_flops"] > 1e8 and m["read_bytes_per_s"] > 1e8  # any machine running tests does this


def test_p8_bound_is_prefill_plus_weight_and_kv_reads(tiny):
    m = {"matmul_flops": 1e10, "read_bytes_per_s": 1e9}
    out = run.p8(tiny, m, prefill_rate=1000.0, repeats=1, k=2, max_new_tokens=3)["P8_detail"]
    cfg = tiny.model.config
    d = cfg.head_dim if getattr(cfg, "head_dim", None) else cfg.hidden_size // cfg.num_attention_heads
    kv_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * d * 4
    weights = 4 * sum(p.numel() for p in tiny.model.parameters())
    steps, plen = out["decode_steps"], out["prompt_tokens"]
    assert 1 <= steps <= 3
    decode = sum(weights + 2 * kv_token * (plen + s) for s in range(steps)) / 1e9
    assert out["prefill_bound_s"] == pytest.approx(plen / 1000.0)
    assert out["decode_bound_s"] == pytest.approx(decode)
    assert out["bound_s"] == pytest.approx(plen / 1000.0 + decode)

