"""The null control `random`: a seeded score that reads nothing but the answer's identity."""

import hashlib

import pytest

from judges import build_judge
from judges.base import JudgeItem
from judges.random_reward import uniform_score
from judges.registry import check_reward
from selfplay.envs.types import PublicView


def item(task_id: str, answer: str, question: str = "Q?") -> JudgeItem:
    return JudgeItem(PublicView(task_id, question, ()), answer)


def test_uniform_score_is_the_top_53_bits_of_the_keyed_sha256():
    digest = hashlib.sha256(b"3\x00t1\x00an answer").digest()
    want = (int.from_bytes(digest[:8], "big") >> 11) / 2**53
    assert uniform_score(3, "t1", "an answer") == want
    assert 0.0 <= want < 1.0


def test_scores_depend_on_seed_task_and_text_only():
    judge = build_judge("random", None, params={"name": "random", "seed": 1})
    a, b = judge.score([item("t1", "x"), item("t1", "x", question="another question entirely")])
    assert a.score == b.score  # the question (content the judge could read) changes nothing
    other_seed = build_judge("random", None, params={"name": "random", "seed": 2}).score([item("t1", "x")])[0]
    other_task = judge.score([item("t2", "x")])[0]
    assert len({a.score, other_seed.score, other_task.score}) == 3


def test_scores_are_spread_over_the_unit_interval():
    judge = build_judge("random", None, params={"name": "random", "seed": 0})
    scores = [v.score for v in judge.score([item("t", f"answer {i}") for i in range(2000)])]
    assert all(0.0 <= s < 1.0 for s in scores)
    assert abs(sum(scores) / len(scores) - 0.5) < 0.03  # 5 SE of a uniform mean at n = 2000
    assert sum(s < 0.1 for s in scores) == pytest.approx(200, abs=50)


@pytest.mark.parametrize("params, needle", [
    ({"name": "random", "seed": -1}, "reward.seed=-1"),
    ({"name": "random", "seed": True}, "reward.seed=True"),
    ({"name": "random", "candidates": "both"}, "candidates='both'"),
    ({"name": "random", "temperature": 1}, "unknown reward parameter(s) ['temperature']"),
])
def test_bad_parameters_name_the_key(params, needle):
    with pytest.raises(ValueError, match=None) as err:
        check_reward("random", params)
    assert needle in str(err.value)


@pytest.mark.parametrize("design", ["anchored", "commit_first", "blind_solve", "rubric", "generic", "certificate",
                                    "decisive", "oracle_verdict", "random"])
def test_every_reward_takes_each_candidate_pool(design):
    for pool in ("policy", "labelled", "mixed"):
        check_reward(design, {"name": design, "candidates": pool})
    with pytest.raises(ValueError, match="candidates='samples'"):
        check_reward(design, {"name": design, "candidates": "samples"})
