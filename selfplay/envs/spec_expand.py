"""The macros of an `evaluation_spec.checks` pattern (data/mini/schema/checks.md, "Negation" and
"Macros"): `{NEG}`, `{STOP}`, `{GAP:n}` and `{UNATTRIBUTED}`, and the cue lists they are built from,
once for every record. `expand` is read both where a record is validated (selfplay.envs.checks_schema)
and where its patterns are matched (judges.spec)."""

from __future__ import annotations

import re

# A forbidden / verdict match behind one of these in its clause is not asserted.
NEGATION_CUES = (
    "not", "no", "none", "nothing", "never", "cannot", "unable", "without", "whether", "if", "nor", "neither",
    "unproven", "unsupported", "unclear", "unknown", r"fail(?:s|ed)? to", "rather than", "instead of",
)
# Words that, like `. ; : ! ? ,`, start a new clause.
CONTRAST_WORDS = ("but", "although", "though", "while", "whereas", "however", "so", "yet")
# "D3 claims VX-2 extends ..." reports a claim rather than making it; one of these phrases, then one
# of `REPORTED_OBJECTS`, directly before a match guarded by {UNATTRIBUTED} voids it.
REPORTING = (
    "says", "said", "say", "claims", "claimed", "claim", "promises", "advertises", "calls", "according to",
    "suggests", "suggest", "describes", "argues", "believes", "assert", "asserts", "places", "puts", "gives",
    "quotes", "claim that", "says that", "claims that", "said that", "reports that", "reported that",
    "report that", "argues that", "asserts that",
)
REPORTED_OBJECTS = ("", "the ", "its ", "their ")

_NEG = r"(?:\b(?:" + "|".join(NEGATION_CUES) + r")\b|n't\b)"
_CONTRAST = r"\b(?:" + "|".join(CONTRAST_WORDS) + r")\b"
_STOP = f"(?:{_NEG}|{_CONTRAST})"
NEGATION = re.compile(_NEG, re.IGNORECASE)
# a '.' or ',' between digits (2.5, 1,200) is part of a number, not a clause boundary
BOUNDARY = re.compile(r"[;:!?]|(?<!\d)[.,]|[.,](?!\d)|" + _CONTRAST, re.IGNORECASE)
# The macros a pattern may use, expanded before it is compiled; {GAP:n} is `_gap`.
MACROS = {
    "NEG": _NEG,  # one negation cue
    "STOP": _STOP,  # a negation cue or a contrast word
    # zero-width: not directly after a reporting phrase (Python look-behinds are fixed-width: one each)
    "UNATTRIBUTED": "".join(f"(?<!{r} {o})" for r in REPORTING for o in REPORTED_OBJECTS),
}
_MACRO = re.compile(r"\{([A-Z_]+)(?::(\d+))?\}")

def _gap(n: str) -> str:
    """{GAP:n}: 0..n characters inside one clause (a '.' or ',' between digits belongs to a number)
    that cross no negation cue and no contrast word."""
    return r"(?:(?!" + _STOP + r")(?:[^.;:,!?]|(?<=\d)[.,](?=\d))){0," + n + "}"


def expand(pattern: str) -> str:
    """`pattern` with its macros replaced by their regular expressions (ValueError on an unknown one)."""
    def one(m: re.Match) -> str:
        name, n = m.group(1), m.group(2)
        if name == "GAP" and n is not None:
            return _gap(n)
        if name in MACROS and n is None:
            return MACROS[name]
        known = ", ".join(["{GAP:n}"] + [f"{{{k}}}" for k in MACROS])
        raise ValueError(f"unknown macro {m.group(0)!r} (known: {known})")
    return _MACRO.sub(one, pattern)
