"""The DPO step (selfplay/dpo.py): token-length plan, BOS handling, and which policy is the reference."""

import functools
from contextlib import nullcontext

import numpy as np
import pytest
import torch

from selfplay import dpo, dpo_cpu
from selfplay.dpo import DPOSettings, dataset_rows, dpo_step, plan_lengths, trl_prompt
from selfplay.models.adapter_noise import perturb_lora
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


def load_tiny():
    from selfplay.models import load_backend

    return load_backend("tiny-llama", backend="hf", lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
                        progress=False)


@pytest.fixture(scope="module")
def tiny():
    return load_tiny()


@pytest.fixture
def moved():
    """A fresh tiny policy whose adapter has moved away from π_0 (B matrices set to seeded noise),
    so adapter on and off give different log-probs."""
    b = load_tiny()
    perturb_lora(b.model, seed=0, scale=0.5)
    return b


def settings(reference: str) -> DPOSettings:
    return DPOSettings(beta=0.1, learning_rate=1e-2, epochs=1, batch_size=2, grad_accum=1, max_seq_len=512,
                       reference=reference, seed=0, progress=False)


def make_pairs(backend) -> list[Pair]:
    prompt = backend.render([{"role": "user", "content": "Is 7 prime?"}])
    other = backend.render([{"role": "user", "content": "Is 9 prime? Answer in a word."}])
    return [Pair("a", prompt, "Yes, 7 is prime.", "No.", 0, 1, 0.9, 0.1),
            Pair("b", other, "No, 9 is 3 times 3.", "Yes.", 0, 1, 0.8, 0.2)]


def policy_logps(backend, pairs, adapter: bool) -> tuple[np.ndarray, np.ndarray]:
    """log π(answer + EOS | prompt) from the backend itself, chosen and rejected (TRL appends EOS)."""
    eos = backend.tokenizer.eos_token
    prompts = [p.prompt for p in pairs]
    return (backend.sequence_logprobs(prompts, [p.chosen + eos for p in pairs], adapter=adapter),
            backend.sequence_logprobs(prompts, [p.rejected + eos for p in pairs], adapter=adapter))


def spy_reference(monkeypatch, shift: float = 0.0) -> list:
    """Record what dpo_step hands TRL as reference log-probs (optionally shifted by `shift` nats)."""
    seen = []
    real = dpo.reference_logps

    def spy(model, rows, max_length, *, adapter):
        chosen, rejected = real(model, rows, max_length, adapter=adapter)
        seen.append((adapter, np.array(chosen), np.array(rejected)))
        return [c + shift for c in chosen], rejected

    monkeypatch.setattr(dpo, "reference_logps", spy)
    return seen


def test_reference_is_the_policy_just_before_the_step(moved, tmp_path, monkeypatch):
    """reference=previous: the log-probs handed to TRL equal the adapter-on log-probs of the policy
    just before the step (computed by the backend, independently); reference=initial: the adapter-off
    ones. Adapter on and off differ by far more than the tolerance, so the check can fail."""
    pairs = make_pairs(moved)
    on, off = policy_logps(moved, pairs, adapter=True), policy_logps(moved, pairs, adapter=False)
    assert np.max(np.abs(on[0] - off[0])) > 1e-2
    seen = spy_reference(monkeypatch)

    dpo_step(moved.model, moved.tokenizer, pairs, settings("previous"), tmp_path / "a")
    (adapter, chosen, rejected), = seen
    assert adapter is True
    # sums of ~100 float32 token log-probs near -100 carry ~1e-5 of rounding, hence rtol as well
    close = functools.partial(np.testing.assert_allclose, atol=1e-5, rtol=1e-6)
    close(chosen, on[0])
    close(rejected, on[1])

    after = policy_logps(moved, pairs, adapter=True)  # the step moved the policy
    assert np.max(np.abs(after[0] - on[0])) > 1e-3
    dpo_step(moved.model, moved.tokenizer, pairs, settings("previous"), tmp_path / "b")
    close(seen[1][1], after[0])

    dpo_step(moved.model, moved.tokenizer, pairs, settings("initial"), tmp_path / "c")
    assert seen[2][0] is False
    close(seen[2][1], off[0])  # π_0 never moves
    np.testing.assert_allclose(seen[2][2], off[1], atol=1e-5)


