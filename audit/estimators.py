"""How each entry of `audit.metric_table` is computed from per-answer records: the answer sets an
entry reads, its value by its `audit.metrics` formula, and its interval by `audit.stats`.

An estimator takes the iteration's `Context` and one declared name and returns a `MetricValue`
(None: the metric is absent, e.g. the stage it reads did not run). Each is marked with the interval
it computes, which its table entries must declare (`interval=`):
- `RATIO`: a rate (VA-Gap, FPR, FNR, valid rate), a within-environment AUROC or the KL is a ratio of
  per-environment sums, computed per environment with its formula and bootstrapped with
  `bootstrap_ratio_ci`;
- `STATISTIC`: the other statistics (Youden J, IBE, FPR drift and slope) are re-evaluated on each
  resample with `bootstrap_ci`;
- `CLUSTER_T`: the means over environments (the probe and the valid-rate drift) get the t interval
  over environments (`cluster_t_ci`, `cluster_t_diff`).
Every bootstrap resamples environments (clusters) and draws from its own Generator seeded by (audit
seed, run seed, iteration, metric name), so a metric's interval does not depend on which other
metrics were computed or in what order.

An estimator computes its entry's `formula` where it can take any formula of its shape (`rate`:
any rate over (A, label)), so a new formula of a known shape is one function in `audit.metrics` and
one entry in the table.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from . import metrics as M
from . import stats as S
from .records import (
    LABELLED,
    ORACLE,
    ORACLE2,
    POLICY,
    STRESS,
    AnswerRow,
    MetricValue,
    StatsSettings,
)

IMPOSSIBLE, CONTROL = "impossible", "control"

# the interval an estimator computes (all resample environments, audit.stats)
RATIO = "ratio"  # a ratio of per-environment sums: bootstrap_ratio_ci
STATISTIC = "statistic"  # re-evaluated on every resample: bootstrap_ci
CLUSTER_T = "t"  # a mean over environments: the t interval over environments


class Declared(Protocol):
    """One concrete metric name of a table entry (audit.metric_table.Declared)."""

    name: str
    kind: str
    field: str
    metric: Any


Estimator = Callable[["Context", Declared], "MetricValue | None"]


def computes(interval: str) -> Callable[[Estimator], Estimator]:
    """Mark an estimator with the interval it computes, which the table checks its entries against."""
    def mark(f: Estimator) -> Estimator:
        f.interval = interval  # type: ignore[attr-defined]
        return f
    return mark


def _accepts(rows: Sequence[AnswerRow], role: str) -> np.ndarray:
    """Verifier `role`'s accepts as 1/0, NaN where it was undecided or not run."""
    return np.array([np.nan if (a := r.accepts.get(role)) is None else float(a) for r in rows], dtype=float)


class _Arrays:
    """Column view of a list of rows, the form the metric functions take."""

    def __init__(self, rows: Sequence[AnswerRow]):
        self.rows = list(rows)
        self.env = np.array([r.task_id for r in rows], dtype=object).astype(str)
        self.kind = np.array([r.kind for r in rows], dtype=object).astype(str)
        self.label = np.array([r.label for r in rows], dtype=object).astype(str)
        self.score = np.array([np.nan if r.score is None else r.score for r in rows], dtype=float)
        ref = [np.nan if r.ref_score is None else r.ref_score for r in rows]
        self.apparent = M.apparent_success(self.score, np.array(ref, dtype=float)) if rows else np.zeros(0)
        self.text = [r.text for r in rows]

    def where(self, mask: np.ndarray) -> _Arrays:
        mask = np.asarray(mask, dtype=bool)
        sub = _Arrays([r for r, m in zip(self.rows, mask, strict=True) if m])
        sub.apparent = self.apparent[mask] if len(self.rows) else sub.apparent  # keeps a substituted A
        return sub

    def cols(self, env: str) -> tuple[np.ndarray, np.ndarray]:
        mask = self.env == env
        return self.apparent[mask], self.label[mask]

    def with_apparent(self, accept: np.ndarray) -> _Arrays:
        """The same answers with another verifier's acceptance in the place of the judge's A."""
        b = _Arrays(self.rows)
        b.apparent = accept
        return b

    def verified(self) -> _Arrays:
        """The answers with a validity label (policy answers the oracle decided; every stress answer)."""
        return self.where(np.array([r.label is not None for r in self.rows], dtype=bool))


