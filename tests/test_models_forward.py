"""selfplay.models.forward.completion_logprob_sums on a scripted two-word model.

`EchoLM` gives logits [ln 3, 0] after token 0 and [0, ln 3] after token 1: the next token repeats
the current one with probability 3/4. So a completion token costs ln(3/4) when it equals the token
before it and ln(1/4) when it differs, and an off-by-one in the positions read changes the sum.
"""

from __future__ import annotations

import math

import pytest
import torch

from selfplay.models.forward import completion_logprob_sums

SAME, DIFF = math.log(3 / 4), math.log(1 / 4)


class EchoLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor([[math.log(3), 0.0], [0.0, math.log(3)]]))

    def forward(self, input_ids, attention_mask, logits_to_keep, **kw):
        logits = self.table[input_ids]  # (B, W, 2)
        if isinstance(logits_to_keep, int):
            return type("Out", (), {"logits": logits[:, -logits_to_keep:]})
        return type("Out", (), {"logits": logits[logits_to_keep]})  # boolean (B, W) mask -> (N, 2)


@pytest.mark.parametrize("row_keep", [pytest.param(True, id="per-row"), pytest.param(False, id="last-k")])
def test_sums_read_the_completion_tokens_only(row_keep):
    """[0, 0 | 1, 1]: 0->1 differs, 1->1 repeats. [1 | 1]: repeats. [0, 1, 1 |]: nothing after the prompt."""
    seqs = [[0, 0, 1, 1], [1, 1], [0, 1, 1]]
    got = completion_logprob_sums(EchoLM(), seqs, [2, 1, 3], row_keep=row_keep)
    assert got == pytest.approx([DIFF + SAME, SAME, 0.0], abs=1e-6)


def test_temperature_divides_the_logits():
    """At T = 2 the logits are [ln 3 / 2, 0]: a repeat has probability √3 / (1 + √3)."""
    got = completion_logprob_sums(EchoLM(), [[0, 0]], [1], temperature=2.0)
    assert got == pytest.approx([math.log(math.sqrt(3) / (1 + math.sqrt(3)))], abs=1e-6)


def test_an_empty_prompt_is_refused():
    with pytest.raises(ValueError, match="prompt length"):
        completion_logprob_sums(EchoLM(), [[0, 1]], [0])
