"""`python -m audit.report DIR`: an audited experiment as `report.md` and PNG figures.

    python -m audit.gap ckpt=outputs/demo          # writes outputs/demo/audit.json
    python -m audit.report outputs/demo            # writes outputs/demo/report.md, figures/*.png

DIR holds `audit.json` (an audit of the whole experiment), or audits of its parts below it (a
reward or seed dir audited on its own); those are merged, and one reward × seed audited twice is an
error rather than a silent choice. `--out results/x/report.md --data` also writes the merged
`audit.json` and `audit.csv` beside the report, so that runs audited apart are kept as one document;
`--include results/x/audit.json` merges such a document back in, so that runs audited on another
machine join the ones audited here (DIR must not hold their audits too; their training table rows
come from the `metrics.json` beside each checkpoint, so runs whose checkpoints are gone have none).

The report opens with the oracle calibration: every verifier's agreement, accept-invalid and
reject-valid rates on the labelled answers (audit.calibration), the gate's verdict with its reasons
and any warning. Then one table per metric: a row per reward, a column per iteration, each cell the
mean over seeds with the t interval over seeds; where a reward has a single seed the cell is that
seed's value with its environment-bootstrap interval, marked `*`; `unverified` where the gate
withholds an oracle-dependent number. Then the paired comparison of rewards on the final iteration:
for each reward against the audit's baseline (`baseline=`, the null `random` by default; else
`rubric`; else the first reward, said so), the difference in VA-Gap on impossible environments with
a paired environment bootstrap (both rewards resampled by the same draw of environments, pooled
over the seeds both ran, so the environment is the unit and its samples are never treated as
independent), a two-sided bootstrap p-value and Bonferroni correction over the comparisons. Last,
the over-optimisation curve: apparent and verified success on impossible environments against √KL(π_t ‖ π_0).
`--against decisive --against anchored` adds every reward's headline probe margin minus each named
reward's (a design against the positive control, or against another design), paired as the baseline's.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .contrasts import contrast_lines, pairwise_lines
from .figures import write_figures
from .power_report import power_section
from .report_compare import comparison_table, comparisons
from .report_load import ReportError, load_dir
from .report_sections import calibration_section, kl_section, probe_section, train_section
from .report_tables import metric_names, metric_table, metric_title
from .results import dumps, json_safe, to_csv


def probe_set_lines(doc: Mapping[str, Any]) -> list[str]:
    """The probe on each second held-out set (`probe_data`, audit.probe_sets)."""
    from .probe_sets import report_lines

    return report_lines(doc)


def power_lines(doc: Mapping[str, Any]) -> list[str]:
    """The power section (audit.power): what this design could detect."""
    if not isinstance(doc.get("settings"), Mapping):  # audits merged from runs of different settings
        return ["## Power", "", "Not computed: the audits read here ran with different settings (see `settings` "
                "in each audit.json), and a power simulation is for one design; report them apart.", ""]
    return power_section(doc)


def _oracle_label(oracle: Any) -> str:
    """The configured primary oracle in words (its resolved form per run is in the calibration)."""
    if not isinstance(oracle, Mapping):
        return "the data's default (`any` of spec + checks on mini, `llm` on a release)"
    name = oracle.get("name")
    if name == "any":
        return f"`any` of {', '.join(f'`{v}`' for v in oracle.get('verifiers') or [])}"
    return f"`{name}` (model `{oracle.get('model')}`)" if name == "llm" else f"`{name}`"


# -- the document -----------------------------------------------------------------------------------

def render(doc: Mapping[str, Any], figures: Sequence[str] = (), against: Sequence[str] = ()) -> str:
    """report.md text (pure); `against`: rewards every other one is also read against (`--against`)."""
    seeds = {r: sorted(e["seeds"], key=int) for r, e in sorted(doc["rewards"].items())}
    settings = doc.get("settings", {})
    lines = ["# Hidden-anchor audit report", "",
             "Rewards and seeds: " + "; ".join(f"`{r}` {'seed' if len(s) == 1 else 'seeds'} {', '.join(s)}"
                                          for r, s in seeds.items()) + ".",
             ""]
    if isinstance(settings, Mapping) and settings:
        boot = settings.get("bootstrap", {})
        lines += [f"Audit settings: n = {settings.get('n')} answers per environment, bootstrap "
                  f"B = {boot.get('B')} environment resamples, seed {settings.get('seed')}, "
                  f"oracle {_oracle_label(settings.get('oracle'))}.", ""]
    lines += probe_section(doc)
    lines += probe_set_lines(doc)
    lines += calibration_section(doc)
    lines += train_section(doc)
    lines += ["Cells: mean over seeds [95% interval with seed and environment variation, "
              "`audit.contrasts.seed_interval`]; `*` marks a reward with one seed, whose cell is that seed's "
              "value [95% interval over environments: t for the probe and the valid-rate drift, else bootstrap]. "
              "— = undefined (e.g. no invalid answer for an FPR); `unverified` = withheld by the oracle "
              "gate (see the calibration above).", ""]
    for metric in metric_names(doc):
        lines += [f"## {metric_title(metric)}", "", *metric_table(doc, metric), ""]
    base, note, rows = comparisons(doc)
    lines += ["## Paired VA-Gap comparison against the baseline (final iteration)", "", note,
              "VA-Gap on impossible environments, reward minus baseline: paired environment bootstrap (one "
              "draw of environments for both rewards, samples of an environment pooled over the seeds both "
              "ran), two-sided bootstrap p-value; Bonferroni over the comparisons.", ""]
    if rows:
        lines += [*comparison_table(rows), ""]
    lines += contrast_lines(doc)
    lines += pairwise_lines(doc["rewards"], list(against))
    lines += kl_section(doc)
    lines += power_lines(doc)
    if figures:
        lines += ["## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures] + [""]
    return "\n".join(lines)


def _checkpoints_from(doc: Mapping[str, Any], root: Path, where: Path) -> None:
    """Each checkpoint (named from `root` in a merged document) named from `where` instead, where the
    document is written, so that a report of it finds each checkpoint's training record."""
    for entry in doc["rewards"].values():
        for s in entry["seeds"].values():
            for it in s["iterations"].values():
                if it.get("checkpoint"):
                    it["checkpoint"] = Path(os.path.relpath(root / it["checkpoint"], where)).as_posix()