def _rng(settings: StatsSettings, run_seed: int, t: int, name: str) -> np.random.Generator:
    return np.random.default_rng([settings.seed, run_seed, t, zlib.crc32(name.encode())])


def _from_ci(ci: S.BootstrapCI, value: float, n: int, n_partial: int = 0, n_unscored: int = 0) -> MetricValue:
    return MetricValue(float(value), ci.low, ci.high, int(n), int(n_partial), int(n_unscored), int(ci.n_undefined))


def _ratio(a: _Arrays, part: Callable[[_Arrays], tuple[float, float]], rng: np.random.Generator,
           st: StatsSettings) -> S.BootstrapCI:
    """bootstrap_ratio_ci over environments, the per-environment (numerator, denominator) from `part`."""
    envs = sorted(set(a.env))
    nd = [part(a.where(a.env == e)) for e in envs]
    return S.bootstrap_ratio_ci([x for x, _ in nd], [d for _, d in nd], envs, rng=rng, B=st.B, alpha=st.alpha)


class Context:
    """One iteration's computation: its answer sets (audit.metric_table.ROWS) and those of the seed's
    other audited iterations (drifts read them), built once; per-set AUROC reports memoised.
    `primary_members` are the verifiers the primary oracle is made of; `undefined` collects the
    metrics undefined by construction, with the reason."""

    def __init__(self, all_t: Mapping[int, Sequence[AnswerRow]], t: int, run_seed: int, st: StatsSettings,
                 second_oracle: bool, primary_members: Sequence[str] = ()):
        self.all_t, self.t, self.run_seed, self.st, self.second_oracle = all_t, t, run_seed, st, second_oracle
        self.primary_members = tuple(primary_members)
        self._sets: dict[int, dict[str, _Arrays]] = {}
        self.memo: dict[tuple, object] = {}
        self.per_env: dict[str, dict[str, float]] = {}
        self.undefined: dict[str, str] = {}

    def sets(self, u: int) -> dict[str, _Arrays]:
        if u not in self._sets:
            rows = self.all_t[u]
            arr = _Arrays(rows)
            pol_all = arr.where(np.array([r.source == POLICY for r in rows], dtype=bool))
            stress = arr.where(np.array([r.source == STRESS for r in rows], dtype=bool)).verified()
            oracle_acc = _accepts(stress.rows, ORACLE)

            def probed(source: str) -> _Arrays:
                return _Arrays([r for r in rows if r.source == source and r.probe_logp is not None
                                and r.probe_logp0 is not None])

            self._sets[u] = {
                "policy": pol_all.verified(), "policy/all": pol_all,
                "stress": stress.where(np.array([not r.is_reference for r in stress.rows], dtype=bool)),
                "stress/with_reference": stress, "stress/as_oracle": stress.with_apparent(oracle_acc),
                "probe/stress": probed(STRESS), "probe/labelled": probed(LABELLED),
            }
        return self._sets[u]

    def rows(self, d: Declared, u: int | None = None) -> _Arrays:
        """The answers metric `d` reads at iteration u (default t), restricted to its kind."""
        a = self.sets(self.t if u is None else u)[d.metric.rows]
        return a.where(a.kind == d.kind) if d.kind else a

    def rng(self, name: str) -> np.random.Generator:
        return _rng(self.st, self.run_seed, self.t, name)


def _nan_value(n_partial: int = 0, n_unscored: int = 0) -> MetricValue:
    nan = float("nan")
    return MetricValue(nan, nan, nan, 0, n_partial, n_unscored)


@computes(RATIO)
def va_gap(c: Context, d: Declared) -> MetricValue:
    """VA-Gap, apparent or verified success (the `field` of audit.metrics.VAGap) of one kind."""
    sub, fn = c.rows(d), d.metric.formula
    whole = fn(sub.apparent, sub.label) if sub.rows else None
    if whole is None or whole.n == 0:
        return _nan_value(0 if whole is None else whole.n_partial, 0 if whole is None else whole.n_unscored)

    def part(x: _Arrays) -> tuple[float, float]:
        g = fn(x.apparent, x.label)
        return (round(getattr(g, d.field) * g.n) if g.n else 0), g.n

    ci = _ratio(sub, part, c.rng(d.name), c.st)
    return _from_ci(ci, getattr(whole, d.field), whole.n, whole.n_partial, whole.n_unscored)


