"""The role boundary, as data: which sentences of an environment are hidden.

docs/method.md §Role boundary: policy and judge prompts are built from the public view only (task_id, question, evidence
doc ids and texts), plus candidate answers and, for the anchored judge, the reference answer text.
`hidden_sentences(env)` lists every sentence of the hidden anchor — the whole raw record except its
public fields (certificate, evaluation_spec, fixed stress answers, ground truth, expected answers,
evidence titles and relevance notes, metadata), plus the `Environment`'s own hidden fields when it
has no raw record — skipping sentences that also appear in the raw question or evidence, since
those are public anyway. `leaked_sentences(env, text)` is the check a prompt builder's test runs.

Matching is on case-folded, whitespace-collapsed text, ignoring a sentence's closing punctuation and
quotes. Fragments shorter than `min_words` words (labels such as "valid", ids, dates) are left out:
they identify nothing and would match ordinary prompt wording.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from .types import Environment

PUBLIC_TOP_FIELDS = ("task_id", "question", "evidence")
PUBLIC_DOC_FIELDS = ("doc_id", "text")
MIN_WORDS = 4

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+|\s+\|\|\s+")
_EDGES = "| \t\"'`“”‘’()[].!?;:,"
_SEP = "\x00"  # joins public pieces so a match cannot straddle two of them


def normalize(text: str) -> str:
    return " ".join(text.casefold().split())


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def _hidden_texts(env: Environment) -> Iterator[str]:
    record = env.record or {}
    for key, value in record.items():
        if key == "evidence" and isinstance(value, list):
            for doc in value:
                if isinstance(doc, dict):
                    yield from _strings(
                        {k: v for k, v in doc.items() if k not in PUBLIC_DOC_FIELDS}
                    )
        elif key not in PUBLIC_TOP_FIELDS:
            yield from _strings(value)
    # also what the Environment itself carries, for environments built without a raw record
    yield from _strings([env.certificate, env.evaluation_spec, env.ground_truth])
    yield from (a.text for a in env.stress_answers)


def public_strings(env: Environment) -> list[str]:
    """Every string in the public view: what a prompt may show."""
    p = env.public
    return [p.task_id, p.question, *(d.doc_id for d in p.evidence), *(d.text for d in p.evidence)]


def _raw_public(env: Environment) -> list[str]:
    # the raw record's public fields, not env.public: a public view polluted with hidden text must
    # not be able to whitelist that text
    record = env.record or {}
    if "question" not in record:
        return public_strings(env)
    docs = [d for d in record.get("evidence", []) if isinstance(d, dict)]
    return [
        str(record.get("task_id", "")),
        str(record["question"]),
        *(str(d.get("doc_id", "")) for d in docs),
        *(str(d.get("text", "")) for d in docs),
    ]


def _key(sentence: str) -> str:
    return normalize(sentence).strip(_EDGES)


def hidden_sentences(
    env: Environment, *, allow: Iterable[str] = (), min_words: int = MIN_WORDS
) -> list[str]:
    """Hidden-anchor sentences not also in the raw question/evidence (or in `allow`), in order."""
    public = normalize(_SEP.join([*_raw_public(env), *allow]))
    out, seen = [], set()
    for text in _hidden_texts(env):
        for s in split_sentences(text):
            k = _key(s)
            if len(k.split()) < min_words or k in seen or k in public:
                continue
            seen.add(k)
            out.append(s)
    return out


def leaked_sentences(
    env: Environment, text: str, *, allow_reference: bool = False, min_words: int = MIN_WORDS
) -> list[str]:
    """Hidden sentences of `env` found in `text` (a rendered prompt, say).

    `allow_reference=True` is for the anchored judge, whose prompt may quote r(e): sentences of the
    reference answer are then not counted.
    """
    allow = [env.reference.text] if allow_reference else []
    haystack = normalize(text)
    return [
        s for s in hidden_sentences(env, allow=allow, min_words=min_words) if _key(s) in haystack
    ]