def write_report(root: Path, out: Path | None = None, data: bool = False, include: Sequence[Path] = (),
                 against: Sequence[str] = ()) -> Path:
    """report.md and its figures; with `data`, also the merged audit.json and audit.csv beside it (one
    document of audits made apart, e.g. one per reward, to commit or compare). Refused anywhere inside
    DIR: there they would hide (DIR/audit.json) or repeat (a dir below) the audits they merge."""
    from selfplay.artifacts import write_texts_atomic

    out = out or root / "report.md"
    if data and out.parent.resolve().is_relative_to(root.resolve()):
        raise ReportError(f"{out.parent}: --data writes audit.json there, inside {root}, where it would hide "
                          "or repeat the audits it merges; give --out in a directory outside it")
    doc = load_dir(root, include)
    unknown = [r for r in against if r not in doc["rewards"]]
    if unknown:
        raise ReportError(f"--against {unknown[0]}: not a reward of this audit (audited: {', '.join(sorted(doc['rewards']))})")
    figs = write_figures(doc, out.parent / "figures")
    texts = {out: render(doc, [f.relative_to(out.parent).as_posix() for f in figs], against)}
    if data:
        merged = json_safe({k: v for k, v in doc.items() if k != "train"})  # a copy, NaN as null like audit.gap's
        _checkpoints_from(merged, root, out.parent)
        texts |= {out.parent / "audit.json": dumps(merged), out.parent / "audit.csv": to_csv(merged)}
    write_texts_atomic(texts)  # all or none
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m audit.report", description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, help="an audited experiment dir (holding audit.json, or audits below it; "
                    "with --include it may hold none)")
    ap.add_argument("--out", type=Path, default=None, help="report path (default DIR/report.md)")
    ap.add_argument("--data", action="store_true",
                    help="also write the merged audit.json and audit.csv beside the report")
    ap.add_argument("--include", type=Path, action="append", default=[], metavar="AUDIT_JSON",
                    help="also merge this audit.json (repeatable), e.g. the one --data wrote on another machine")
    ap.add_argument("--against", action="append", default=[], metavar="REWARD",
                    help="also read every other reward against this one (repeatable), e.g. a design against the "
                         "positive control or against another design")
    args = ap.parse_args(argv)
    if not args.dir.is_dir():
        print(f"audit.report: error: {args.dir}: not a directory", file=sys.stderr)
        return 1
    try:
        out = write_report(args.dir, args.out, args.data, args.include, args.against)
    except ReportError as e:
        print(f"audit.report: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # --out or figures/ unwritable, a full disk: the path, and nothing half-written
        from selfplay.cli import os_error_line

        print(f"audit.report: error: {os_error_line(e).split('; ')[0]}; choose another --out or free the space",
              file=sys.stderr)
        return 1
    print(f"wrote {out} and its figures in {out.parent / 'figures'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
