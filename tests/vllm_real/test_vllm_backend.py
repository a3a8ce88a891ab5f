"""VLLMBackend on the real vLLM (CPU build, `make test-vllm`), against the HFBackend that holds the
same weights and adapter, on SmolLM2-135M in float32.

One engine serves every test (starting it takes ~20 s). The adapter is r = 4, which vLLM only
serves with `max_lora_rank` rounded up to 8, on q/v projections; its B matrices are set to seeded
noise so adapter on and off differ visibly (a fresh adapter is a no-op). Agreement bars: log-probs
within 1e-4 nats (float32 kernels differ only in summation order), identical greedy text.
"""

from __future__ import annotations

import numpy as np
import pytest

from judges import JudgeItem, build_judge
from selfplay.envs.types import Document, PublicView
from selfplay.models import LoraSettings, PolicyConfig
from selfplay.models.adapter_noise import perturb_lora
from selfplay.models.vllm_backend import VLLMBackend

TOL = 1e-4
LORA = LoraSettings(r=4, alpha=8, target_modules=("q_proj", "v_proj"))
ENGINE = dict(dtype="float32", enable_sleep_mode=False, max_model_len=2048)
QUESTIONS = ["What is the capital of France?", "Name a prime number larger than ten.", "Is the sky green?"]
COMPLETIONS = [" Paris is the capital.", " Thirteen.", " No, it is usually blue."]


@pytest.fixture(scope="module")
def vb(tmp_path_factory):
    b = VLLMBackend.from_config(PolicyConfig.named("smollm2-135m"), lora=LORA, gpu_memory_utilization=0.15,
                                engine=ENGINE, device="cpu", progress=False)
    assert b.llm.llm_engine.model_config.max_model_len == 2048 and b.max_model_len == 2048
    perturb_lora(b.trainable.model, seed=1)
    b.save_adapter(tmp_path_factory.mktemp("adapter") / "a")
    return b


@pytest.fixture(scope="module")
def prompts(vb):
    return [vb.render([{"role": "user", "content": q}]) for q in QUESTIONS]


@pytest.fixture
def close(logprob_diffs):
    """Assert vLLM's and HF's log-probs agree within TOL; the difference goes into the summary line."""

    def check(got, want) -> None:
        diff = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
        logprob_diffs.append(diff)
        assert diff <= TOL, f"vLLM and HF log-probs differ by {diff:.2e} > {TOL}"

    return check


def test_constants_match_the_installed_vllm():
    from typing import get_args

    from vllm.config.lora import MaxLoRARanks
    from vllm.sampling_params import MAX_LOGPROB_TOKEN_IDS

    from selfplay.models import vllm_backend

    assert vllm_backend.MAX_TOKEN_IDS == MAX_LOGPROB_TOKEN_IDS
    assert vllm_backend.LORA_RANKS == tuple(sorted(get_args(MaxLoRARanks)))


@pytest.mark.parametrize("adapter", [True, False], ids=["adapter-on", "adapter-off"])
def test_logprobs_match_hf(vb, prompts, adapter, close):
    hf = vb.trainable
    tokens = [hf.tokenizer.convert_tokens_to_ids(t) for t in ("Yes", "No", "Paris", "ĠParis")] + [0, 49151]
    close(vb.next_token_logprobs(prompts, tokens, adapter=adapter), hf.next_token_logprobs(prompts, tokens, adapter=adapter))
    close(vb.sequence_logprobs(prompts, COMPLETIONS, adapter=adapter),
          hf.sequence_logprobs(prompts, COMPLETIONS, adapter=adapter))


def test_adapter_on_and_off_differ_and_each_matches_its_hf_side(vb, prompts, close):
    """Not a vacuous agreement: the served adapter moves the log-probs far more than the tolerance."""
    on = vb.sequence_logprobs(prompts, COMPLETIONS)
    off = vb.sequence_logprobs(prompts, COMPLETIONS, adapter=False)
    with vb.adapter_disabled():
        close(vb.sequence_logprobs(prompts, COMPLETIONS), off)
    assert np.max(np.abs(on - off)) > 100 * TOL


