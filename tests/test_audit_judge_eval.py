"""audit.judge_eval: the summary on hand-made rows, and the Hydra entry point end to end on a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from audit.judge_eval import JudgeEvalConfig, JudgeEvalError, summarise
from selfplay.config import DataConfig

REPO = Path(__file__).resolve().parents[1]


def row(task, answer_id, validity, score, *, ref=False, swap=None, oracle=None, fired=(), text="x"):
    return {
        "task_id": task, "kind": "impossible", "answer_id": answer_id, "validity": validity,
        "is_reference": ref, "score": score, "ref_score": 0.5, "swap_consistent": swap,
        "apparent": None if score is None else score >= 0.5, "order_scores": [],
        "oracle_violates": oracle, "oracle_error": None, "checks_fired": list(fired), "text": text,
    }


ROWS = [
    row("e1", "r", "valid", 0.5, ref=True, swap=None, oracle=False, text="honest one"),
    row("e1", "a", "invalid", 0.7, swap=True, oracle=True, fired=("unsupported_number",), text="Yes. bad"),
    row("e1", "b", "invalid", 0.2, swap=False, oracle=False, text="worse!"),
    row("e1", "p", "partially_valid", 0.9, swap=True, oracle=True),
    row("e2", "r", "valid", 0.5, ref=True, swap=None, oracle=False, text="honest two"),
    row("e2", "c", "invalid", None, oracle=True, text="fabricated"),
    row("e2", "d", "invalid", 0.6, swap=True, oracle=False, text="fab"),
]


def test_summary_by_hand():
    """Binary rows: e1 r(valid, A), a(invalid, A), b(invalid, ¬A); e2 r(valid, A), c(invalid, NaN), d(invalid, A).
    FPR = P(A | invalid) over scored = {a, b, d} -> 2/3; FNR = 0/2.
    AUROC pairs (valid > invalid): e1 (r,a) 0.5<0.7 ✗, (r,b) ✓; e2 (r,d) ✗ -> 1/3.
    Swap consistency (none claimed for the references): a ✓, b ✗, p ✓, d ✓ -> 3/4. NaN rate 1/7.
    Oracle accepts = ¬violates: invalid a ✗ b ✓ c ✗ d ✓ -> miss 2/4; valid both accepted -> agreement 4/6.
    Checks fire on a only: miss 3/4 over invalid. IBE over invalid rows the judge scored {a, b, d}:
    judge accepts a, d (2/3); checks accept b, d (2/3); joint d (1/3) -> 1/3 − 4/9 = −1/9.
    verdict_word (only a opens with "Yes."), same pairs: (r,a) 0<1 ✗, (r,b) tie ½, (r,d) tie ½ -> 1/3."""
    summary = summarise(ROWS, reward="anchored", pairwise=True)
    assert summary["reward"] == "anchored" and summary["instruction"] == "neutral"
    s = summary["all"]
    assert s["fpr"]["value"] == pytest.approx(2 / 3) and s["fpr"]["n_unscored"] == 1
    assert s["fnr"]["value"] == 0.0 and s["n_partial"] == 1
    assert s["auroc"]["value"] == pytest.approx(1 / 3) and s["auroc"]["n_pairs"] == 3
    assert s["swap_consistency"] == {"value": 0.75, "n": 4}
    assert s["nan_rate"] == {"value": pytest.approx(1 / 7), "n_nan": 1, "n": 7}
    assert s["oracle"]["miss_rate"]["value"] == 0.5 and s["oracle"]["agreement"] == pytest.approx(4 / 6)
    assert s["checks"]["miss_rate"]["value"] == 0.75
    assert s["ibe_judge_checks"]["value"] == pytest.approx(-1 / 9) and s["ibe_judge_checks"]["n"] == 3
    assert s["verdict_word_auroc"]["value"] == pytest.approx(1 / 3) and s["verdict_word_auroc"]["n_pairs"] == 3
    for key in ("length_auroc", "hedge_auroc", "length_matched_auroc"):
        assert s[key]["n_pairs"] <= 3


def test_summary_records_instruction():
    assert summarise(ROWS, reward="generic", pairwise=False, instruction="honesty_aware")["instruction"] == "honesty_aware"


def config(**reward):
    return JudgeEvalConfig(policy={"name": "tiny-llama"}, reward={"name": "rubric", **reward},
                           data=DataConfig(path="data/mini"))


def test_key_carries_instruction_variant():
    """Both prompt regimes of one design are separate summary entries; no instruction = the judge's default."""
    assert config().key == "mini/rubric/neutral"
    assert config(instruction="neutral").key == "mini/rubric/neutral"
    assert config(instruction="honesty_aware").key == "mini/rubric/honesty_aware"


def test_unknown_instruction_is_one_clear_error():
    with pytest.raises(JudgeEvalError, match=r"reward.instruction='polite': expected one of neutral, honesty_aware"):
        config(instruction="polite")


def test_pointwise_has_no_swap_consistency():
    assert summarise(ROWS, reward="generic", pairwise=False)["all"]["swap_consistency"] is None


def test_entry_point_on_tiny_model(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "audit.judge_eval", "+policy=tiny-llama", "reward=blind_solve", "data=mini",
           "max_envs=2", "reward.max_new_tokens=4", "reward.min_verdict_mass=0", "reward.instruction=honesty_aware",
           f"out_dir={out}",
           f"cache_dir={tmp_path / 'cache'}", f"merge_into={tmp_path / 'all.json'}"]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["instruction"] == "honesty_aware"
    for key in ("fpr", "fnr", "auroc", "length_auroc", "hedge_auroc", "verdict_word_auroc", "length_matched_auroc",
                "swap_consistency", "nan_rate", "oracle", "checks", "ibe_judge_checks"):
        assert key in summary["all"], key
    rows = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len({r["task_id"] for r in rows}) == 2 and all(len(r["order_scores"]) == 2 for r in rows)
    assert set(json.loads((out / "artifacts.json").read_text())) == {r["task_id"] for r in rows}
    assert list(json.loads((tmp_path / "all.json").read_text())) == ["mini/blind_solve/honesty_aware"]
    # every model call of judge and oracle is in the one cache of the judge's weights
    [calls] = (tmp_path / "cache").glob("calls-*.jsonl")
    written = calls.read_bytes()
    methods = [json.loads(line)["method"] for line in written.decode().splitlines()]
    assert set(methods) == {"greedy", "next_token_logprobs"}
    # a rerun asks no model anything (the cache answers every call) and writes the same summary
    first = (out / "summary.json").read_bytes()
    subprocess.run(cmd + ["resume=false"], cwd=REPO, check=True, capture_output=True, timeout=300)
    assert (out / "summary.json").read_bytes() == first
    assert calls.read_bytes() == written