def test_trl_trains_against_the_handed_reference(moved, tmp_path, monkeypatch):
    """Hand TRL a chosen reference 1 nat below the policy's own: its first-step implicit reward
    β·(log π − log π_ref) is then β·1 = 0.1 for chosen and 0 for rejected (the policy is still the
    previous one when TRL logs the first step). Fails if TRL stops reading the columns."""
    spy_reference(monkeypatch, shift=-1.0)
    m = dpo_step(moved.model, moved.tokenizer, make_pairs(moved), settings("previous"), tmp_path)
    assert m["train/steps"] == 1
    assert m[key("rewards/chosen")] == pytest.approx(0.1, abs=1e-5)
    assert m[key("rewards/rejected")] == pytest.approx(0.0, abs=1e-5)


def key(trl_key: str) -> str:
    """Our metrics name for one of TRL's log keys."""
    return f"train/{dpo.TRL_LOG_KEYS[trl_key]}"


def test_reference_previous_vs_initial(tiny, tmp_path):
    """First step's implicit rewards β·(log π − log π_ref): 0 when the reference is the policy itself
    (previous), nonzero for `initial` once the adapter has moved away from π_0; TRL's temporary "ref"
    adapter never survives the step."""
    pairs = make_pairs(tiny)
    assert dataset_rows(tiny.tokenizer, pairs)[0]["prompt"] == pairs[0].prompt  # SmolLM2 tokenizer adds no BOS

    first = dpo_step(tiny.model, tiny.tokenizer, pairs, settings("previous"), tmp_path / "a")
    assert first["train/steps"] == 1 and first[key("rewards/margins")] == pytest.approx(0.0, abs=1e-6)
    assert list(tiny.model.peft_config) == ["default"]

    second = dpo_step(tiny.model, tiny.tokenizer, pairs, settings("initial"), tmp_path / "b")
    assert abs(second[key("rewards/margins")]) > 1e-4
    assert list(tiny.model.peft_config) == ["default"]
    trainable = [n for n, p in tiny.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and ".default." in n for n in trainable)

    third = dpo_step(tiny.model, tiny.tokenizer, pairs, settings("previous"), tmp_path / "c")
    assert third[key("rewards/margins")] == pytest.approx(0.0, abs=1e-6)


def test_no_pairs_is_no_step(tiny, tmp_path):
    m = dpo_step(tiny.model, tiny.tokenizer, [], settings("previous"), tmp_path)
    assert m["train/steps"] == 0 and m["train/pairs"] == 0


def test_hf_sample_honours_adapter(moved):
    """adapter=False samples π_0: the same texts as inside adapter_disabled(), for the same seed, and
    not those of the moved adapter."""
    prompt = [moved.render([{"role": "user", "content": "Say something."}])]
    kw = dict(n=3, temperature=1.0, max_new_tokens=8, seed=4)
    off = moved.sample(prompt, adapter=False, **kw)
    with moved.adapter_disabled():
        assert moved.sample(prompt, **kw) == off
    assert moved.sample(prompt, **kw) != off


