"""Verdicts from next-token probabilities: no free text is parsed on the scoring path.

- Verdict tokens: each label ("A", "1", "Yes", ...) must be one token of the tokenizer. Its
  probability is the sum over the bare token and, when that is also a single distinct token, the
  space-prefixed one (" A"), because the prompt ends with a prefill such as "Verdict:" after which
  BPE vocabularies put the letter with its leading space. Where a label has no single-token spaced
  form (SmolLM2 and other digit-splitting tokenizers write " 4" as " " + "4"), `prefill` ends the
  prompt with that space, so the label is again the very next token.
- Pointwise (G-Eval): E = Σ_k k·p_k / Σ_k p_k over the score tokens k = 1..5, mapped to [0, 1] as
  (E − 1) / 4.
- Pairwise: for one presentation order, P(candidate wins) = p_cand / (p_A + p_B), where p_cand is the
  probability of the candidate's letter (`label_share`). The score is the mean over both orders; the
  two order scores and whether they prefer the same answer are kept.
- Yes/No (the LLM oracle): P(violates) = p_Yes / (p_Yes + p_No), the same `label_share`.
- Unusable probabilities give `None` with a reason: non-finite values, or total mass on the verdict
  tokens below `min_mass` (default `MIN_VERDICT_MASS`). Below that floor the model is not answering
  the verdict question at all (it wants to start some other text), and renormalising a handful of
  stray probability into a confident-looking score would manufacture a verdict. 1e-3 keeps small
  models scoreable when they put most mass elsewhere yet still rejects near-zero mass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MIN_VERDICT_MASS = 1e-3


@dataclass(frozen=True)
class Reading:
    """One order (or one pointwise prompt): label probabilities and the value derived from them."""

    probs: dict[str, float]
    value: float | None
    error: str | None


def verdict_token_ids(tokenizer, labels: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """label -> token ids whose probabilities are summed for it. Raises ValueError when a label is not
    a single token or two labels share an id."""
    out: dict[str, tuple[int, ...]] = {}
    seen: dict[int, str] = {}
    for label in labels:
        bare = tokenizer.encode(label, add_special_tokens=False)
        if len(bare) != 1:
            raise ValueError(
                f"verdict label {label!r} is {len(bare)} tokens for this tokenizer ({bare}); "
                f"judges need single-token labels"
            )
        ids = [bare[0]]
        spaced = tokenizer.encode(" " + label, add_special_tokens=False)
        if len(spaced) == 1 and spaced[0] != bare[0]:
            ids.append(spaced[0])
        for i in ids:
            if i in seen:
                raise ValueError(f"verdict labels {seen[i]!r} and {label!r} share token id {i}")
            seen[i] = label
        out[label] = tuple(ids)
    return out


def prefill(tokenizer, text: str, labels: Sequence[str]) -> str:
    """The assistant prefix after which the verdict label is the next token: `text` (e.g. "Score:")
    when every label has a single-token spaced form, else `text + " "`."""
    spaced_ok = all(len(tokenizer.encode(" " + lab, add_special_tokens=False)) == 1 for lab in labels)
    return text if spaced_ok else text + " "


def flat_ids(ids_by_label: Mapping[str, tuple[int, ...]]) -> list[int]:
    return [i for ids in ids_by_label.values() for i in ids]


def label_probs(logprobs_row: np.ndarray, ids_by_label: Mapping[str, tuple[int, ...]]) -> dict[str, float]:
    """Row of log p over `flat_ids(ids_by_label)` -> per-label probability (variants summed)."""
    row = np.exp(np.asarray(logprobs_row, dtype=float))
    out, k = {}, 0
    for label, ids in ids_by_label.items():
        out[label] = float(row[k : k + len(ids)].sum())
        k += len(ids)
    return out


def _usable(probs: Mapping[str, float], min_mass: float) -> str | None:
    vals = list(probs.values())
    if not all(math.isfinite(v) for v in vals):
        return f"non-finite verdict probabilities {dict(probs)}"
    mass = sum(vals)
    if mass < min_mass:
        return f"verdict-token mass {mass:.3g} below floor {min_mass:g}"
    return None


def pointwise(probs: Mapping[str, float], min_mass: float = MIN_VERDICT_MASS) -> Reading:
    """G-Eval expected score over labels "1".."n", mapped to [0, 1]."""
    error = _usable(probs, min_mass)
    if error:
        return Reading(dict(probs), None, error)
    levels = np.array([float(k) for k in probs])
    p = np.array(list(probs.values()))
    expected = float((levels * p).sum() / p.sum())
    lo, hi = levels.min(), levels.max()
    return Reading(dict(probs), (expected - lo) / (hi - lo), None)


def label_share(probs: Mapping[str, float], label: str, min_mass: float = MIN_VERDICT_MASS) -> Reading:
    """P(label) renormalised over the verdict labels read: p[label] / Σ_l p[l].

    A pairwise order's P(candidate wins) is the share of the candidate's letter ("A" when it is shown
    first, "B" when second); the LLM oracle's P(violates) is the share of "Yes" against "No"."""
    error = _usable(probs, min_mass)
    if error:
        return Reading(dict(probs), None, error)
    return Reading(dict(probs), probs[label] / sum(probs.values()), None)


def combine_orders(first: Reading, second: Reading) -> tuple[float | None, str | None, bool | None]:
    """Mean of both orders' P(candidate wins); None when either order is unusable (no half-verdicts).
    Swap-consistent = both orders fall on the same side of ½ (both exactly ½ counts as consistent)."""
    errors = [f"order {name}: {r.error}" for name, r in (("ab", first), ("ba", second)) if r.error]
    if errors:
        return None, "; ".join(errors), None
    a, b = first.value, second.value
    return (a + b) / 2, None, bool(np.sign(a - 0.5) == np.sign(b - 0.5))
