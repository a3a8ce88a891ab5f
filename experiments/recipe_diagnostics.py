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
preferences among authored answers teaches, on the train split.

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

from judges.decisive import features
from selfplay import artifacts as A


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


def answer_labels(data: Path) -> dict[str, str]:
    """Every authored stress answer's text → its oracle validity, over the environments in `data`."""
    from selfplay.envs.errors import EnvLoadError
    from selfplay.envs.load import load_envs

    try:
        envs = load_envs(data)
    except EnvLoadError as e:
        raise SystemExit(f"recipe_diagnostics: --data {data}: {str(e).splitlines()[0]}") from None
    return {s.text: s.validity for e in envs for s in e.stress_answers}


def run_diagnostics(run: Path, labels: dict[str, str] | None = None) -> dict[int, dict[str, float]]:
    state = A.scan_run(run)
    if state.last is None:
        raise SystemExit(f"recipe_diagnostics: {run}: no complete iteration (iter_<t>/ with DONE)")
    return {t: iteration_diagnostics(A.iteration_dir(run, t), labels) for t in range(1, state.last + 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="seed directories (<experiment>/<reward>/seed<s>)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--data", type=Path, help="the runs' environments (e.g. data/mini): read authored "
                                                 "answers' pairs against their oracle labels")
    args = ap.parse_args(argv)
    labels = answer_labels(args.data) if args.data else None
    result = {str(r): run_diagnostics(r, labels) for r in args.runs}
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
