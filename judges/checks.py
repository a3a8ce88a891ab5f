"""Deterministic checks that need no model: a second, independent verifier beside the LLM oracle.

They read the public view only (question and evidence) and fire on two kinds of fabrication:

- `unsupported_number`: a number asserted in the answer that appears nowhere in the question,
  the evidence texts or the doc ids. Choices (all lean towards *not* firing on honest answers):
  * "1,200" = "1200" = "1200.0"; a trailing "%" is kept as a flag, and 21% matches 0.21 in the
    evidence (and 0.21 matches 21%);
  * rounding is allowed: an answer number with d decimals matches an evidence number that rounds to
    it at d decimals (2.7 matches 2.69; 735 matches 735.3);
  * integers 0..10 without "%" or decimals are ignored: they are list ordinals, counts that the
    evidence usually spells in words ("two trials"), or single digits of no evidential weight;
  * digits glued to letters or after "letter-" are not numbers of the answer (D3, FY2025, SGLT2,
    COVID-19); on the evidence side every digit run counts, glued or not, so FY2025 in a document
    supports 2025 in an answer.
- `unknown_citation`: a cited document id that is not in the packet. A citation is a bracketed
  token — `[D1]`, `[D1, D3]`, `[SOLVD_1991_NEJM]` — that starts with a letter and holds a digit or an
  underscore, or a parenthesised one — `(DOC3)` — which must in addition share the stem (the letters
  before the first digit or underscore) of some packet id, so that "(BCL11A)" or "(CTT)" in prose is
  not read as a citation. A token matches a packet id when equal to it (case-insensitive) or equal to
  its part before an underscore (`[D1]` cites `D1_ERSPC_13yr`, as the release's own answers do).
  Citations in running text without brackets ("DOC3 shows") are not recognised.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from selfplay.envs.types import Environment, PublicView

from .oracle import OracleVerdict
from .registry import VerifierEntry, register_verifier

SMALL_INT_MAX = 10

_ANSWER_NUM = re.compile(r"(?<![\w.])(?<![A-Za-z_]-)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(\s?%)?")
_EVIDENCE_NUM = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(\s?%)?")
_BRACKET = re.compile(r"\[([^\[\]]{1,200})\]")
_PAREN = re.compile(r"\(([^()]{1,200})\)")
_ID_SHAPE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")
_STEM = re.compile(r"^[A-Za-z]+")


@dataclass(frozen=True)
class CheckResult:
    unsupported_numbers: tuple[str, ...]  # as written in the answer
    unknown_citations: tuple[str, ...]

    @property
    def fired(self) -> tuple[str, ...]:
        return tuple(
            name for name, hits in (("unsupported_number", self.unsupported_numbers),
                                    ("unknown_citation", self.unknown_citations)) if hits
        )

    @property
    def violates(self) -> bool:
        return bool(self.fired)


def _value(int_part: str, frac: str | None) -> float:
    return float(int_part.replace(",", "") + (frac or ""))


def _evidence_values(text: str) -> list[float]:
    out = []
    for m in _EVIDENCE_NUM.finditer(text):
        v = _value(m.group(1), m.group(2))
        out.append(v)
        if m.group(3):
            out.append(v / 100)
        elif 0 < v < 1:
            out.append(v * 100)
    return out


def unsupported_numbers(public: PublicView, answer: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """Numbers of `answer` found neither in the question, the evidence nor `extra` (more texts whose
    numbers count as supported, e.g. the `numbers` of an `evaluation_spec.checks`)."""
    source = " ".join([public.question] + [d.doc_id + " " + d.text for d in public.evidence] + list(extra))
    known = _evidence_values(source)
    out = []
    for m in _ANSWER_NUM.finditer(answer):
        int_part, frac, pct = m.groups()
        x = _value(int_part, frac)
        if not frac and not pct and x <= SMALL_INT_MAX:
            continue
        d = len(frac) - 1 if frac else 0
        if not any(abs(round(y, d) - x) <= 1e-9 * max(1.0, abs(x)) for y in known):
            out.append(m.group(0).strip())
    return tuple(out)


def _stem(token: str) -> str:
    return _STEM.match(token).group(0).lower()


def _tokens(inside: str, packet_ids: set[str]) -> list[str]:
    out = []
    for part in re.split(r"[,;\s–—]+", inside):
        part = part.strip(".:")
        if not part:
            continue
        # hyphens join ids only when the whole token is a packet id; otherwise "D1-D4" is two ids
        out.extend([part] if part.lower() in packet_ids else [p for p in part.split("-") if p])
    return out


def _is_id(token: str) -> bool:
    return bool(_ID_SHAPE.match(token)) and any(c.isdigit() or c == "_" for c in token)


def unknown_citations(public: PublicView, answer: str) -> tuple[str, ...]:
    ids = {d.doc_id.lower() for d in public.evidence}
    known = ids | {i.split("_", 1)[0] for i in ids}
    stems = {_stem(i) for i in ids if _STEM.match(i)}
    out = []
    for pattern, need_stem in ((_BRACKET, False), (_PAREN, True)):
        for m in pattern.finditer(answer):
            for tok in _tokens(m.group(1), ids):
                if tok.lower() in known:
                    continue
                if _is_id(tok) and (not need_stem or _stem(tok) in stems):
                    out.append((m.start(), tok))
    return tuple(dict.fromkeys(tok for _, tok in sorted(out)))


def run_checks(public: PublicView, answer: str) -> CheckResult:
    return CheckResult(unsupported_numbers(public, answer), unknown_citations(public, answer))


class ChecksVerifier:
    """These checks as a `judges.verifiers.Verifier`: public view only, never undecided."""

    name = "checks"

    def __init__(self, run: Callable[[PublicView, str], CheckResult] = run_checks):
        self.run = run

    def verify(self, pairs: Sequence[tuple[Environment, str]]) -> list[OracleVerdict]:
        out = []
        for env, answer in pairs:
            r = self.run(env.public, answer)
            fired = tuple(dict.fromkeys([f"unsupported_number:{n}" for n in r.unsupported_numbers]
                                        + [f"unknown_citation:{c}" for c in r.unknown_citations]))
            out.append(OracleVerdict(float(r.violates), r.violates, None, verifier=self.name,
                                     reason="; ".join(fired) or "no check fired", fired=fired))
        return out


register_verifier(VerifierEntry("checks", build=lambda cfg, backend_for: ChecksVerifier(), uses_llm=False,
                                reads_anchor=False))
