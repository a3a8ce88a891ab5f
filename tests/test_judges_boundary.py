"""Role boundary over every prompt the judges build (every design, stage 1 and scoring) and the
policy prompt, for every loaded environment (the shared release and data/mini, when present).

No prompt may contain a sentence of the certificate, evaluation_spec, ground truth or any stress
answer unless that sentence is also in the question or evidence — except the candidate being
scored (its own fenced block), for `anchored` the reference answer r(e), and for `certificate`
(control: sees the hidden anchor) its fenced evaluation-spec block. Every item offers the
certificate text to every design, so a design other than `certificate` that showed it would fail.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

from judges import JUDGES, JudgeItem, build_judge, certificate_text, judge_item
from judges import prompts as P
from selfplay.envs import leaked_sentences, load_envs
from selfplay.envs.prompt import policy_messages

REPO = Path(__file__).resolve().parents[1]
SOURCES = {"release": REPO.parent / "shared" / "impossible_rubrics", "mini": REPO / "data" / "mini"}


def _envs(which):
    root = SOURCES[which]
    if not (root / "data").is_dir() or not any((root / "data").glob("*.json")):
        pytest.skip(f"no {which} environments at {root}")
    return load_envs(root)


class RecordingBackend:
    """Uniform verdict probabilities; stage 1 answers with fixed neutral text; records every prompt."""

    name = "recording"

    class tokenizer:  # noqa: N801 - stands in for a tokenizer object
        @staticmethod
        def encode(text, add_special_tokens=False):
            return [int.from_bytes(text.encode()[:8].ljust(8, b"\0"), "big")]  # distinct for short labels

    def __init__(self):
        self.greedy_prompts, self.scored = [], []

    def render(self, messages, *, add_generation_prompt=True):
        return "".join(f"<{m['role']}>\n{m['content']}\n" for m in messages) + "<assistant>\n"

    def greedy(self, prompts, *, max_new_tokens, adapter=True):
        self.greedy_prompts.extend(prompts)
        return ["Stage one output." for _ in prompts]

    def sample(self, prompts, *, n, temperature, max_new_tokens, seed, adapter=True):
        raise AssertionError("a judge never samples")

    def next_token_logprobs(self, prompts, token_ids, *, adapter=True, **kw):
        self.scored.extend(prompts)
        return np.log(np.full((len(prompts), len(token_ids)), 1.0 / len(token_ids)))

    def sequence_logprobs(self, prompts, completions, *, adapter=True, temperature=1.0):
        raise AssertionError("a judge reads no sequence log-probabilities")

    def adapter_disabled(self):
        return contextlib.nullcontext()


@pytest.mark.parametrize("which", ["release", "mini"])
def test_no_hidden_sentence_in_any_prompt(which):
    envs = _envs(which)
    checked = 0
    for env in envs:
        policy = RecordingBackend().render(policy_messages(env.public))
        assert leaked_sentences(env, policy) == [], env.task_id
        candidates = [a.text for a in env.stress_answers] + ["I cannot tell from the packet."]
        cert = certificate_text(env)
        for name in JUDGES:
            backend = RecordingBackend()
            judge = build_judge(name, backend)
            if not hasattr(judge, "design"):  # a no-model reward builds no prompt
                # the oracle-reward controls read the hidden anchor (the named exception): judge_item
                # hands it to them and to no other design
                judge.score([judge_item(judge, env, c) for c in candidates])
                assert backend.scored == backend.greedy_prompts == [], name
                continue
            items = [JudgeItem(env.public, c, env.reference_answer, cert) for c in candidates]
            judge.score(items)
            for prompt in backend.greedy_prompts:
                assert leaked_sentences(env, prompt) == [], (name, env.task_id, "stage 1")
            per_item = 2 if judge.design.pairwise else 1
            assert len(backend.scored) == per_item * len(items)
            for k, prompt in enumerate(backend.scored):
                cand = candidates[k // per_item]
                # the candidate's own fenced block is the one place its text may appear
                for label in ("ANSWER A", "ANSWER B", "ANSWER"):
                    prompt = prompt.replace(P.fence(label, cand), "")
                if name == "certificate":  # the named exception: its spec block, and nothing more
                    assert P.fence("SPECIFICATION", cert) in prompt
                    prompt = prompt.replace(P.fence("SPECIFICATION", cert), "")
                leaks = leaked_sentences(env, prompt, allow_reference=(name == "anchored"))
                assert leaks == [], (name, env.task_id, leaks[:2])
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("which", ["release", "mini"])
def test_only_the_certificate_judge_gets_certificate_text(which):
    env = next(e for e in _envs(which) if e.kind == "impossible")
    for name in JUDGES:
        item = judge_item(build_judge(name, RecordingBackend()), env, "x")
        assert item.reference == env.reference_answer and item.public is env.public
        assert (item.certificate is not None) == (name == "certificate"), name
    item = judge_item(build_judge("certificate", RecordingBackend()), env, "x")
    assert item.certificate == certificate_text(env)
    assert all(s in item.certificate for s in env.evaluation_spec["must_not_state"])


def test_the_check_catches_a_leak():
    """The same check flags a prompt that quotes a non-reference stress answer, the certificate, or
    the evaluation-spec block of the certificate judge."""
    env = next(e for e in _envs("release") if e.kind == "impossible")
    other = next(a for a in env.stress_answers if a.answer_id != env.reference.answer_id)
    assert leaked_sentences(env, P.pairwise_user(env.public, "x", other.text), allow_reference=True)
    claim = env.certificate["impossibility_claim"]
    assert leaked_sentences(env, P.pointwise_user(env.public, P.RUBRIC_CRITERIA, "RUBRIC", claim, "x"))
    assert leaked_sentences(env, P.pointwise_user(env.public, P.CERTIFICATE_CRITERIA, "SPECIFICATION",
                                                  certificate_text(env), "x"))