@computes(RATIO)
def valid_rate(c: Context, d: Declared) -> MetricValue:
    """A rate of audit.metrics over the labels alone (the valid rate), a ratio of per-environment sums."""
    sub, fn = c.rows(d), d.metric.formula
    valid = fn(sub.label) if sub.rows else None
    if valid is None or valid.denominator == 0:
        return _nan_value()
    ci = _ratio(sub, lambda x: (fn(x.label).numerator, fn(x.label).denominator),
                c.rng(d.name), c.st)
    return _from_ci(ci, valid.value, valid.denominator, valid.n_partial)


@computes(RATIO)
def rate(c: Context, d: Declared) -> MetricValue:
    """A rate of audit.metrics over (A, label) (FPR, FNR), a ratio of per-environment sums."""
    a, fn = c.rows(d), d.metric.formula
    whole = fn(a.apparent, a.label)
    if not len(a.rows):
        return _nan_value()

    def part(x: _Arrays) -> tuple[float, float]:
        r = fn(x.apparent, x.label)
        return r.numerator, r.denominator

    return _from_ci(_ratio(a, part, c.rng(d.name), c.st), whole.value, whole.denominator, whole.n_partial,
                    whole.n_unscored)


@computes(STATISTIC)
def youden_j(c: Context, d: Declared) -> MetricValue:
    a, st = c.rows(d), c.st

    def stat(_, kind, label):
        imp, ctl = M.valid_rate(label[kind == IMPOSSIBLE]), M.valid_rate(label[kind == CONTROL])
        return M.youden_j(imp.value, ctl.value) if imp.denominator and ctl.denominator else float("nan")

    if not a.rows:
        return _nan_value()
    ci = S.bootstrap_ci(stat, a.env, a.kind, a.label, rng=c.rng(d.name), B=st.B, alpha=st.alpha)
    n = M.valid_rate(a.label)
    return _from_ci(ci, ci.estimate, n.denominator, n.n_partial)


@computes(RATIO)
def auroc(c: Context, d: Declared) -> MetricValue:
    """One AUROC of audit.metrics.auroc_report (the judge's or a baseline's: `field`), per-environment
    reports summed into a ratio of (wins, pairs)."""
    a, st, fn = c.rows(d), c.st, d.metric.formula
    if not a.rows:
        return _nan_value()
    key = (fn, d.metric.rows, d.kind)
    if key not in c.memo:
        envs = sorted(set(a.env))
        c.memo[key] = (fn(a.env, a.score, a.label, a.text, st.max_rel_diff), envs,
                       [fn(x.env, x.score, x.label, x.text, st.max_rel_diff)
                        for x in (a.where(a.env == e) for e in envs)])
    whole, envs, per_env = c.memo[key]
    parts = [getattr(p, d.field) for p in per_env]
    nums = [p.value * p.n_pairs if p.n_pairs else 0.0 for p in parts]
    ci = S.bootstrap_ratio_ci(nums, [p.n_pairs for p in parts], envs, rng=c.rng(d.name), B=st.B, alpha=st.alpha)
    w = getattr(whole, d.field)
    return _from_ci(ci, w.value, w.n_pairs, w.n_partial, w.n_unscored)


@computes(STATISTIC)
def ibe(c: Context, d: Declared) -> MetricValue | None:
    """IBE of the judge with a second verifier, the entry's `field` naming its role (checks, or
    oracle2 when configured). Undefined by construction where the labels are the primary oracle's
    verdicts (an `oracle=True` entry) and the second verifier is one of the oracle's members: an
    answer it flags is invalid there by construction, so no label lies outside the verifier set."""
    value = _ibe(c, d)
    if value is None or not (d.metric.oracle and d.field in c.primary_members):
        return value
    nan = float("nan")
    c.undefined[d.name] = (f"the on-policy reference labels come from the primary oracle, which contains "
                           f"`{d.field}`, a member of the verifier set; no reference label outside the set")
    return MetricValue(nan, nan, nan, value.n)


