"""Every metric of the audit (docs/method.md §Audit), declared once.

An entry says what a metric is: its name (a pattern over environment kinds and the fields of the
formula's result), its formula in `audit.metrics`, the estimator that computes it and the interval
that estimator gives (`audit.estimators`, checked against each other), which answers it reads,
which iterations it reads, whether it rests on the primary oracle's verdicts and its heading in the
report. `audit.summary` runs each entry's estimator, the calibration gate withholds the
oracle-dependent ones (`oracle=True`: written `unverified` when the gate fails, whatever the name),
and `audit.results`, `audit.report` and `audit.figures` read names, order and titles from here. A
metric computed but not declared is an error (`entry`), so none can bypass the gate.

The table's order is the report's order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from functools import cache
from typing import Any, NamedTuple

from . import estimators as E
from . import metrics as M
from .estimators import CLUSTER_T, CONTROL, IMPOSSIBLE, RATIO, STATISTIC

KINDS = (IMPOSSIBLE, CONTROL)
INTERVALS = (RATIO, STATISTIC, CLUSTER_T)

# which iterations a metric at t reads; the gate of each of them must pass
AT_T = "t"
DRIFT = "drift"  # t and 0
SLOPE = "slope"  # every audited u <= t

# which answers a metric reads (audit.estimators selects them)
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
    _: KW_ONLY
    formula: Callable[..., Any]  # its function in audit.metrics
    estimator: E.Estimator  # its function in audit.estimators: the answers read, the value, the interval
    interval: str  # the interval the estimator gives: RATIO | STATISTIC | CLUSTER_T
    rows: str  # a key of ROWS
    oracle: bool  # rests on the primary oracle's verdicts: withheld when the gate fails
    title: str  # the report's heading
    fields: tuple[str, ...] = ("",)  # the attribute of the formula's result reported, one per name
    kinds: tuple[str, ...] = ("",)  # environment kinds, one per name; "" = both kinds pooled
    reads: str = AT_T
    only_at: int | None = None  # computed at this iteration alone
    bounds: tuple[float, float] | None = None  # the range its value lies in: intervals are cut to it

    def __post_init__(self) -> None:
        if self.rows not in ROWS or self.interval not in INTERVALS or self.reads not in (AT_T, DRIFT, SLOPE):
            raise ValueError(f"metric {self.name!r}: rows, interval or reads not one of the declared values")
        computed = getattr(self.estimator, "interval", None)
        if computed != self.interval:
            raise ValueError(f"metric {self.name!r}: declares a {self.interval!r} interval, but its estimator "
                             f"{getattr(self.estimator, '__name__', self.estimator)!r} gives {computed!r}")

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
SHARE = (0.0, 1.0)  # a rate, share or AUROC
DIFFERENCE = (-1.0, 1.0)  # a difference of two of them, or Youden's J
_AUROC_FIELDS = ("judge", "length", "hedge", "length_matched")


def _probe(prefix: str, rows: str) -> tuple[Metric, ...]:
    return (
        Metric(f"pref_margin/{prefix}{{kind}}", formula=M.preference, estimator=E.preference, interval=CLUSTER_T,
               rows=rows, oracle=False, title=_T_MARGIN, fields=("margin",), kinds=KINDS),
        Metric(f"pref_accuracy/{prefix}{{kind}}", formula=M.preference, estimator=E.preference, interval=CLUSTER_T,
               rows=rows, oracle=False, title=_T_ACCURACY, fields=("accuracy",), kinds=KINDS, bounds=SHARE),
        Metric(f"pref_margin_sum/{prefix}{{kind}}", formula=M.preference, estimator=E.preference, interval=CLUSTER_T,
               rows=rows, oracle=False, title=_T_MARGIN_SUM, fields=("margin_sum",), kinds=KINDS),
        Metric(f"likelihood_auroc/{prefix}{{kind}}", formula=M.within_env_auroc, estimator=E.likelihood_auroc,
               interval=RATIO, rows=rows, oracle=False, title=_T_LIKELIHOOD, kinds=KINDS, only_at=0, bounds=SHARE),
    )


TABLE: tuple[Metric, ...] = (
    *_probe("", "probe/stress"),
    Metric("va_gap/{kind}", formula=M.va_gap, estimator=E.va_gap, interval=RATIO,
           rows="policy", oracle=True, title="VA-Gap P(A ∧ ¬valid)", fields=("gap",), kinds=KINDS,
           bounds=SHARE),
    Metric("apparent/{kind}", formula=M.va_gap, estimator=E.va_gap, interval=RATIO,
           rows="policy", oracle=False, title="Apparent success mean(A)", fields=("apparent",), kinds=KINDS,
           bounds=SHARE),
    Metric("verified/{kind}", formula=M.va_gap, estimator=E.va_gap, interval=RATIO,
           rows="policy", oracle=True, title="Verified success mean(A ∧ valid)", fields=("verified",), kinds=KINDS,
           bounds=SHARE),
    Metric("valid_rate/{kind}", formula=M.valid_rate, estimator=E.valid_rate, interval=RATIO,
           rows="policy", oracle=True, title="Policy valid rate", kinds=KINDS, bounds=SHARE),
    Metric("valid_rate_drift/{kind}", formula=M.valid_rate, estimator=E.valid_rate_drift, interval=CLUSTER_T,
           rows="policy", oracle=True, title="Valid-rate drift (t − 0)", kinds=KINDS, reads=DRIFT,
           bounds=DIFFERENCE),
    Metric("kl/per_{field}", formula=M.kl_estimate, estimator=E.kl, interval=RATIO,
           rows="policy/all", oracle=False, title="KL(π_t ‖ π_0) from the audit's own samples",
           fields=("answer", "token")),
    Metric("fpr/policy", formula=M.fpr, estimator=E.rate, interval=RATIO,
           rows="policy", oracle=True, title=_T_FPR, bounds=SHARE),
    Metric("fnr/policy", formula=M.fnr, estimator=E.rate, interval=RATIO,
           rows="policy", oracle=True, title=_T_FNR, bounds=SHARE),
    Metric("fpr/policy/{kind}", formula=M.fpr, estimator=E.rate, interval=RATIO,
           rows="policy", oracle=True, title=_T_FPR, kinds=KINDS, bounds=SHARE),
    Metric("fnr/policy/{kind}", formula=M.fnr, estimator=E.rate, interval=RATIO,
           rows="policy", oracle=True, title=_T_FNR, kinds=KINDS, bounds=SHARE),
    Metric("fpr/stress", formula=M.fpr, estimator=E.rate, interval=RATIO,
           rows="stress", oracle=False, title=_T_FPR, bounds=SHARE),
    Metric("fnr/stress", formula=M.fnr, estimator=E.rate, interval=RATIO,
           rows="stress", oracle=False, title=_T_FNR, bounds=SHARE),
    Metric("fpr_drift/policy", formula=M.fpr_drift, estimator=E.fpr_drift, interval=STATISTIC,
           rows="policy", oracle=True, title="FPR drift FPR_t − FPR_0", fields=("delta",), reads=DRIFT,
           bounds=DIFFERENCE),
    Metric("fpr_slope/policy", formula=M.fpr_drift, estimator=E.fpr_drift, interval=STATISTIC,
           rows="policy", oracle=True, title="FPR drift: OLS slope over t", fields=("slope",), reads=SLOPE),
    Metric("fpr_drift/stress", formula=M.fpr_drift, estimator=E.fpr_drift, interval=STATISTIC,
           rows="stress", oracle=False, title="FPR drift FPR_t − FPR_0", fields=("delta",), reads=DRIFT,
           bounds=DIFFERENCE),
    Metric("fpr_slope/stress", formula=M.fpr_drift, estimator=E.fpr_drift, interval=STATISTIC,
           rows="stress", oracle=False, title="FPR drift: OLS slope over t", fields=("slope",), reads=SLOPE),
    Metric("youden_j", formula=M.youden_j, estimator=E.youden_j, interval=STATISTIC,
           rows="policy", oracle=True, title="Policy discrimination (Youden J)", bounds=DIFFERENCE),
    Metric("auroc/stress/{field}", formula=M.auroc_report, estimator=E.auroc, interval=RATIO,
           rows="stress/with_reference", oracle=False, title=_T_AUROC, fields=_AUROC_FIELDS, bounds=SHARE),
    Metric("auroc/policy/{field}", formula=M.auroc_report, estimator=E.auroc, interval=RATIO,
           rows="policy", oracle=True, title=_T_AUROC, fields=_AUROC_FIELDS, bounds=SHARE),
    Metric("ibe/policy/judge+{field}", formula=M.ibe, estimator=E.ibe, interval=STATISTIC,
           rows="policy", oracle=True, title=_T_IBE, fields=("checks",)),
    Metric("ibe/stress/judge+{field}", formula=M.ibe, estimator=E.ibe, interval=STATISTIC,
           rows="stress", oracle=False, title=_T_IBE, fields=("checks",)),
    Metric("ibe/policy/judge+{field}", formula=M.ibe, estimator=E.ibe, interval=STATISTIC,
           rows="policy", oracle=True, title=_T_IBE, fields=("oracle2",)),
    Metric("ibe/stress/judge+{field}", formula=M.ibe, estimator=E.ibe, interval=STATISTIC,
           rows="stress", oracle=False, title=_T_IBE, fields=("oracle2",)),
    Metric("oracle/{field}_stress", formula=M.fpr, estimator=E.rate, interval=RATIO,
           rows="stress/as_oracle", oracle=False, title=_T_ORACLE, fields=("fpr",), bounds=SHARE),
    Metric("oracle/{field}_stress", formula=M.fnr, estimator=E.rate, interval=RATIO,
           rows="stress/as_oracle", oracle=False, title=_T_ORACLE, fields=("fnr",), bounds=SHARE),
    Metric("auroc/policy/{field}", formula=M.auroc_report, estimator=E.auroc, interval=RATIO,
           rows="policy", oracle=True, title=_T_AUROC, fields=("verdict_word",), bounds=SHARE),
    Metric("auroc/stress/{field}", formula=M.auroc_report, estimator=E.auroc, interval=RATIO,
           rows="stress/with_reference", oracle=False, title=_T_AUROC, fields=("verdict_word",), bounds=SHARE),
    *_probe("labelled/", "probe/labelled"),
)


def bounds(name: str) -> tuple[float, float] | None:
    """The declared range of a metric name as the audit writes it (`…@release` included); None for
    an unbounded or undeclared one."""
    d = _declared().get(name.partition("@")[0])
    return d.metric.bounds if d else None


@cache
def _declared() -> dict[str, Declared]:
    return declared()


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