def trl_batch(backend, pairs):
    """TRL's training batch for `pairs`: [chosen; rejected] rows, right-padded, labels on completions."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    tok, eos = backend.tokenizer, backend.tokenizer.eos_token
    rows = [{"prompt_ids": tok(p.prompt)["input_ids"], "chosen_ids": tok(p.chosen + eos)["input_ids"],
             "rejected_ids": tok(p.rejected + eos)["input_ids"]} for p in pairs]
    batch = DataCollatorForPreference(pad_token_id=tok.pad_token_id)(rows)
    return rows, batch, batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen3", "tiny-gemma3"])
def test_prompt_once_forward_equals_the_plain_one(arch, monkeypatch):
    """The shared-prompt backbone gives TRL's fused head the same per-token log-probs, the same DPO
    loss and the same LoRA gradients as the plain two-row forward (adapter moved off zero so its
    gradients are not trivially equal)."""
    from trl.trainer.utils import add_fused_lm_head

    from selfplay.models import load_backend

    b = load_backend(arch, backend="hf", lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
                     progress=False)
    perturb_lora(b.model, seed=1, scale=0.3)
    add_fused_lm_head(b.model.get_base_model())
    pairs = make_pairs(b) + [Pair("c", make_pairs(b)[0].prompt, "Yes, it is a prime number.", "Yes.", 0, 1, 0.7, 0.2)]
    _, batch, labels = trl_batch(b, pairs)
    b.model.train()

    def run(shared: bool, labelled_only: bool = False):
        b.model.zero_grad()
        labelled = dpo_cpu.labelled_positions_only() if labelled_only else nullcontext()
        with dpo_cpu.prompt_shared_once(b.model, enabled=shared), labelled:
            out = b.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels,
                          fused_lm_head=True, use_cache=False)
        logps = out.log_probs.sum(1)
        chosen, rejected = logps.chunk(2)
        loss = -torch.nn.functional.logsigmoid(0.1 * (chosen - rejected)).mean()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in b.model.named_parameters() if p.grad is not None}
        return out.log_probs.detach(), loss.item(), grads

    used = []
    real = dpo_cpu.shared_prefix_hidden
    monkeypatch.setattr(dpo_cpu, "shared_prefix_hidden", lambda *a: used.append(real(*a)) or used[-1])
    plain = run(False)
    assert plain[0].abs().sum() > 1  # log-probs are there to compare
    for fast in (run(True), run(False, labelled_only=True), run(True, labelled_only=True)):
        torch.testing.assert_close(fast[0], plain[0], atol=1e-5, rtol=0)
        assert fast[1] == pytest.approx(plain[1], abs=1e-5)
        assert fast[2].keys() == plain[2].keys() and len(plain[2]) > 0
        for name in plain[2]:
            torch.testing.assert_close(fast[2][name], plain[2][name], atol=1e-5, rtol=1e-4)
    # the shared runs did take the shortcut, except on Gemma 3's sliding-window layers
    assert len(used) == (0 if arch == "tiny-gemma3" else 2) and all(h is not None for h in used)


def test_prompt_once_needs_a_shared_prefix():
    """Rows i and i + B sharing no first token, or an odd batch, leave the plain forward in charge."""
    ids = torch.tensor([[5, 6, 7], [8, 6, 7]])
    assert dpo_cpu.pair_prefix_lens(ids, [3, 3]) is None
    # shared prefix kept below each row's length: [5, 6] vs [5, 6, 7] share 2, capped at 2 - 1
    assert dpo_cpu.pair_prefix_lens(torch.tensor([[5, 6, 0], [5, 6, 7]]), [2, 3]) == [1]
    assert dpo_cpu.shared_prefix_hidden(None, "cache", None, torch.ones((3, 2), dtype=torch.long),
                                    torch.ones((3, 2), dtype=torch.long)) is None


def test_batched_reference_equals_one_sequence_at_a_time(moved):
    """reference_logps (pairs batched, prompt run once) against completion_logp, one sequence per
    forward, for both policies and a length cap that truncates a completion."""
    rows, _, _ = trl_batch(moved, make_pairs(moved))
    cap = max(len(r["prompt_ids"]) + len(r["chosen_ids"]) for r in rows) - 2
    for adapter in (True, False):
        chosen, rejected = dpo.reference_logps(moved.model, rows, cap, adapter=adapter)
        with nullcontext() if adapter else moved.model.disable_adapter():
            one = [[dpo.completion_logp(moved.model, r["prompt_ids"], r[k], cap) for r in rows]
                   for k in ("chosen_ids", "rejected_ids")]
        np.testing.assert_allclose(chosen, one[0], atol=1e-5)
        np.testing.assert_allclose(rejected, one[1], atol=1e-5)


def test_labelled_positions_only_switches_trl_to_its_gpu_rule_and_back():
    import trl.trainer.utils as trl_utils

    cpu = torch.device("cpu")
    assert trl_utils._use_triton(cpu) is False  # TRL projects every position on a CPU
    with dpo_cpu.labelled_positions_only():
        assert trl_utils._use_triton(cpu) is True
    assert trl_utils._use_triton(cpu) is False
