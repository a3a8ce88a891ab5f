"""PNG figures of an audit document (matplotlib, Agg backend: no display needed).

Each figure is a grid: one row per metric, one column (panel) per reward, one line per seed against
the iteration, with the seed's 95% environment-bootstrap interval as a band. `discrimination.png`
adds the `length` and `hedge` baselines as dashed lines beside the judge AUROC (mean over seeds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

GAP_FPR = ("va_gap/impossible", "va_gap/control", "fpr/policy", "fpr/stress")
DISCRIMINATION = ("youden_j", "auroc/policy/judge", "auroc/stress/judge")
IBE = ("ibe/policy/judge+checks", "ibe/stress/judge+checks")
BASELINES = ("length", "hedge")


def _nan(v: Any) -> float:
    return float("nan") if v is None else float(v)


def _series(seed_doc: Mapping[str, Any], metric: str):
    its = sorted(seed_doc["iterations"], key=int)
    ms = [seed_doc["iterations"][t]["metrics"].get(metric) for t in its]
    xs = [int(t) for t in its]
    val = [_nan(m and m["value"]) for m in ms]
    lo = [_nan(m and m["ci_low"]) for m in ms]
    hi = [_nan(m and m["ci_high"]) for m in ms]
    return xs, val, lo, hi


def _mean_series(entry: Mapping[str, Any], metric: str):
    its = sorted(entry["across_seeds"], key=int)
    return [int(t) for t in its], [_nan(entry["across_seeds"][t].get(metric, {}).get("mean")) for t in its]


def metric_grid(doc: Mapping[str, Any], metrics: Sequence[str], path: Path, *, title: str = "",
                baselines: bool = False) -> Path:
    """Rows = metrics, columns = rewards, a line (and interval band) per seed; writes `path`."""
    rewards = sorted(doc["rewards"])
    fig, axes = plt.subplots(len(metrics), max(1, len(rewards)), squeeze=False, sharex=True,
                             figsize=(max(5.0, 3.6 * len(rewards)), 2.4 * len(metrics) + 1.0))
    for col, reward in enumerate(rewards):
        entry = doc["rewards"][reward]
        for row, metric in enumerate(metrics):
            ax = axes[row][col]
            for seed in sorted(entry["seeds"], key=int):
                xs, val, lo, hi = _series(entry["seeds"][seed], metric)
                line, = ax.plot(xs, val, marker="o", label=f"seed {seed}")
                ax.fill_between(xs, lo, hi, alpha=0.2, color=line.get_color())
            if baselines and metric.startswith("auroc/") and metric.endswith("/judge"):
                stem = metric.rsplit("/", 1)[0]
                for name, style in zip(BASELINES, ("--", ":"), strict=True):
                    xs, mean = _mean_series(entry, f"{stem}/{name}")
                    ax.plot(xs, mean, linestyle=style, color="grey", label=f"{name} baseline")
            if row == 0:
                ax.set_title(reward)
            if col == 0:
                ax.set_ylabel(metric, fontsize=8)
            if row == len(metrics) - 1:
                ax.set_xlabel("iteration t")
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[0][0].get_legend_handles_labels()
    for r in range(1, len(metrics)):  # baseline labels live on the AUROC rows
        h, lab = axes[r][0].get_legend_handles_labels()
        handles += [x for x, y in zip(h, lab, strict=True) if y not in labels]
        labels += [y for y in lab if y not in labels]
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_figures(doc: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """The audit's standard figures into `out_dir`; returns their paths."""
    return [
        metric_grid(doc, GAP_FPR, out_dir / "va_gap_fpr.png", title="VA-Gap and FPR per iteration"),
        metric_grid(doc, DISCRIMINATION, out_dir / "discrimination.png",
                    title="Policy (Youden J) and judge (AUROC) discrimination", baselines=True),
        metric_grid(doc, IBE, out_dir / "ibe.png", title="Independence-bound excess"),
    ]
