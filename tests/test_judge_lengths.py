"""`judges.lengths.judge_too_long`: every LLM design's prompts measured with the longest candidate,
the stage-1 prompt with its artifact budget, and the designs that read no model left alone."""

import dataclasses
from pathlib import Path

import pytest

from judges.lengths import SCORING, STAGE1, judge_too_long
from selfplay.envs import load_envs
from selfplay.models.config import PolicyConfig
from selfplay.models.loading import load_tokenizer

MINI = Path(__file__).resolve().parents[1] / "data" / "mini"


@pytest.fixture(scope="module")
def setup():
    cfg = PolicyConfig.named("tiny-llama")
    return cfg, load_tokenizer(cfg), load_envs(MINI)[:4]


def _limit(cfg, n):
    return dataclasses.replace(cfg, max_context=n)


@pytest.mark.parametrize("name", ["anchored", "commit_first", "blind_solve", "rubric", "generic", "certificate"])
def test_the_context_every_prompt_needs_is_found_to_the_token(setup, name):
    """Raising the context to each reported size + budget moves past that prompt; where no report is
    left, that context fits every prompt and one token less does not. Stage 1 is measured first."""
    cfg, tok, envs = setup
    over = judge_too_long({"name": name}, _limit(cfg, 64), tok, envs, answer_tokens=32, stress=True)
    assert over.env.task_id == envs[0].task_id
    assert over.prompt == (STAGE1 if name in ("commit_first", "blind_solve", "rubric") else SCORING)
    while over is not None:
        limit = over.tokens + over.budget
        over = judge_too_long({"name": name}, _limit(cfg, limit), tok, envs, answer_tokens=32, stress=True)
    assert judge_too_long({"name": name}, _limit(cfg, limit - 1), tok, envs, answer_tokens=32, stress=True)


def test_a_longer_candidate_or_artifact_makes_a_longer_prompt(setup):
    """The scoring prompt holds the candidate once (order ab first): 392 more answer tokens, about 392
    more prompt tokens; the stage-1 prompt is followed by reward.max_new_tokens."""
    cfg, tok, envs = setup
    small = judge_too_long({"name": "anchored"}, _limit(cfg, 16), tok, envs[:1], answer_tokens=8, stress=False)
    large = judge_too_long({"name": "anchored"}, _limit(cfg, 16), tok, envs[:1], answer_tokens=400, stress=False)
    assert 390 <= large.tokens - small.tokens <= 394 and not large.stress
    stage1 = judge_too_long({"name": "commit_first", "max_new_tokens": 5000}, cfg, tok, envs[:1],
                            answer_tokens=8, stress=False)
    assert stage1.prompt == STAGE1 and stage1.budget == 5000
    assert "reward.max_new_tokens=5000" in stage1.line() and "lower reward.max_new_tokens" in stage1.line()


def test_the_longest_stress_answer_is_the_one_named(setup):
    cfg, tok, envs = setup
    e = envs[0]
    long = dataclasses.replace(e.stress_answers[0], text="entry " * 3000)
    env = dataclasses.replace(e, stress_answers=(*e.stress_answers[1:], long))
    over = judge_too_long({"name": "generic"}, cfg, tok, [env], answer_tokens=None, stress=True)
    assert over.stress and long.answer_id in over.answer and "or that stress answer" in over.line()


@pytest.mark.parametrize("name", ["decisive", "oracle_verdict", "random"])
def test_a_design_without_a_model_has_no_prompt_to_check(setup, name):
    cfg, tok, envs = setup
    assert judge_too_long({"name": name}, _limit(cfg, 16), tok, envs, answer_tokens=8, stress=True) is None