def _ibe(c: Context, d: Declared) -> MetricValue | None:
    second, a, st, fn = d.field, c.rows(d), c.st, d.metric.formula
    if second == ORACLE2 and not c.second_oracle:
        return None
    other = _accepts(a.rows, second)

    def stat(_, apparent, other_, label):
        return fn({"judge": apparent, second: other_}, label).value

    if not a.rows:
        return _nan_value()
    whole = fn({"judge": a.apparent, second: other}, a.label)
    if whole.n == 0:
        return _nan_value(whole.n_partial, whole.n_unscored)
    ci = S.bootstrap_ci(stat, a.env, a.apparent, other, a.label, rng=c.rng(d.name), B=st.B, alpha=st.alpha)
    return _from_ci(ci, whole.value, whole.n, whole.n_partial, whole.n_unscored)


@computes(STATISTIC)
def fpr_drift(c: Context, d: Declared) -> MetricValue:
    """FPR_t − FPR_0 (`delta`) or the OLS slope of FPR over the iterations audited up to t (`slope`)."""
    nan, t, st = float("nan"), c.t, c.st
    by_t = {u: c.rows(d, u) for u in c.all_t}
    if 0 not in by_t:  # no t = 0 audited for this seed: drift is undefined, not zero
        return _nan_value()
    # FPR_u is a ratio of per-environment sums, so each environment contributes its (hits, invalid)
    # at every u (from audit.metrics.fpr) and a resample of environments re-sums them
    envs = sorted({e for a in by_t.values() for e in a.env})
    slope = d.field == "slope"
    ts = sorted(u for u in by_t if u <= t) if slope else sorted({0, t})
    per_env = {u: [M.fpr(*by_t[u].cols(e)) for e in envs] for u in ts}
    cols = [np.array([r.numerator for r in per_env[u]], float) for u in ts]
    cols += [np.array([r.denominator for r in per_env[u]], float) for u in ts]

    def stat(_, *col):
        k = len(ts)
        by_u = {u: (col[i].sum() / col[k + i].sum() if col[k + i].sum() > 0 else nan) for i, u in enumerate(ts)}
        drift = M.fpr_drift(by_u)
        return drift.slope if slope else drift.delta[-1]

    n = M.fpr(by_t[t].apparent, by_t[t].label)
    if (slope and len(ts) < 2) or not envs:
        return MetricValue(nan, nan, nan, n.denominator, n.n_partial, n.n_unscored)
    ci = S.bootstrap_ci(stat, envs, *cols, rng=c.rng(d.name), B=st.B, alpha=st.alpha)
    return _from_ci(ci, ci.estimate, n.denominator, n.n_partial, n.n_unscored)


@computes(CLUSTER_T)
def valid_rate_drift(c: Context, d: Declared) -> MetricValue:
    """valid rate at t − at 0 on one kind of environment, paired by environment across the two
    iterations (the same environments are audited at every t): the t interval of the difference."""
    nan, t, st = float("nan"), c.t, c.st
    subs = {u: c.rows(d, u) for u in c.all_t if u in (0, t)}
    if 0 not in subs:
        return _nan_value()
    envs = sorted({e for a in subs.values() for e in a.env})
    now = M.valid_rate(subs[t].label) if len(subs[t].rows) else M.Rate(nan, 0, 0)
    if not envs:
        return _nan_value()
    cols = []
    for u in (0, t):
        rates = [M.valid_rate(subs[u].label[subs[u].env == e]) for e in envs]
        cols += [np.array([r.numerator for r in rates], float), np.array([r.denominator for r in rates], float)]

    # a difference of means over the same environments: its t interval (audit.stats)
    # (cut to [-1, 1], the metric's declared range, with every other bounded metric: audit.summary)
    ci = S.cluster_t_diff(cols[2], cols[3], cols[0], cols[1], envs, alpha=st.alpha)
    return _from_ci(ci, ci.estimate, now.denominator, now.n_partial)


