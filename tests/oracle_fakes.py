"""Shared by the oracle tests' backend fakes: the `Backend` methods an oracle never calls."""

import contextlib


class VerdictOnlyBackend:
    """The oracle only reads verdict-token probabilities; anything else it calls is a bug."""

    def sample(self, prompts, *, n, temperature, max_new_tokens, seed, adapter=True):
        raise AssertionError("the oracle never samples")

    def greedy(self, prompts, *, max_new_tokens, adapter=True):
        raise AssertionError("the oracle never generates")

    def sequence_logprobs(self, prompts, completions, *, adapter=True, temperature=1.0):
        raise AssertionError("the oracle reads no sequence log-probabilities")

    def adapter_disabled(self):
        return contextlib.nullcontext()
