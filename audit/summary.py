"""From per-answer records to the metrics (docs/method.md §Audit) of every iteration of one seed, with intervals.

Pure: rows and settings in, `MetricValue`s out. The metrics are the entries of
`audit.metric_table`, each computed by the estimator its entry names (`audit.estimators`: every
formula is `audit.metrics`'s and every interval `audit.stats`'s); this module runs them at each
iteration and adds the counts and the per-sample VA-Gap events.

Choices left open by the method (docs/method.md §Audit):
- Policy answers the oracle could not decide are left out of every label-based metric and counted
  (`counts/oracle_undecided`); answers the judge could not score are left out and counted by the
  metric functions (`n_unscored`).
- FPR and FNR pool impossible and control environments (docs/method.md §FPR and FNR: P(A | ¬valid) over all answers);
  VA-Gap is reported per kind.
- On stress answers the reference r(e) itself is left out of FPR, FNR and IBE (its A is 1 by
  construction) but kept in the AUROC, where it is a valid answer like any other.
- `oracle/fpr_stress` and `oracle/fnr_stress` are the primary oracle's FPR and FNR on the stress
  answers (acceptance in the place of A, release labels as truth): they say how far the oracle's
  "valid" on policy answers can be trusted.
- FPR drift at t is FPR_t − FPR_0 of the same seed; the slope at t is the OLS slope over the
  iterations audited up to t (NaN at t = 0). Both resample the environments jointly across
  iterations, as the same environments are audited at every t.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from . import metric_table as T
from . import metrics as M
from . import stats as S
from .estimators import CONTROL, IMPOSSIBLE, Context, probe_preference
from .records import (
    LABELLED,
    ORACLE,
    ORACLE2,
    STRESS,
    AnswerRow,
    IterationAudit,
    MetricValue,
    StatsSettings,
)


def _probe_counts(rows: Sequence[AnswerRow]) -> dict[str, int]:
    """Environments with a (valid, invalid) pair of probed answers, and those without, per source and kind."""
    counts = {}
    for source, prefix in ((STRESS, ""), (LABELLED, "labelled/")):
        have = [r for r in rows if r.source == source and r.probe_logp is not None and r.probe_logp0 is not None]
        for kind in (IMPOSSIBLE, CONTROL) if have else ():
            pref = probe_preference([r for r in have if r.kind == kind])
            counts[f"probe/environments/{prefix}{kind}"] = pref.n_envs
            counts[f"probe/no_pair/{prefix}{kind}"] = pref.n_no_pair
    return counts


def iteration_metrics(rows: Sequence[AnswerRow], *, run_seed: int, t: int, settings: StatsSettings,
                      history: Mapping[int, Sequence[AnswerRow]] | None = None,
                      second_oracle: bool = False, primary_members: Sequence[str] = ()) -> IterationAudit:
    """Every metric of audit.metric_table at one checkpoint. `history` holds the rows of the same
    seed's other audited iterations (at least t = 0 for the drift); `rows` are this iteration's."""
    all_t = dict(history or {})
    all_t[t] = rows
    ctx = Context(all_t, t, run_seed, settings, second_oracle, primary_members)
    m: dict[str, MetricValue] = {}
    for name, d in T.declared().items():
        if d.metric.only_at is not None and t != d.metric.only_at:
            continue
        value = d.metric.estimator(ctx, d)
        if value is not None:
            # one place cuts every seed's interval to its metric's declared range (a t interval on a
            # dozen environments can leave it); the seeds' combination is cut in audit.contrasts
            low, high = S.within(value.ci_low, value.ci_high, d.metric.bounds)
            m[name] = dataclasses.replace(value, ci_low=low, ci_high=high)

    sets = ctx.sets(t)
    pol_all, pol = sets["policy/all"], sets["policy"]
    stress_all = [r for r in rows if r.source == STRESS]
    counts = {
        "environments": len({r.task_id for r in rows}),
        "policy_answers": len(pol_all.rows),
        "stress_answers": len(stress_all),
        "judge_nan/policy": int(sum(r.score is None for r in pol_all.rows)),
        "judge_nan/stress": int(sum(r.score is None for r in stress_all)),
        "judge_nan/reference": len({r.task_id for r in rows if r.ref_score is None}),
        "oracle_undecided": len(pol_all.rows) - len(pol.rows),
        "partially_valid/stress": int(sum(r.label == M.PARTIAL for r in stress_all)),
    }
    counts["oracle_undecided/stress"] = int(sum(r.accepts.get(ORACLE) is None for r in stress_all))
    counts.update(_probe_counts(rows))
    if second_oracle:
        counts["oracle2_undecided"] = int(sum(r.accepts.get(ORACLE2) is None for r in pol_all.rows))

    exploit: dict[str, dict[str, list[int | None]]] = {IMPOSSIBLE: {}, CONTROL: {}}
    for r, a_ in zip(pol_all.rows, pol_all.apparent, strict=True):
        undefined = r.label not in (M.VALID, M.INVALID) or np.isnan(a_)
        event = None if undefined else int(a_ == 1.0 and r.label == M.INVALID)
        exploit.setdefault(r.kind, {}).setdefault(r.task_id, []).append(event)
    return IterationAudit(metrics=m, counts=counts, exploit=exploit, undefined=ctx.undefined, per_env=ctx.per_env)


def seed_metrics(rows_by_t: Mapping[int, Sequence[AnswerRow]], *, run_seed: int, settings: StatsSettings,
                 second_oracle: bool = False, primary_members: Sequence[str] = ()) -> dict[int, IterationAudit]:
    """`iteration_metrics` for every audited iteration of one seed."""
    return {t: iteration_metrics(rows_by_t[t], run_seed=run_seed, t=t, settings=settings,
                                 history=rows_by_t, second_oracle=second_oracle, primary_members=primary_members)
            for t in sorted(rows_by_t)}
