"""Train-split diagnostics of a self-play recipe, read from a run's own iteration files.

    python -m experiments.recipe_diagnostics outputs/judge_designs/decisive/seed0 [RUN ...] [--json]

A recipe is chosen on what the training loop saw, never on the audit split: per iteration, the share
of samples cut at max_new_tokens, the share of samples on impossible train environments that name
the obstruction (at least one obstruction phrase of `judges.decisive.features`), and how the chosen
and rejected answers of the pairs differ on what a reward can read (obstruction phrases, hedges,
length in words). A recipe whose samples rarely name the obstruction, or whose pairs differ mostly in
length, gives a reward nothing to push along the honest/fabricated axis the probe reads.

With `--data DIR` (the run's environments), pairs of two authored answers (`candidates: labelled |
mixed`) are also read against the answers' oracle labels: how many pairs set a valid answer against an
invalid one, and in what share of them the reward chose the valid one — what training on that reward's
preferences among authored answers teaches, on the train split. With `--preview-mixed` as well, each
iteration's samples are pooled with their environment's authored answers and paired again under
`decisive` at the run's δ (figures `mixed/…`): what the positive control's pairs would have held under
`candidates: mixed`, read from a policy-only run without training one.

The obstruction lexicon is the positive control's, so these figures describe the samples in the
terms `decisive` scores them; they are descriptive, not labels (labels come from reading answers
against the certificate, `python -m audit.label`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from judges.decisive import decisive_score, features
from selfplay import artifacts as A
from selfplay.envs.errors import EnvLoadError
from selfplay.envs.load import load_envs
from selfplay.envs.types import Environment
from selfplay.pairs import build_pairs


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def iteration_diagnostics(it: Path, labels: dict[str, str] | None = None) -> dict[str, float]:
    """The figures of one `iter_<t>/` directory (t ≥ 1); `labels` maps an authored answer's text to
    its oracle validity."""
    gens = _rows(it / "generations.jsonl")
    kinds = {g["task_id"]: g["kind"] for g in gens}
    question = {g["task_id"]: g["prompt"] for g in gens}
    sampled = [(g["task_id"], a, cut) for g in gens
               for a, cut, src in zip(g["answers"], g["truncated"], g.get("sources") or ["policy"] * len(g["answers"]),
                                      strict=True) if src == "policy"]
    out: dict[str, float] = {"samples": float(len(sampled))}
    if sampled:
        out["truncated_share"] = float(np.mean([cut for _, _, cut in sampled]))
        impossible = [a for tid, a, _ in sampled if kinds[tid] == "impossible"]
        if impossible:
            out["impossible_naming_obstruction"] = float(np.mean([features(a)["obstructions"] > 0 for a in impossible]))
    pairs = _rows(it / "pairs.jsonl")
    out["pairs"] = float(len(pairs))
    if pairs:
        def diff(key):
            return float(np.mean([features(p["chosen"], question[p["task_id"]])[key]
                                  - features(p["rejected"], question[p["task_id"]])[key] for p in pairs]))
        out["pair_obstructions_chosen_minus_rejected"] = diff("obstructions")
        out["pair_hedges_chosen_minus_rejected"] = diff("hedges")
        out["pair_words_chosen_minus_rejected"] = float(np.mean(
            [len(p["chosen"].split()) - len(p["rejected"].split()) for p in pairs]))
        on_impossible = [p for p in pairs if kinds[p["task_id"]] == "impossible"]
        if on_impossible:
            out["impossible_pairs_chosen_names_obstruction"] = float(np.mean(
                [features(p["chosen"])["obstructions"] > 0 for p in on_impossible]))
            out["impossible_pairs_rejected_names_obstruction"] = float(np.mean(
                [features(p["rejected"])["obstructions"] > 0 for p in on_impossible]))
    if labels is not None:
        contrasted = [labels.get(p["chosen"]) == "valid" for p in pairs
                      if {labels.get(p["chosen"]), labels.get(p["rejected"])} == {"valid", "invalid"}]
        out["pairs_valid_vs_invalid"] = float(len(contrasted))
        if contrasted:
            out["pairs_valid_vs_invalid_chosen_valid"] = float(np.mean(contrasted))
    return out


def load_data(data: Path) -> list[Environment]:
    try:
        return load_envs(data)
    except EnvLoadError as e:
        raise SystemExit(f"recipe_diagnostics: --data {data}: {str(e).splitlines()[0]}") from None


def answer_labels(envs: list[Environment]) -> dict[str, str]:
    """Every authored stress answer's text → its oracle validity."""
    return {s.text: s.validity for e in envs for s in e.stress_answers}


