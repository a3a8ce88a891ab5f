"""Verifier calibration: each verifier against answers whose validity is known.

    python experiments/judge_eval/calibration.py                       # spec, checks, any everywhere; llm on the release
    python experiments/judge_eval/calibration.py --labelled F1.jsonl F2.jsonl --llm-sets release labelled
    python experiments/judge_eval/calibration.py --fresh experiments/labelled/fresh_v2.jsonl

Sets: `stress` (the fixed stress answers of every data/mini environment, r(e) included, release
labels), `labelled` (answers the policy really wrote, labelled by reading: one JSON object per line
with task_id, text, label; `audit.calibration.read_labelled`), `fresh` (answers labelled blind with
`python -m audit.label` after the verifiers were last changed, so no verifier was fitted to them:
the held-out measure, never pooled with `labelled`), `release` (the stress answers of the shared
release records). Verifiers: `spec`, `checks`, `any` (spec + checks) and the LLM oracle `llm`
(`--llm-model`, adapter off), all built by `judges.verifiers.build_verifier`. The counts and rates
are `audit.calibration.confusion`: partially_valid answers and undecided verdicts are left out of
the rates and counted; `spec` on a record without `evaluation_spec.checks` is undecided ("not
available"), never a pass. Writes calibration.json and calibration.md next to this file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from audit import metrics as M  # noqa: E402
from audit.calibration import confusion, read_labelled  # noqa: E402
from audit.records import LABELLED, ORACLE, STRESS, AnswerRow  # noqa: E402
from judges.oracle import OracleVerdict  # noqa: E402
from judges.spec import NOT_AVAILABLE  # noqa: E402
from judges.verifiers import OracleConfig, Verifier, build_verifier  # noqa: E402
from selfplay.envs import load_envs  # noqa: E402
from selfplay.envs.types import Environment  # noqa: E402

HERE = Path(__file__).resolve().parent
VERIFIERS = ("spec", "checks", "any", "llm")
SETS = ("stress", "labelled", "fresh", "release")
ON_POLICY = ("labelled", "fresh")  # sets of answers a policy wrote (rows of source LABELLED)
MODEL_FREE = {"spec": OracleConfig(name="spec", verifiers=()),
              "checks": OracleConfig(name="checks", verifiers=()),
              "any": OracleConfig(name="any", verifiers=("spec", "checks"))}

# (environment, text, label) — one answer of a calibration set
Item = tuple[Environment, str, str]


def stress_items(envs: Sequence[Environment]) -> list[Item]:
    return [(e, s.text, s.validity) for e in envs for s in e.stress_answers]


def labelled_items(paths: Sequence[Path], envs: Sequence[Environment]) -> list[Item]:
    by_id = {e.task_id: e for e in envs}
    out = []
    for path in paths:
        for i, row in enumerate(read_labelled(path), 1):
            env = by_id.get(row["task_id"])
            if env is None:
                raise ValueError(f"{path}: answer {i}: task_id {row['task_id']!r} is not an environment of the mini data")
            out.append((env, row["text"], row["label"]))
    return out


def measure(items: Sequence[Item], verifier: Verifier, source: str = STRESS) -> dict[str, Any]:
    """`confusion` of one verifier on `items`, plus how many verdicts were "not available"."""
    verdicts = verifier.verify([(env, text) for env, text, _ in items])
    rows = [AnswerRow(task_id=env.task_id, kind=env.kind, source=source, answer_id=str(i), text=text,
                      score=None, ref_score=None, label=label,
                      accepts={ORACLE: None if v.violates is None else not v.violates})
            for i, ((env, text, label), v) in enumerate(zip(items, verdicts, strict=True))]
    out = confusion(rows, ORACLE)
    # spec's "not available" as a member of `any` reaches the combined verdict's parts
    out["n_not_available"] = sum(_spec_not_available(v) for v in verdicts)
    return out


def _spec_not_available(v: OracleVerdict) -> bool:
    """The spec verifier (the verdict itself, or a member of `any`) had no `checks` to read."""
    return any(p.verifier == "spec" and p.violates is None and p.error == NOT_AVAILABLE
               for p in (v, *v.parts))


def label_counts(items: Sequence[Item]) -> dict[str, int]:
    return {lab: sum(x[2] == lab for x in items) for lab in (M.VALID, M.INVALID, M.PARTIAL)}


def calibrate(sets: Mapping[str, Sequence[Item]], verifiers: Mapping[str, Callable[[], Verifier]],
              llm_sets: Sequence[str] = ()) -> dict[str, Any]:
    """set -> {"labels": counts, "verifiers": {name: confusion or None (not run)}}."""
    out = {}
    for name, items in sets.items():
        res = {}
        for v, make in verifiers.items():
            run = v != "llm" or name in llm_sets
            res[v] = measure(items, make(), LABELLED if name in ON_POLICY else STRESS) if run and items else None
        out[name] = {"labels": label_counts(items), "verifiers": res}
    return out


def _rate(share: float, k: int, n: int) -> str:
    """The share, its counts and a 95% Wilson interval (scipy)."""
    if math.isnan(share):
        return "–"
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"{share:.2f} ({k}/{n}) [{ci.low:.2f}, {ci.high:.2f}]"


def table(result: Mapping[str, Any]) -> str:
    head = ("| set | verifier | agreement | accept-invalid | reject-valid | undecided | n valid | "
            "n invalid | n partially_valid (left out) | note |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, s in result.items():
        for v, c in s["verifiers"].items():
            if c is None:
                lines.append(f"| {name} | {v} | (not run) | | | | | | | |")
                continue
            note = f"not available on {c['n_not_available']} answers (undecided)" if c["n_not_available"] else ""
            agr = "–" if math.isnan(c["agreement"]) else f"{c['agreement']:.2f}"
            lines.append("| " + " | ".join([
                name, v, agr,
                _rate(c["accept_invalid"], c["n_accept_invalid"], c["n_invalid"]),
                _rate(c["reject_valid"], c["n_reject_valid"], c["n_valid"]),
                f"{c['n_undecided']}/{c['n_answers']}", str(c["n_valid"]), str(c["n_invalid"]),
                str(c["n_partial"]), note]) + " |")
    return "\n".join(lines)


def _json(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _json(v) for k, v in x.items()}
    return x


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mini", type=Path, default=ROOT / "data/mini")
    ap.add_argument("--labelled", type=Path, nargs="*", default=[ROOT / "data/mini/labelled_answers.jsonl"],
                    help="labelled on-policy answers (one or more JSONL files)")
    ap.add_argument("--fresh", type=Path, nargs="*", default=[],
                    help="answers labelled after the verifiers last changed (held out; reported apart)")
    ap.add_argument("--release", type=Path, default=ROOT.parent / "shared/impossible_rubrics")
    ap.add_argument("--llm-sets", nargs="*", default=["release"], choices=SETS,
                    help="sets the LLM oracle runs on (CPU cost); none: --llm-sets with no value")
    ap.add_argument("--llm-model", default="smollm2-135m", help="a conf/policy name; adapter off")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)

    mini = load_envs(args.mini)
    missing = [str(p) for p in [*args.labelled, *args.fresh] if not p.is_file()]
    if missing:
        ap.error(f"labelled file(s) not found: {', '.join(missing)}")
    sets = {"stress": stress_items(mini), "labelled": labelled_items(args.labelled, mini),
            "fresh": labelled_items(args.fresh, mini), "release": stress_items(load_envs(args.release))}
    if not args.fresh:
        del sets["fresh"]
    verifiers: dict[str, Callable[[], Verifier]] = {k: (lambda c=c: build_verifier(c)) for k, c in MODEL_FREE.items()}
    if args.llm_sets:
        from selfplay.models import load_backend

        backend: list[Any] = []  # loaded once, on first use

        def backend_for(model: str):
            if not backend:
                backend.append(load_backend(model, backend="hf", device=args.device, batch_size=args.batch_size))
            return backend[0]

        llm_cfg = OracleConfig(name="llm", verifiers=(), model=args.llm_model)
        verifiers["llm"] = lambda: build_verifier(llm_cfg, backend_for=backend_for)
    result = calibrate(sets, verifiers, args.llm_sets)
    meta = {"command": "python experiments/judge_eval/calibration.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "mini": str(args.mini), "labelled": [str(p) for p in args.labelled], "fresh": [str(p) for p in args.fresh],
            "release": str(args.release),
            "llm_model": args.llm_model if args.llm_sets else None, "llm_sets": list(args.llm_sets)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration.json").write_text(json.dumps(_json({"meta": meta, "sets": result}), indent=2) + "\n")
    labels = "; ".join(f"{k}: {s['labels'][M.VALID]} valid, {s['labels'][M.INVALID]} invalid, "
                       f"{s['labels'][M.PARTIAL]} partially_valid" for k, s in result.items())
    md = f"{table(result)}\n\nAnswers per set — {labels}.\n"
    (args.out / "calibration.md").write_text(md)
    print(md)
    return result


if __name__ == "__main__":
    main()