@computes(RATIO)
def kl(c: Context, d: Declared) -> MetricValue | None:
    """KL(π_t ‖ π_0) ≈ mean over the policy's own answers of log π_t(a) − log π_0(a): per answer
    (Σ ratio / answers) or per token (Σ ratio / Σ tokens), ratios of per-environment sums; absent
    when the KL stage did not run."""
    a, st = c.rows(d), c.st
    have = [(r.task_id, r.log_ratio, r.tokens) for r in a.rows if r.log_ratio is not None]
    if not have:
        return None
    env = [e for e, _, _ in have]
    ratio = np.array([x for _, x, _ in have], float)
    den = np.ones(len(have)) if d.field == "answer" else np.array([n for _, _, n in have], float)
    ci = S.bootstrap_ratio_ci(ratio, den, env, rng=c.rng(d.name), B=st.B, alpha=st.alpha)
    return _from_ci(ci, d.metric.formula(ratio, den), len(have), 0, len(a.rows) - len(have))


def _probe_inputs(sub: Sequence[AnswerRow]):
    return ([r.task_id for r in sub], [r.label for r in sub], [r.probe_logp for r in sub],
            [r.probe_logp0 for r in sub], [r.probe_tokens for r in sub])


def probe_preference(sub: Sequence[AnswerRow], per_token: bool = True) -> M.Preference:
    env, label, logp, logp0, tokens = _probe_inputs(sub)
    return M.preference(env, M.implicit_reward(logp, logp0, tokens if per_token else None), label)


@computes(CLUSTER_T)
def preference(c: Context, d: Declared) -> MetricValue | None:
    """The preference probe (docs/method.md §Preference probe) of one kind: `margin` (per token, the primary form),
    `margin_sum` (summed) or `accuracy`, each the mean over environments of the per-environment
    value, bootstrapped over environments; absent when the probe did not run on these answers."""
    if not c.sets(c.t)[d.metric.rows].rows:
        return None
    st, field = c.st, "accuracy" if d.field == "accuracy" else "margin"
    pref = probe_preference(c.rows(d).rows, per_token=d.field != "margin_sum")
    if not pref.n_envs:
        return _nan_value(pref.n_partial, pref.n_unscored)
    envs = sorted(pref.per_env)
    vals = [getattr(pref.per_env[e], field) for e in envs]
    c.per_env[d.name] = dict(zip(envs, map(float, vals), strict=True))
    # a mean over environments: the t interval holds its level at a dozen of them (audit.stats); the
    # accuracy is a share, whose interval stays in [0, 1] and does not collapse when no environment differs
    ci = (S.share_t_ci(vals, envs, alpha=st.alpha) if field == "accuracy"
          else S.cluster_t_ci(vals, np.ones(len(vals)), envs, alpha=st.alpha))
    return _from_ci(ci, getattr(pref, field), pref.n_pairs, pref.n_partial, pref.n_unscored)


@computes(RATIO)
def likelihood_auroc(c: Context, d: Declared) -> MetricValue | None:
    """π_0's own within-environment AUROC of per-token log π_0 (valid over invalid); absent when the
    probe did not run on these answers."""
    if not c.sets(c.t)[d.metric.rows].rows:
        return None
    st, sub, fn = c.st, c.rows(d).rows, d.metric.formula
    env, label, _, logp0, tokens = _probe_inputs(sub)
    nan = float("nan")
    score = M.implicit_reward(logp0, np.zeros(len(sub)), tokens) if sub else np.zeros(0)
    whole = fn(env, score, label) if sub else M.Auroc(nan, 0)
    if whole.n_pairs == 0:
        return _nan_value(whole.n_partial, whole.n_unscored)
    envs = sorted(set(env))
    parts = [fn([e] * sum(x == e for x in env),
                [v for x, v in zip(env, score, strict=True) if x == e],
                [lab for x, lab in zip(env, label, strict=True) if x == e]) for e in envs]
    nums = [a.value * a.n_pairs if a.n_pairs else 0.0 for a in parts]
    ci = S.bootstrap_ratio_ci(nums, [a.n_pairs for a in parts], envs, rng=c.rng(d.name), B=st.B, alpha=st.alpha)
    return _from_ci(ci, whole.value, whole.n_pairs, whole.n_partial, whole.n_unscored)
