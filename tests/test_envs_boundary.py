"""Role boundary: the public view holds only task_id, question and evidence (doc_id, text), and no
sentence of the hidden anchor reaches it unless the question or evidence already says it."""

import dataclasses
import json

import pytest

from selfplay.envs import (
    Document,
    Environment,
    PublicView,
    StressAnswer,
    hidden_sentences,
    leaked_sentences,
    load_release,
    public_strings,
    to_dataset,
)


def _sets(release_dir, mini_dir):
    sets = {"release": load_release(release_dir)}
    if (mini_dir / "data").is_dir():
        sets["mini"] = load_release(mini_dir)
    return sets


@pytest.fixture(scope="module")
def env_sets(release_dir, mini_dir):
    return _sets(release_dir, mini_dir)


def test_public_view_type_has_four_kinds_of_field():
    assert [f.name for f in dataclasses.fields(PublicView)] == ["task_id", "question", "evidence"]
    assert [f.name for f in dataclasses.fields(Document)] == ["doc_id", "text"]


def test_every_public_view_is_only_its_four_fields(env_sets):
    for name, envs in env_sets.items():
        for env in envs:
            p = env.public
            assert (
                type(p) is PublicView and isinstance(p.task_id, str) and isinstance(p.question, str)
            )
            assert all(
                type(d) is Document and isinstance(d.doc_id, str) and isinstance(d.text, str)
                for d in p.evidence
            ), (name, env.task_id)


def test_no_hidden_sentence_in_any_public_view(env_sets):
    leaks = {}
    for name, envs in env_sets.items():
        for env in envs:
            hidden = hidden_sentences(env)
            # the check has something to find: the anchor, stress answers included, is mostly hidden
            assert len(hidden) >= 10, (name, env.task_id)
            assert any(s in a.text for a in env.stress_answers for s in hidden), (name, env.task_id)
            found = leaked_sentences(env, "\n".join(public_strings(env)))
            if found:
                leaks[f"{name}/{env.task_id}"] = found
    assert leaks == {}


def test_dataset_rows_carry_no_hidden_sentence(env_sets):
    for envs in env_sets.values():
        for env, row in zip(envs, to_dataset(envs), strict=True):
            assert set(row) == {"task_id", "question", "evidence"}
            assert all(set(d) == {"doc_id", "text"} for d in row["evidence"])
            assert leaked_sentences(env, json.dumps(row, ensure_ascii=False)) == []


def test_a_leak_into_the_public_view_is_caught(env_sets):
    env = env_sets["release"][0]
    secret = next(s for s in hidden_sentences(env) if s in env.reference.text)
    polluted = dataclasses.replace(
        env,
        public=dataclasses.replace(env.public, question=env.public.question + " " + secret.upper()),
    )
    # the raw record still holds the clean question, so the leaked sentence is not whitelisted
    assert secret in hidden_sentences(polluted)
    assert secret in leaked_sentences(polluted, "\n".join(public_strings(polluted)))


def _tiny_env():
    record = {
        "task_id": "t1",
        "question": "Did the count rise?",
        "evidence": [
            {
                "doc_id": "D1",
                "text": "The count was taken once in 2020. It was 12.",
                "relevance_note": "Only one count exists in the packet.",
            }
        ],
        "oracle_certificate": {
            "impossibility_claim": "The count was taken once in 2020. No trend can follow from one count."
        },
        "domain": "counting",
    }
    honest = StressAnswer(
        "a1", "honest", "valid", "A single count cannot show a rise. It was 12 in 2020 only."
    )
    return Environment(
        public=PublicView(
            "t1", record["question"], (Document("D1", record["evidence"][0]["text"]),)
        ),
        kind="impossible",
        category="evidence_insufficient",
        stress_answers=(honest,),
        reference=honest,
        certificate=record["oracle_certificate"],
        record=record,
    )


def test_hidden_sentences_hand_derived():
    """Walk: relevance_note (hidden, 6 words) -> kept; certificate sentence 1 is in the evidence -> skipped;
    sentence 2 kept; "counting" (1 word) too short; honest answer: sentence 1 kept, sentence 2
    ("It was 12 in 2020 only.", 6 words) is not in the evidence verbatim -> kept. The certificate
    appears twice (raw record and env.certificate) but is listed once."""
    assert hidden_sentences(_tiny_env()) == [
        "Only one count exists in the packet.",
        "No trend can follow from one count.",
        "A single count cannot show a rise.",
        "It was 12 in 2020 only.",
    ]


def test_leaked_sentences_matching_and_reference_allowance():
    env = _tiny_env()
    prompt = "Question: did the count rise?\nReference:   a single count  CANNOT show a rise\n"
    assert leaked_sentences(env, prompt) == ["A single count cannot show a rise."]
    # the anchored judge may quote the reference answer r(e)
    assert leaked_sentences(env, prompt, allow_reference=True) == []
    assert leaked_sentences(
        env, prompt + "No trend can follow from one count", allow_reference=True
    ) == ["No trend can follow from one count."]


def test_policy_prompt_carries_no_hidden_sentence(env_sets):
    from selfplay.envs.prompt import policy_messages

    for name, envs in env_sets.items():
        for env in envs:
            prompt = "\n".join(m["content"] for m in policy_messages(env.public))
            assert env.public.question in prompt
            assert leaked_sentences(env, prompt) == [], (name, env.task_id)
