"""Fakes the test files share (a fake used by one file stays in that file).

`ScriptedBackend` implements the Backend protocol: `next_token_logprobs` returns log p of the asked
token ids from `script(prompt) -> {token string: probability}`; `greedy` returns scripted stage-1
text and counts its calls. Its tokenizer knows the verdict labels as single tokens, each also with a
leading-space variant, so every label's probability is bare + spaced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np

from selfplay.envs.types import Document, PublicView

LABELS = ["A", "B", "1", "2", "3", "4", "5", "Yes", "No"]
VOCAB = {s: i for i, s in enumerate(LABELS + [" " + s for s in LABELS], start=10)}


class ScriptedTokenizer:
    def encode(self, text, add_special_tokens=False):
        return [VOCAB[text]] if text in VOCAB else [ord(c) + 1000 for c in text]

    def decode(self, ids):
        inv = {v: k for k, v in VOCAB.items()}
        return "".join(inv.get(i, chr(i - 1000)) for i in ids)


class ScriptedBackend:
    name = "scripted"

    def __init__(self, script, stage1=lambda prompt: "stage-one text"):
        self.tokenizer = ScriptedTokenizer()
        self.script = script
        self.stage1 = stage1
        self.greedy_prompts: list[str] = []
        self.logprob_calls: list[list[str]] = []

    def render(self, messages, *, add_generation_prompt=True):
        body = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return body + ("<|assistant|>\n" if add_generation_prompt else "")

    def greedy(self, prompts, *, max_new_tokens, adapter=True):
        out = []
        for p in prompts:
            self.greedy_prompts.append(p)
            out.append(self.stage1(p))
        return out

    def sample(self, prompts, *, n, temperature, max_new_tokens, seed, adapter=True):
        return [[self.stage1(p)] * n for p in prompts]

    def next_token_logprobs(self, prompts, token_ids, *, adapter=True, **kw):
        self.logprob_calls.append(list(prompts))
        inv = {v: k for k, v in VOCAB.items()}
        out = np.full((len(prompts), len(token_ids)), -np.inf)
        for r, prompt in enumerate(prompts):
            probs = self.script(prompt)
            for c, tid in enumerate(token_ids):
                p = probs.get(inv[tid], 0.0)
                out[r, c] = math.log(p) if p > 0 else (p if math.isnan(p) else -np.inf)
        return out

    def sequence_logprobs(self, prompts, completions, *, adapter=True, temperature=1.0):
        return np.zeros(len(prompts))

    def adapter_disabled(self):
        return contextlib.nullcontext()


PUB = PublicView("t1", "Does X cause Y? Answer yes or no.", (Document("D1", "X was tested."), Document("D2", "Y was not measured.")))


def short_evidence(envs, words: int = 25, docs: int = 2) -> list:
    """The environments with at most `docs` evidence documents of `words` words each: a tiny random
    model's 49k-token LM head makes every prompt token costly."""
    cut = lambda text: " ".join(text.split()[:words])  # noqa: E731
    return [dataclasses.replace(e, public=dataclasses.replace(
        e.public, evidence=tuple(dataclasses.replace(d, text=cut(d.text)) for d in e.public.evidence[:docs])))
        for e in envs]
