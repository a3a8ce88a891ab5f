"""The DPO step (selfplay/dpo.py): token-length plan, BOS handling, and which policy is the reference."""

import pytest

from selfplay.dpo import DPOSettings, dataset_rows, dpo_step, plan_lengths, trl_prompt
from selfplay.pairs import Pair


class WordTokenizer:
    """One token per whitespace word; with add_special_tokens a BOS id 0 goes first, like Gemma's."""

    bos_token, eos_token = "<bos>", "<eos>"

    def __init__(self, adds_bos: bool):
        self.adds_bos = adds_bos

    def __call__(self, text, add_special_tokens=True):
        ids = [hash(w) % 1000 + 1 for w in text.replace("<eos>", " <eos>").split()]
        return {"input_ids": ([0] if add_special_tokens and self.adds_bos else []) + ids}


def test_leading_bos_is_stripped_only_when_the_tokenizer_adds_one():
    assert trl_prompt(WordTokenizer(adds_bos=True), "<bos> user: hi") == " user: hi"
    assert trl_prompt(WordTokenizer(adds_bos=False), "<bos> user: hi") == "<bos> user: hi"
    assert trl_prompt(WordTokenizer(adds_bos=True), "user: hi") == "user: hi"


@pytest.mark.parametrize(
    "cap, expected",
    [
        # prompt "q1 q2 q3 " = 1 BOS + 3 words; chosen "a b" -> 4 + 2 + EOS = 7; rejected "c" -> 4 + 1 + EOS = 6
        pytest.param(100, (7, 7, 0, 0), id="limit-from-data-nothing-truncated"),
        pytest.param(6, (6, 7, 1, 0), id="cap-6-truncates-the-7-token-chosen"),
        pytest.param(4, (4, 7, 2, 1), id="cap-4-prompt-fills-it-dropped"),
    ],
)
def test_length_plan(cap, expected):
    rows = [{"prompt": "q1 q2 q3 ", "chosen": "a b", "rejected": "c"}]
    plan = plan_lengths(WordTokenizer(adds_bos=True), rows, cap)
    assert (plan.max_length, plan.longest, plan.truncated, plan.dropped_long_prompts) == expected


@pytest.fixture(scope="module")
def tiny():
    from selfplay.models import load_backend

    return load_backend("tiny-llama", backend="hf", lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
                        progress=False)


def settings(reference: str) -> DPOSettings:
    return DPOSettings(beta=0.1, learning_rate=1e-2, epochs=1, batch_size=2, grad_accum=1, max_seq_len=512,
                       reference=reference, seed=0, progress=False)


def test_reference_previous_vs_initial(tiny, tmp_path):
    """First step's implicit rewards β·(log π − log π_ref): 0 when the reference is the policy itself
    (previous), nonzero for `initial` once the adapter has moved away from π_0; TRL's temporary "ref"
    adapter never survives the step."""
    prompt = tiny.render([{"role": "user", "content": "Is 7 prime?"}])
    pairs = [Pair("a", prompt, "Yes, 7 is prime.", "No.", 0, 1, 0.9, 0.1),
             Pair("b", prompt, "It is prime.", "It is even.", 0, 1, 0.8, 0.2)]
    assert dataset_rows(tiny.tokenizer, pairs)[0]["prompt"] == prompt  # SmolLM2 tokenizer adds no BOS

    first = dpo_step(tiny.model, tiny.tokenizer, pairs, settings("previous"), tmp_path / "a")
    assert first["train/steps"] == 1 and first["train/rewards/margins"] == 0.0
    assert list(tiny.model.peft_config) == ["default"]

    second = dpo_step(tiny.model, tiny.tokenizer, pairs, settings("initial"), tmp_path / "b")
    assert abs(second["train/rewards/margins"]) > 1e-4
    assert list(tiny.model.peft_config) == ["default"]
    trainable = [n for n, p in tiny.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and ".default." in n for n in trainable)

    third = dpo_step(tiny.model, tiny.tokenizer, pairs, settings("previous"), tmp_path / "c")
    assert third["train/rewards/margins"] == 0.0


def test_no_pairs_is_no_step(tiny, tmp_path):
    m = dpo_step(tiny.model, tiny.tokenizer, [], settings("previous"), tmp_path)
    assert m["train/steps"] == 0 and m["train/pairs"] == 0
