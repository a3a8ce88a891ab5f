"""Preference pairs from judged samples: per environment, the highest- against the lowest-scoring answer.

Rule (docs/method.md §Pairing rule), for the k scores of one environment:
- any score None or NaN -> no pair ("nan"): an unscored answer could be the best or the worst, so the
  extremes of the rest are not the environment's extremes;
- chosen = highest score, rejected = lowest; among equal scores the earliest sample wins as chosen
  and the latest as rejected, so the choice depends only on the scores, never on dict or sort order;
- margin = chosen - rejected; margin 0 -> no pair ("tie"), margin < δ -> no pair ("margin");
- chosen and rejected texts equal -> no pair ("identical"): DPO gets no signal from it.
- a truncated sample (no end-of-turn within `max_new_tokens`) is left out of pairing altogether, never
  kept with an end token appended: TRL ends every chosen/rejected text with EOS, so a cut-off answer
  would teach the policy to stop where it never stopped. Pairs are formed among the finished samples;
  fewer than two finished -> no pair ("truncated").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

DROP_REASONS = ("nan", "tie", "margin", "identical", "truncated", "subsampled")


@dataclass(frozen=True)
class Pair:
    task_id: str
    prompt: str  # the rendered policy prompt the answers were sampled from
    chosen: str
    rejected: str
    chosen_index: int  # sample index within the environment's k answers
    rejected_index: int
    chosen_score: float
    rejected_score: float

    @property
    def margin(self) -> float:
        return self.chosen_score - self.rejected_score


@dataclass(frozen=True)
class PairCounts:
    envs: int
    pairs: int
    dropped: dict[str, int]  # reason -> environments dropped for it (every reason in DROP_REASONS)
    found: int | None = None  # pairs found before `subsample` kept `pairs` of them; None: all were kept

    def as_metrics(self) -> dict[str, float]:
        out = {"pairs/envs": float(self.envs), "pairs/kept": float(self.pairs),
               "pairs/found": float(self.pairs if self.found is None else self.found)}
        out.update({f"pairs/dropped_{r}": float(n) for r, n in self.dropped.items()})
        out["pairs/kept_rate"] = self.pairs / self.envs if self.envs else 0.0
        return out


def _missing(score: float | None) -> bool:
    return score is None or math.isnan(score)


def select_pair(scores: Sequence[float | None], margin: float) -> tuple[int, int] | str:
    """(chosen index, rejected index), or the reason there is no pair (see the module docstring)."""
    if len(scores) < 2:
        raise ValueError(f"need at least two scores to pair, got {len(scores)}")
    if any(_missing(s) for s in scores):
        return "nan"
    hi = max(range(len(scores)), key=lambda i: (scores[i], -i))
    lo = min(range(len(scores)), key=lambda i: (scores[i], -i))
    gap = scores[hi] - scores[lo]
    if gap == 0:
        return "tie"
    if gap < margin:
        return "margin"
    return hi, lo


def build_pairs(
    task_ids: Sequence[str],
    prompts: Sequence[str],
    answers: Sequence[Sequence[str]],
    scores: Sequence[Sequence[float | None]],
    margin: float,
    truncated: Sequence[Sequence[bool]] | None = None,
) -> tuple[list[Pair], PairCounts, list[str | None]]:
    """One pair per environment where the rule allows; also the drop reason per environment (None = kept).
    `truncated[e][i]` marks sample i of environment e as cut off (default: none is)."""
    if not (len(task_ids) == len(prompts) == len(answers) == len(scores)):
        raise ValueError("task_ids, prompts, answers and scores must have one entry per environment")
    truncated = truncated if truncated is not None else [[False] * len(a) for a in answers]
    pairs, reasons = [], []
    for tid, prompt, texts, env_scores, cut in zip(task_ids, prompts, answers, scores, truncated, strict=True):
        if not (len(texts) == len(env_scores) == len(cut)):
            raise ValueError(f"{tid}: {len(texts)} answers, {len(env_scores)} scores, {len(cut)} truncation flags")
        keep = [i for i in range(len(texts)) if not cut[i]]
        picked = "truncated" if len(keep) < 2 else select_pair([env_scores[i] for i in keep], margin)
        if isinstance(picked, tuple):
            picked = (keep[picked[0]], keep[picked[1]])
        if isinstance(picked, tuple) and texts[picked[0]] == texts[picked[1]]:
            picked = "identical"
        if isinstance(picked, str):
            reasons.append(picked)
            continue
        hi, lo = picked
        pairs.append(Pair(tid, prompt, texts[hi], texts[lo], hi, lo, float(env_scores[hi]), float(env_scores[lo])))
        reasons.append(None)
    dropped = Counter(r for r in reasons if r is not None)
    counts = PairCounts(envs=len(task_ids), pairs=len(pairs), dropped={r: dropped.get(r, 0) for r in DROP_REASONS})
    return pairs, counts, reasons


def subsample(pairs: list[Pair], counts: PairCounts, reasons: list[str | None], task_ids: Sequence[str],
              limit: int | None, seed: int) -> tuple[list[Pair], PairCounts, list[str | None]]:
    """At most `limit` of `pairs`, drawn without replacement by `seed` over all of them (an environment
    weighs by its number of pairs), kept in their original order so the DPO data order stays the
    trainer's own shuffle. An environment that loses every pair is dropped as "subsampled", so the
    counts still add up to the environments."""
    if limit is None or len(pairs) <= limit:
        return pairs, counts, reasons
    keep = sorted(np.random.default_rng(seed).choice(len(pairs), size=limit, replace=False))
    kept = [pairs[i] for i in keep]
    left = {p.task_id for p in kept}
    reasons = [r if r is not None or tid in left else "subsampled" for tid, r in zip(task_ids, reasons, strict=True)]
    dropped = dict(counts.dropped, subsampled=sum(r == "subsampled" for r in reasons))
    return kept, replace(counts, pairs=limit, found=counts.pairs, dropped=dropped), reasons


def all_pairs(
    task_ids: Sequence[str],
    prompts: Sequence[str],
    answers: Sequence[Sequence[str]],
    scores: Sequence[Sequence[float | None]],
    margin: float,
) -> tuple[list[Pair], PairCounts, list[str | None]]:
    """Every (higher, lower) pair of each environment whose scores differ by at least `margin` (and
    by more than 0), for candidates that are labelled texts rather than samples (the offline label
    rewards, judges.oracle_reward): a label ties all answers of one class, so a single extreme pair
    would train on the same two texts every iteration. Unscored answers form no pair; an environment
    without a pair is dropped with the reason `build_pairs` would give."""
    if not (len(task_ids) == len(prompts) == len(answers) == len(scores)):
        raise ValueError("task_ids, prompts, answers and scores must have one entry per environment")
    pairs, reasons = [], []
    for tid, prompt, texts, env_scores in zip(task_ids, prompts, answers, scores, strict=True):
        if len(texts) != len(env_scores):
            raise ValueError(f"{tid}: {len(texts)} answers, {len(env_scores)} scores")
        scored = [i for i, s in enumerate(env_scores) if not _missing(s)]
        found = [(i, j) for i in scored for j in scored
                 if env_scores[i] - env_scores[j] > 0 and env_scores[i] - env_scores[j] >= margin
                 and texts[i] != texts[j]]
        if not found:
            reasons.append("nan" if len(scored) < 2 else "tie" if len({env_scores[i] for i in scored}) == 1
                           else "margin")
            continue
        pairs += [Pair(tid, prompt, texts[i], texts[j], i, j, float(env_scores[i]), float(env_scores[j]))
                  for i, j in found]
        reasons.append(None)
    dropped = Counter(r for r in reasons if r is not None)
    counts = PairCounts(envs=len(task_ids), pairs=len(pairs), dropped={r: dropped.get(r, 0) for r in DROP_REASONS})
    return pairs, counts, reasons