def test_greedy_text_matches_hf(vb, prompts):
    """Same text and the same sampled ids, the end token included where an answer finished."""
    for adapter in (True, False):
        ours = vb.greedy(prompts, max_new_tokens=24, adapter=adapter)
        hf = vb.trainable.greedy(prompts, max_new_tokens=24, adapter=adapter)
        assert ours == hf
        assert [(c.finished, c.token_ids) for c in ours] == [(c.finished, c.token_ids) for c in hf]


def test_samples_are_distinct_per_prompt_and_sample(vb, prompts):
    """The same prompt twice and a third, 3 samples each, at temperature 1.5 (so two seeds agreeing
    by chance is out of reach): nine different texts. Sample j of prompt i is the one a lone request
    with seed 5 + 3i + j draws, so no two (prompt, sample) pairs share a seed. (Seeds 5 + i per
    prompt made prompt 0's sample 1 equal prompt 1's sample 0 word for word.)"""
    batch = [prompts[0], prompts[0], prompts[1]]
    out = vb.sample(batch, n=3, temperature=1.5, max_new_tokens=12, seed=5)
    flat = [t for texts in out for t in texts]
    assert len(set(flat)) == len(flat) == 9, out
    for i, j in [(0, 1), (1, 0), (2, 2)]:
        assert vb.sample([batch[i]], n=1, temperature=1.5, max_new_tokens=12, seed=5 + 3 * i + j) == [[out[i][j]]]


def test_a_swapped_adapter_is_served_fresh(vb, prompts, tmp_path, close):
    """New weights written over the served adapter's own folder, then the first weights loaded
    back: each time vLLM serves the weights the HF side holds, never a cached copy."""
    path = vb._lora.lora_path
    before = vb.sequence_logprobs(prompts, COMPLETIONS)
    first = {k: v.clone() for k, v in vb.trainable.model.state_dict().items() if "lora_" in k}
    perturb_lora(vb.trainable.model, seed=2)
    vb.save_adapter(path)
    swapped = vb.sequence_logprobs(prompts, COMPLETIONS)
    assert np.max(np.abs(swapped - before)) > 100 * TOL
    close(swapped, vb.trainable.sequence_logprobs(prompts, COMPLETIONS))

    vb.trainable.model.load_state_dict(first, strict=False)
    vb.save_adapter(tmp_path / "first")
    vb.load_adapter(tmp_path / "first")
    close(vb.sequence_logprobs(prompts, COMPLETIONS), before)


def test_prefix_cached_judge_path_matches_hf(vb, close):
    """A pairwise judge's prompts share the packet prefix, which vLLM's prefix cache computes once:
    scores equal the HF backend's, asked twice (the second time from a warm cache)."""
    pub = PublicView("t1", "Based only on the packet, does the drug lower mortality? Answer yes or no.", (
        Document("D1", "A randomised trial of 4,000 patients found a 12% lower mortality (RR 0.88, 95% CI 0.75-1.02)."),
        Document("D2", "A second trial found no difference in mortality (RR 1.01)."),
    ))
    answers = ["Yes. The drug lowers mortality [D1].", "The packet cannot settle this [D1, D2].", "No [D2]."]
    items = [JudgeItem(pub, a, answers[1]) for a in answers]
    params = {"min_verdict_mass": 0.0}
    want = build_judge("anchored", vb.trainable, params=params).score(items)
    for _ in range(2):
        got = build_judge("anchored", vb, params=params).score(items)
        for g, w in zip(got, want, strict=True):
            assert g.error is None and w.error is None and g.prompt == w.prompt
            assert g.probs.keys() == w.probs.keys()
            close(np.log([g.probs[k] for k in w.probs]), np.log([w.probs[k] for k in w.probs]))
            assert g.score == pytest.approx(w.score, abs=1e-4)
    assert len({round(v.score, 4) for v in want}) > 1
