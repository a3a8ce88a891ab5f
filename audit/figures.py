"""PNG figures of an audit document (matplotlib, Agg backend: no display needed).

Each figure is a grid: one row per metric, one column (panel) per reward, one line per seed against
the iteration, with the seed's 95% environment-bootstrap interval as a band. `discrimination.png`
adds the `length` and `hedge` baselines as dashed lines beside the judge AUROC (mean over seeds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from . import metric_table as T  # noqa: E402
from . import metrics as M  # noqa: E402
from .calibration import UNVERIFIED  # noqa: E402


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _nan(v: Any) -> float:
    return float("nan") if v is None else float(v)


def _withheld(entry: Mapping[str, Any], metric: str) -> str | None:
    """The gate's reason when `metric` is unverified for some seed of this reward, else None."""
    for s in entry["seeds"].values():
        for it in s["iterations"].values():
            m = it["metrics"].get(metric) or {}
            if m.get("status") == "unverified":
                return m.get("reason") or "the oracle gate failed"
    return None


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
                baselines: Sequence[str] = ()) -> Path:
    """Rows = metrics, columns = rewards, a line (and interval band) per seed; writes `path`. Beside
    a judge AUROC (an `auroc_report` entry of audit.metric_table, field `judge`) the mean over seeds
    of each of `baselines` (fields of the same entry family) is drawn dashed."""
    rewards = sorted(doc["rewards"])
    fig, axes = plt.subplots(len(metrics), max(1, len(rewards)), squeeze=False, sharex=True,
                             figsize=(max(5.0, 3.6 * len(rewards)), 2.4 * len(metrics) + 1.0))
    for col, reward in enumerate(rewards):
        entry = doc["rewards"][reward]
        for row, metric in enumerate(metrics):
            ax = axes[row][col]
            reason = _withheld(entry, metric)
            if reason is not None:  # never a plain number: say why there is no line
                ax.text(0.5, 0.5, "unverified:\n" + _wrap(reason), ha="center", va="center", fontsize=6,
                        transform=ax.transAxes, color="firebrick")
            for seed in sorted(entry["seeds"], key=int) if reason is None else ():
                xs, val, lo, hi = _series(entry["seeds"][seed], metric)
                line, = ax.plot(xs, val, marker="o", label=f"seed {seed}")
                ax.fill_between(xs, lo, hi, alpha=0.2, color=line.get_color())
            d = T.declared().get(metric)
            if baselines and d and d.metric.formula is M.auroc_report and d.field == "judge":
                stem = metric.rsplit("/", 1)[0]
                for name, style in zip(baselines, ("--", ":"), strict=True):
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


def _wrap(text: str, width: int = 48) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)[:8])


