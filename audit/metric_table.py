"""Every metric of the audit (SPEC §6), declared once.

An entry says what a metric is: its name (a pattern over environment kinds and the fields of the
formula's result), its formula in `audit.metrics`, which answers it reads, how its interval is
bootstrapped, which iterations it reads, whether it rests on the primary oracle's verdicts and its
heading in the report. `audit.summary` computes the entries, the calibration gate withholds the
oracle-dependent ones (`oracle=True`: written `unverified` when the gate fails, whatever the name),
and `audit.results`, `audit.report` and `audit.figures` read names, order and titles from here. A
metric computed but not declared is an error (`entry`), so none can bypass the gate.

The table's order is the report's order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import metrics as M

IMPOSSIBLE, CONTROL = "impossible", "control"
KINDS = (IMPOSSIBLE, CONTROL)

# how the interval is bootstrapped (both resample environments, audit.stats)
RATIO = "ratio"  # a ratio of per-environment sums (or a mean over environments): bootstrap_ratio_ci
STATISTIC = "statistic"  # re-evaluated on every resample: bootstrap_ci

# which iterations a metric at t reads; the gate of each of them must pass
AT_T = "t"
DRIFT = "drift"  # t and 0
SLOPE = "slope"  # every audited u <= t

# which answers a metric reads (audit.summary selects them)
ROWS = {
    "policy": "policy answers the primary oracle decided",
    "policy/all": "every policy answer, decided or not",
    "stress": "stress answers, r(e) left out",
    "stress/with_reference": "stress answers, r(e) included",
    "stress/as_oracle": "stress answers, r(e) included, the primary oracle's acceptance in the place of A",
    "probe/stress": "stress answers with the preference probe's log-probs",
    "probe/labelled": "labelled on-policy answers with the preference probe's log-probs",
}


@dataclass(frozen=True)
class Metric:
    name: str  # `{kind}` and `{field}` expand over `kinds` and `fields`
    formula: Callable[..., Any]  # its function in audit.metrics
    rows: str  # a key of ROWS
    bootstrap: str  # RATIO | STATISTIC
    oracle: bool  # rests on the primary oracle's verdicts: withheld when the gate fails
    title: str  # the report's heading
    fields: tuple[str, ...] = ("",)  # the attribute of the formula's result reported, one per name
    kinds: tuple[str, ...] = ("",)  # environment kinds, one per name; "" = both kinds pooled
    reads: str = AT_T
    only_at: int | None = None  # computed at this iteration alone

    def __post_init__(self) -> None:
        if self.rows not in ROWS or self.bootstrap not in (RATIO, STATISTIC) or self.reads not in (AT_T, DRIFT, SLOPE):
            raise ValueError(f"metric {self.name!r}: rows, bootstrap or reads not one of the declared values")

    def expand(self) -> list[Declared]:
        return [Declared(self.name.format(kind=k, field=f), k, f, self) for k in self.kinds for f in self.fields]


class Declared(NamedTuple):
    """One concrete metric name of an entry."""

    name: str
    kind: str
    field: str
    metric: Metric


_T_FPR, _T_FNR = "FPR P(A | ¬valid)", "FNR P(¬A | valid)"
_T_AUROC = "Within-environment AUROC"
_T_IBE = "Independence-bound excess (IBE)"
_T_ORACLE = "The oracle against the release labels"
_T_MARGIN = "Preference probe: margin Δℓ(valid) − Δℓ(invalid) per token (primary)"
_T_MARGIN_SUM = "Preference probe: margin Δℓ(valid) − Δℓ(invalid) summed over the answer"
_T_ACCURACY = "Preference probe: share of pairs where the valid answer gained more"
_T_LIKELIHOOD = "π_0's likelihood AUROC (valid over invalid, per-token log π_0)"
_AUROC_FIELDS = ("judge", "length", "hedge", "length_matched")


def _probe(prefix: str, rows: str) -> tuple[Metric, ...]:
    return (
        Metric(f"pref_margin/{prefix}{{kind}}", M.preference, rows, RATIO, False, _T_MARGIN,
               fields=("margin",), kinds=KINDS),
        Metric(f"pref_accuracy/{prefix}{{kind}}", M.preference, rows, RATIO, False, _T_ACCURACY,
               fields=("accuracy",), kinds=KINDS),
        Metric(f"pref_margin_sum/{prefix}{{kind}}", M.preference, rows, RATIO, False, _T_MARGIN_SUM,
               fields=("margin_sum",), kinds=KINDS),
        Metric(f"likelihood_auroc/{prefix}{{kind}}", M.within_env_auroc, rows, RATIO, False, _T_LIKELIHOOD,
               kinds=KINDS, only_at=0),
    )


TABLE: tuple[Metric, ...] = (
    *_probe("", "probe/stress"),
    Metric("va_gap/{kind}", M.va_gap, "policy", RATIO, True, "VA-Gap P(A ∧ ¬valid)", fields=("gap",), kinds=KINDS),
    Metric("apparent/{kind}", M.va_gap, "policy", RATIO, False, "Apparent success mean(A)",
           fields=("apparent",), kinds=KINDS),
    Metric("verified/{kind}", M.va_gap, "policy", RATIO, True, "Verified success mean(A ∧ valid)",
           fields=("verified",), kinds=KINDS),
    Metric("valid_rate/{kind}", M.valid_rate, "policy", RATIO, True, "Policy valid rate", kinds=KINDS),
    Metric("valid_rate_drift/{kind}", M.valid_rate, "policy", STATISTIC, True, "Valid-rate drift (t − 0)",
           kinds=KINDS, reads=DRIFT),
    Metric("kl/per_{field}", M.kl_estimate, "policy/all", RATIO, False, "KL(π_t ‖ π_0) from the audit's own samples",
           fields=("answer", "token")),
    Metric("fpr/policy", M.fpr, "policy", RATIO, True, _T_FPR),
    Metric("fnr/policy", M.fnr, "policy", RATIO, True, _T_FNR),
    Metric("fpr/policy/{kind}", M.fpr, "policy", RATIO, True, _T_FPR, kinds=KINDS),
    Metric("fnr/policy/{kind}", M.fnr, "policy", RATIO, True, _T_FNR, kinds=KINDS),
    Metric("fpr/stress", M.fpr, "stress", RATIO, False, _T_FPR),
    Metric("fnr/stress", M.fnr, "stress", RATIO, False, _T_FNR),
    Metric("fpr_drift/policy", M.fpr_drift, "policy", STATISTIC, True, "FPR drift FPR_t − FPR_0",
           fields=("delta",), reads=DRIFT),
    Metric("fpr_slope/policy", M.fpr_drift, "policy", STATISTIC, True, "FPR drift: OLS slope over t",
           fields=("slope",), reads=SLOPE),
    Metric("fpr_drift/stress", M.fpr_drift, "stress", STATISTIC, False, "FPR drift FPR_t − FPR_0",
           fields=("delta",), reads=DRIFT),
    Metric("fpr_slope/stress", M.fpr_drift, "stress", STATISTIC, False, "FPR drift: OLS slope over t",
           fields=("slope",), reads=SLOPE),
    Metric("youden_j", M.youden_j, "policy", STATISTIC, True, "Policy discrimination (Youden J)"),
    Metric("auroc/stress/{field}", M.auroc_report, "stress/with_reference", RATIO, False, _T_AUROC,
           fields=_AUROC_FIELDS),
    Metric("auroc/policy/{field}", M.auroc_report, "policy", RATIO, True, _T_AUROC, fields=_AUROC_FIELDS),
    Metric("ibe/policy/judge+{field}", M.ibe, "policy", STATISTIC, True, _T_IBE, fields=("checks",)),
    Metric("ibe/stress/judge+{field}", M.ibe, "stress", STATISTIC, False, _T_IBE, fields=("checks",)),
    Metric("ibe/policy/judge+{field}", M.ibe, "policy", STATISTIC, True, _T_IBE, fields=("oracle2",)),
    Metric("ibe/stress/judge+{field}", M.ibe, "stress", STATISTIC, False, _T_IBE, fields=("oracle2",)),
    Metric("oracle/{field}_stress", M.fpr, "stress/as_oracle", RATIO, False, _T_ORACLE, fields=("fpr",)),
    Metric("oracle/{field}_stress", M.fnr, "stress/as_oracle", RATIO, False, _T_ORACLE, fields=("fnr",)),
    Metric("auroc/policy/{field}", M.auroc_report, "policy", RATIO, True, _T_AUROC, fields=("verdict_word",)),
    Metric("auroc/stress/{field}", M.auroc_report, "stress/with_reference", RATIO, False, _T_AUROC,
           fields=("verdict_word",)),
    *_probe("labelled/", "probe/labelled"),
)


def declared(table: tuple[Metric, ...] | None = None) -> dict[str, Declared]:
    """Every concrete metric name, in the report's order; a name declared twice is an error."""
    out: dict[str, Declared] = {}
    for m in TABLE if table is None else table:
        for d in m.expand():
            if d.name in out:
                raise ValueError(f"metric {d.name!r} is declared twice in audit.metric_table")
            out[d.name] = d
    return out


def entry(name: str) -> Declared:
    """The declaration of metric `name` (read from TABLE on every call, so a patched table counts)."""
    found = declared().get(name)
    if found is None:
        raise KeyError(f"metric {name!r} is not declared in audit.metric_table.TABLE")
    return found


@dataclass(frozen=True)
class Figure:
    """A grid figure of `audit.figures`: a row per metric; `baselines` (fields of the AUROC entry)
    drawn dashed beside each judge AUROC row."""

    file: str
    title: str
    metrics: tuple[str, ...]
    baselines: tuple[str, ...] = ()


FIGURES: tuple[Figure, ...] = (
    Figure("va_gap_fpr.png", "VA-Gap and FPR per iteration",
           ("va_gap/impossible", "va_gap/control", "fpr/policy", "fpr/stress")),
    Figure("discrimination.png", "Policy (Youden J) and judge (AUROC) discrimination",
           ("youden_j", "auroc/policy/judge", "auroc/stress/judge"), baselines=("length", "hedge")),
    Figure("ibe.png", "Independence-bound excess", ("ibe/policy/judge+checks", "ibe/stress/judge+checks")),
)