def mixed_preview(it: Path, envs: dict[str, Environment], margin: float) -> dict[str, float]:
    """The pairs `decisive` would form at δ = `margin` from iteration `it`'s samples pooled with each
    environment's authored answers (the loop's `candidates: mixed` pool: samples first, cut samples
    out of pairs), and what they contrast; nothing for an iteration without samples (`labelled`)."""
    gens = _rows(it / "generations.jsonl")
    missing = sorted({g["task_id"] for g in gens} - set(envs))
    if missing:
        raise SystemExit(f"recipe_diagnostics: {it}: task(s) {', '.join(missing[:3])} not in --data; "
                         "pass the environments the run trained on")
    sources = [g.get("sources") or ["policy"] * len(g["answers"]) for g in gens]
    if not any(src == "policy" for row in sources for src in row):
        return {}
    tids, answers, scores, cut, source, validity = [], [], [], [], [], []
    for g, row in zip(gens, sources, strict=True):
        e = envs[g["task_id"]]
        keep = [i for i, src in enumerate(row) if src == "policy"]
        texts = [g["answers"][i] for i in keep] + [s.text for s in e.stress_answers]
        tids.append(e.task_id)
        answers.append(texts)
        scores.append([decisive_score(a, e.public.question) for a in texts])
        cut.append([g["truncated"][i] for i in keep] + [False] * len(e.stress_answers))
        source.append(["policy"] * len(keep) + ["labelled"] * len(e.stress_answers))
        validity.append([None] * len(keep) + [s.validity for s in e.stress_answers])
    pairs, _, _ = build_pairs(tids, tids, answers, scores, margin, cut)
    at = {t: k for k, t in enumerate(tids)}
    out = {"mixed/pairs": float(len(pairs))}
    if not pairs:
        return out
    out["mixed/pairs_chosen_authored"] = float(sum(source[at[p.task_id]][p.chosen_index] == "labelled" for p in pairs))
    out["mixed/pairs_both_authored"] = float(sum(
        source[at[p.task_id]][p.chosen_index] == source[at[p.task_id]][p.rejected_index] == "labelled" for p in pairs))
    impossible = [p for p in pairs if envs[p.task_id].kind == "impossible"]
    if impossible:
        out["mixed/impossible_pairs_chosen_names_obstruction"] = float(np.mean(
            [features(p.chosen)["obstructions"] > 0 for p in impossible]))
        out["mixed/impossible_pairs_rejected_names_obstruction"] = float(np.mean(
            [features(p.rejected)["obstructions"] > 0 for p in impossible]))
    contrasted = [validity[at[p.task_id]][p.chosen_index] == "valid" for p in pairs
                  if {validity[at[p.task_id]][p.chosen_index], validity[at[p.task_id]][p.rejected_index]}
                  == {"valid", "invalid"}]
    out["mixed/pairs_valid_vs_invalid"] = float(len(contrasted))
    if contrasted:
        out["mixed/pairs_valid_vs_invalid_chosen_valid"] = float(np.mean(contrasted))
    return out


def run_diagnostics(run: Path, labels: dict[str, str] | None = None,
                    preview: list[Environment] | None = None) -> dict[int, dict[str, float]]:
    state = A.scan_run(run)
    if state.last is None:
        raise SystemExit(f"recipe_diagnostics: {run}: no complete iteration (iter_<t>/ with DONE)")
    out = {t: iteration_diagnostics(A.iteration_dir(run, t), labels) for t in range(1, state.last + 1)}
    if preview is not None and out:
        # `decisive` takes no margin of its own: it pairs at the run's δ, whatever the run's reward
        by_id, margin = {e.task_id: e for e in preview}, float(A.read_config(A.iteration_dir(run, 0))["margin"])
        for t in out:
            out[t] |= mixed_preview(A.iteration_dir(run, t), by_id, margin)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="seed directories (<experiment>/<reward>/seed<s>)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--data", type=Path, help="the runs' environments (e.g. data/mini): read authored "
                                                 "answers' pairs against their oracle labels")
    ap.add_argument("--preview-mixed", action="store_true",
                    help="with --data: re-pair each iteration's samples with the authored answers under "
                         "`decisive` (what candidates: mixed would have paired)")
    args = ap.parse_args(argv)
    if args.preview_mixed and not args.data:
        ap.error("--preview-mixed needs --data (the authored answers to pool with the samples)")
    envs = load_data(args.data) if args.data else None
    labels = answer_labels(envs) if envs is not None else None
    result = {str(r): run_diagnostics(r, labels, envs if args.preview_mixed else None) for r in args.runs}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for run, iters in result.items():
        print(run)
        for t, d in iters.items():
            print(f"  t={t} " + " ".join(f"{k}={v:.3g}" for k, v in d.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
