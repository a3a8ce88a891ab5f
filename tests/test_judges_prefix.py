"""Fast vs reference: judge scores with the shared packet prefix computed once (KV-cache reuse) equal
the plain path's, on a tiny random llama in float32 with the SmolLM2 tokenizer."""

from __future__ import annotations

import pytest

from judges import JudgeItem, build_judge
from judges import prompts as P
from selfplay.envs.types import Document, PublicView
from selfplay.models import load_backend
from selfplay.models.hf import prefix_groups

PUB = PublicView(
    "t1",
    "Based only on the packet, does the drug lower mortality? Answer yes or no.",
    (
        Document("D1", "A randomised trial of 4,000 patients found a 12% lower mortality (RR 0.88, 95% CI 0.75-1.02)."),
        Document("D2", "A second trial found no difference in mortality (RR 1.01)."),
    ),
)
ANSWERS = [
    "Yes. The drug lowers mortality [D1].",
    "The packet cannot settle this: D1 is not significant and D2 is null [D1, D2].",
    "No [D2].",
]


@pytest.fixture(scope="module")
def backends():
    kw = dict(backend="hf", device="cpu", progress=False, batch_size=4)
    return (load_backend("tiny-llama", reuse_prefix=True, **kw), load_backend("tiny-llama", reuse_prefix=False, **kw))


CERT = P.certificate_text(["That the packet cannot settle it."], ["That the drug lowers mortality."])


@pytest.mark.parametrize("name", ["anchored", "generic", "rubric", "certificate"])
def test_prefix_reuse_matches_plain_path(backends, name):
    fast, plain = backends
    items = [JudgeItem(PUB, a, ANSWERS[1], CERT) for a in ANSWERS]  # only `certificate` reads CERT
    params = {"min_verdict_mass": 0.0, "max_new_tokens": 8}
    got = build_judge(name, fast, params=params).score(items)
    want = build_judge(name, plain, params=params).score(items)
    for g, w in zip(got, want, strict=True):
        assert g.error is None and w.error is None
        assert g.artifact == w.artifact and g.prompt == w.prompt
        assert g.order_scores == pytest.approx(w.order_scores, abs=1e-4)
        assert g.score == pytest.approx(w.score, abs=1e-4)
        for k in w.probs:
            assert g.probs[k] == pytest.approx(w.probs[k], rel=1e-3, abs=1e-7)
    # not a vacuous comparison: the candidates get different scores, and the fast path did share
    # a prefix longer than the system text (the packet is in it)
    assert len({round(v.score, 6) for v in want}) > 1
    judge = build_judge(name, fast, params=params)
    prompts = [p for it in items for p in judge.prompts_for(it, got[0].artifact)]
    groups = prefix_groups(fast.encode(prompts), fast.min_prefix)
    assert max(plen for plen, _ in groups) > len(fast.encode([fast.render(P.messages(P.judge_system(), P.packet(PUB)))])[0]) - 10