def kl_points(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per reward, seed and t: √KL (per answer; a negative estimate is drawn at 0) and apparent and
    verified success on impossible environments (verified None and `unverified` when withheld)."""
    out = []
    for reward, entry in sorted(doc["rewards"].items()):
        for seed, s in sorted(entry["seeds"].items(), key=lambda kv: int(kv[0])):
            for t, it in sorted(s["iterations"].items(), key=lambda kv: int(kv[0])):
                m = it["metrics"]
                kl = (m.get("kl/per_answer") or {}).get("value")
                if kl is None:
                    continue
                ver = m.get("verified/impossible") or {}
                out.append({"reward": reward, "seed": seed, "t": int(t), "kl": kl, "sqrt_kl": math.sqrt(max(kl, 0.0)),
                            "apparent": (m.get("apparent/impossible") or {}).get("value"),
                            "verified": None if ver.get("status") == UNVERIFIED else ver.get("value"),
                            "verified_status": ver.get("status", "ok")})
    return out


MARKERS = "osD^vP*X"


def run_styles(keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """(reward, seed) -> (colour, marker): a colour per reward and a marker per seed (in seed order),
    so a sweep of many runs stays readable where a colour per line would repeat after ten."""
    rewards = sorted({r for r, _ in keys})
    styles: dict[tuple[str, str], tuple[str, str]] = {}
    for reward in rewards:
        seeds = sorted({sd for r, sd in keys if r == reward}, key=int)
        for rank, seed in enumerate(seeds):
            styles[(reward, seed)] = (f"C{rewards.index(reward) % 10}", MARKERS[rank % len(MARKERS)])
    return styles


def kl_curve(doc: Mapping[str, Any], path: Path) -> Path:
    """Apparent (dashed) and verified (solid) success on impossible environments against √KL, a
    colour per reward and a marker per seed: what the judge believes against what is true as π_t leaves π_0."""
    pts = kl_points(doc)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    withheld = sorted({f"{p['reward']} seed {p['seed']}" for p in pts if p["verified_status"] == "unverified"})
    keys = sorted({(p["reward"], p["seed"]) for p in pts})
    styles = run_styles(keys)
    for key in keys:
        run = sorted((p for p in pts if (p["reward"], p["seed"]) == key), key=lambda p: p["t"])
        xs = [p["sqrt_kl"] for p in run]
        color, marker = styles[key]
        ax.plot(xs, [_nan(p["apparent"]) for p in run], "--", marker=marker, color=color, mfc="none",
                label=f"{key[0]} seed {key[1]}: apparent")
        if all(p["verified_status"] != "unverified" for p in run):
            ax.plot(xs, [_nan(p["verified"]) for p in run], "-", marker=marker, color=color,
                    label=f"{key[0]} seed {key[1]}: verified")
    if withheld:
        ax.text(0.02, 0.02, "verified success unverified (oracle gate failed) for: " + _wrap(", ".join(withheld), 60),
                transform=ax.transAxes, fontsize=6, color="firebrick", va="bottom")
    ax.set_xlabel("√KL(π_t ‖ π_0)  (nats per answer, from the audit's samples)")
    ax.set_ylabel("success on impossible environments")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    if pts:
        ax.legend(fontsize=6, loc="upper right")
    ax.set_title("Apparent vs verified success against √KL", fontsize=10)
    return _save(fig, path)


def probe_curve(doc: Mapping[str, Any], path: Path, metric: str = "pref_margin/impossible") -> Path:
    """The preference probe's margin (per token) against the iteration (left) and against √KL
    (right, where the audit estimated a KL), one line per reward × seed with its interval band."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    runs = [(r, sd, s) for r, e in sorted(doc["rewards"].items())
            for sd, s in sorted(e["seeds"].items(), key=lambda kv: int(kv[0]))]
    styles = run_styles([(r, sd) for r, sd, _ in runs])
    for reward, seed, s in runs:
        xs, val, lo, hi = _series(s, metric)
        color, marker = styles[(reward, seed)]
        label = f"{reward} seed {seed}"
        left.plot(xs, val, "-", marker=marker, color=color, label=label)
        left.fill_between(xs, lo, hi, color=color, alpha=0.15)
        kl = [_nan((s["iterations"][str(t)]["metrics"].get("kl/per_answer") or {}).get("value")) for t in xs]
        keep = [j for j, k in enumerate(kl) if k == k]
        if keep:
            right.errorbar([max(kl[j], 0.0) ** 0.5 for j in keep], [val[j] for j in keep],
                           yerr=[[val[j] - lo[j] for j in keep], [hi[j] - val[j] for j in keep]],
                           fmt=f"-{marker}", color=color, capsize=2, label=label)
    for ax, xlabel in ((left, "iteration t"), (right, "√KL(π_t ‖ π_0)  (nats per answer, audit samples)")):
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_ylabel("pref_margin: Δℓ(valid) − Δℓ(invalid), per token")
    if runs:
        left.legend(fontsize=6, loc="best")
    if not right.lines:
        right.text(0.5, 0.5, "no KL estimate (the audit drew no answers)", ha="center", va="center",
                   transform=right.transAxes, fontsize=8)
    fig.suptitle("Preference probe on held-out environments (impossible)", fontsize=10)
    return _save(fig, path)


def write_figures(doc: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """The audit's standard figures into `out_dir`; returns their paths."""
    return [
        probe_curve(doc, out_dir / "probe.png"),
        kl_curve(doc, out_dir / "kl_curve.png"),
        *(metric_grid(doc, f.metrics, out_dir / f.file, title=f.title, baselines=f.baselines) for f in T.FIGURES),
    ]
