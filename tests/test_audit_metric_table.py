"""audit.metric_table: a metric declared there is computed, gated and written by its entry alone,
whatever its name; the table's order and titles are the committed reports'; one bootstrap B."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit import calibration as C
from audit import estimators as E
from audit import metric_table as T
from audit import metrics as M
from audit import report as R
from audit import stats as S
from audit.records import CHECKS, ORACLE, AnswerRow
from audit.report_tables import metric_title, num
from audit.results import build_results, csv_rows
from audit.summary import StatsSettings, seed_metrics

ROOT = Path(__file__).resolve().parents[1]
# an oracle-dependent metric whose name no rule about names would recognise: mean(A) per kind
DUMMY = T.Metric("zz_dummy/{kind}", formula=M.va_gap, estimator=E.va_gap, interval=T.RATIO, rows="policy",
                 oracle=True, title="Dummy share", fields=("apparent",), kinds=T.KINDS)


def pol(env: str, kind: str, j: int, score: float, label: str) -> AnswerRow:
    return AnswerRow(env, kind, "policy", f"p{j}", f"answer {j}", score, 0.5, label, {CHECKS: True})


# reference score 0.5 everywhere, A = 1[s ≥ 0.5]: impossible I1 → 1, 0, 1; I2 → 1, 0 (3 of 5);
# control C1 → 1, 0 (1 of 2)
ROWS = [pol("I1", "impossible", 0, 0.7, "invalid"), pol("I1", "impossible", 1, 0.3, "valid"),
        pol("I1", "impossible", 2, 0.6, "valid"), pol("I2", "impossible", 0, 0.9, "invalid"),
        pol("I2", "impossible", 1, 0.2, "invalid"), pol("C1", "control", 0, 0.8, "valid"),
        pol("C1", "control", 1, 0.1, "invalid")]


def labelled(label: str, accept: bool) -> AnswerRow:
    return AnswerRow("I1", "impossible", "labelled", "l", "x", None, None, label, {CHECKS: True, ORACLE: accept})


def calibration(passes: bool) -> dict:
    """The gate on 10 valid answers the oracle accepts and 10 invalid it rejects (a pass), or on no
    on-policy set at all (a failure)."""
    on_policy = [labelled("valid", True) for _ in range(10)] + [labelled("invalid", False) for _ in range(10)]
    cal = C.run_calibration([], on_policy if passes else None, [None] * 20 if passes else [], {0: ROWS},
                            ["oracle"], C.GateConfig(), "on-policy set (labels.jsonl)")
    assert cal["gate"]["status"] == ("ok" if passes else "unverified")
    return cal


def audit_doc(passes: bool) -> dict:
    audits = seed_metrics({0: ROWS}, run_seed=0, settings=StatsSettings(B=1000))
    return build_results({}, {("r", 0): audits}, {("r", 0, 0): "iter_0"}, {("r", 0): "exp"}, [],
                         {("r", 0): calibration(passes)})


@pytest.fixture
def with_dummy(monkeypatch):
    monkeypatch.setattr(T, "TABLE", (*T.TABLE, DUMMY))


def test_a_declared_oracle_metric_is_unverified_when_the_gate_fails_whatever_its_name(with_dummy):
    doc = audit_doc(passes=False)
    it = doc["rewards"]["r"]["seeds"]["0"]["iterations"]["0"]["metrics"]
    reason = "on-policy set (labels.jsonl): none (no labelled answers of the audited policy; the gate reads " \
             "only those: label some with `python -m audit.label`)"
    for name in ("zz_dummy/impossible", "zz_dummy/control"):
        m = it[name]
        assert (m["status"], m["value"], m["ci_low"], m["ci_high"], m["reason"]) == (
            "unverified", None, None, None, reason), name
        assert doc["rewards"]["r"]["across_seeds"]["0"][name]["status"] == "unverified"
    # the same answers under a declaration without the oracle keep their number
    assert it["apparent/impossible"]["status"] == "ok" and it["apparent/impossible"]["value"] == 0.6
    csv = {(r["seed"], r["metric"]): r for r in csv_rows(doc)}
    assert csv[("0", "zz_dummy/impossible")]["value"] == "unverified"
    assert csv[("0", "zz_dummy/impossible")]["reason"] == reason
    assert csv[("all", "zz_dummy/control")]["value"] == "unverified"
    assert "zz_dummy/impossible" in R.metric_names(doc)
    assert R.metric_table(doc, "zz_dummy/impossible")[-1] == "| r | unverified |"


def test_the_same_metric_is_a_number_when_the_gate_passes(with_dummy):
    doc = audit_doc(passes=True)
    it = doc["rewards"]["r"]["seeds"]["0"]["iterations"]["0"]["metrics"]
    imp, ctl = it["zz_dummy/impossible"], it["zz_dummy/control"]
    assert (imp["status"], imp["value"], imp["n"]) == ("ok", 0.6, 5)
    assert (ctl["status"], ctl["value"], ctl["n"]) == ("ok", 0.5, 2)
    # two impossible environments, I1 at 2/3 and I2 at 1/2: every resample lies between them
    assert 0.5 <= imp["ci_low"] <= 0.6 <= imp["ci_high"] <= 2 / 3
    csv = {(r["seed"], r["metric"]): r for r in csv_rows(doc)}
    assert csv[("0", "zz_dummy/impossible")]["value"] == 0.6
    lines = R.metric_table(doc, "zz_dummy/impossible")
    assert lines[-1] == f"| r | 0.600 [{num(imp['ci_low'])}, {num(imp['ci_high'])}]* |"
    assert metric_title("zz_dummy/impossible") == "Dummy share — `zz_dummy/impossible`"


def test_an_undeclared_metric_cannot_pass_the_gate():
    with pytest.raises(KeyError, match="'nope/policy' is not declared in audit.metric_table.TABLE"):
        C.metric_gate({"gate": {"status": "ok", "reasons": []}}, "nope/policy", 0)


def test_an_entry_declaring_another_interval_than_its_estimator_gives_is_refused():
    with pytest.raises(ValueError, match="metric 'odd': declares a 'ratio' interval, but its estimator "
                                         "'valid_rate_drift' gives 't'"):
        T.Metric("odd", formula=M.valid_rate, estimator=E.valid_rate_drift, interval=T.RATIO, rows="policy",
                 oracle=True, title="Odd")


def test_an_entry_names_its_parts_by_keyword():
    with pytest.raises(TypeError):
        T.Metric("odd", M.va_gap, E.va_gap, T.RATIO, "policy", True, "Odd")  # type: ignore[misc]


def test_a_name_declared_twice_is_refused(monkeypatch):
    again = T.Metric("youden_j", formula=M.youden_j, estimator=E.youden_j, interval=T.STATISTIC, rows="policy",
                     oracle=False, title="J")
    monkeypatch.setattr(T, "TABLE", (*T.TABLE, again))
    with pytest.raises(ValueError, match="'youden_j' is declared twice"):
        T.declared()


def test_every_figure_row_is_declared():
    names = T.declared()
    assert [m for f in T.FIGURES for m in f.metrics if m not in names] == []


@pytest.mark.parametrize("run", ["probe_check", "selfplay", "controls", "demo", "judge_designs", "judge_designs/policy",
                                 "judge_designs/labelled"])
def test_committed_reports_list_the_metrics_in_the_tables_order_and_titles(run):
    """The per-metric sections of a committed report.md are what the table renders from its audit.json."""
    doc = R.load_dir(ROOT / "experiments" / "results" / run)
    lines = []
    for metric in R.metric_names(doc):
        lines += [f"## {metric_title(metric)}", "", *R.metric_table(doc, metric), ""]
    assert "\n".join(lines) in (ROOT / "experiments" / "results" / run / "report.md").read_text(encoding="utf-8")


def test_one_bootstrap_B():
    from omegaconf import OmegaConf

    from audit.config import BootstrapConfig
    from audit.power import SimSettings

    assert OmegaConf.load(ROOT / "conf" / "audit.yaml").bootstrap.B == S.DEFAULT_B
    assert BootstrapConfig().B == StatsSettings().B == SimSettings().B == S.DEFAULT_B
