"""`python -m audit.report` on hand-made audit.json documents: table cells, paired comparisons, merging."""

import json
from pathlib import Path

import pytest

from audit import report
from audit.results import VERSION, across_seeds


def metric(value, low=None, high=None, n=4):
    return {"value": value, "ci_low": low, "ci_high": high, "n": n, "n_partial": 0, "n_unscored": 0}


def iteration(va_gap, fpr, exploit):
    return {"checkpoint": "x", "counts": {}, "exploit": {"impossible": exploit, "control": {}},
            "metrics": {"va_gap/impossible": metric(va_gap, 0.0, 1.0), "fpr/policy": metric(fpr, 0.1, 0.9)}}


def reward_entry(seeds):
    entry = {"seeds": {s: {"experiment": "exp", "iterations": its} for s, its in seeds.items()}}
    entry["across_seeds"] = across_seeds(entry["seeds"])
    return entry


# final-iteration VA-Gap events on impossible environments, per (seed, task): anchored exploits in 3
# pairs where rubric does not, never the reverse; generic agrees with rubric everywhere.
RUBRIC_T1 = {"E1": [0, 0], "E2": [1, None]}
DOC = {
    "version": VERSION,
    "settings": {"n": 2, "seed": 0, "bootstrap": {"B": 2000, "alpha": 0.05}, "oracle": {"model": "initial"}},
    "rewards": {
        "anchored": reward_entry({
            "0": {"0": iteration(0.2, 0.5, {}), "1": iteration(0.2, 0.5, {"E1": [1, 1], "E2": [1, 1]})},
            "1": {"0": iteration(0.4, None, {}), "1": iteration(0.6, 0.5, {"E1": [1, 0], "E2": [1, 0]})},
        }),
        "rubric": reward_entry({
            "0": {"0": iteration(0.1, 0.3, {}), "1": iteration(0.1, 0.3, RUBRIC_T1)},
            "1": {"0": iteration(0.1, 0.3, {}), "1": iteration(0.1, 0.3, {"E1": [0, 0], "E2": [1, 0]})},
        }),
        "generic": reward_entry({
            "0": {"0": iteration(0.3, 0.25, {}), "1": iteration(0.35, 0.25, RUBRIC_T1)},
        }),
    },
}


def write(path: Path, doc) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "audit.json").write_text(json.dumps(doc))
    return path


def row(md: str, heading: str, reward: str) -> str:
    section = md.split(f"`{heading}`", 1)[1]
    return next(line for line in section.splitlines() if line.startswith(f"| {reward} |"))


def test_table_cells(tmp_path):
    """Seed = all holds seed and environment variation (audit.contrasts.seed_interval): each seed's
    environment SE is its interval's half-width / z (no environments recorded: df ∞), here
    0.5/1.95996 = 0.25510 for va_gap; var = SE² + sd²/S.
    anchored va_gap/impossible at t = 0 over seeds 0.2 and 0.4: var = 0.065077 + 0.02/2 = 0.075077,
    SE 0.27401, df = 0.075077² / (0.01²/1) = 56.369, t = 2.00335 → 0.3 ± 0.54893 = [−0.249, 0.849],
    cut to a rate's range: [0, 0.849].
    At t = 1: 0.2 and 0.6: var = 0.065077 + 0.04, SE 0.32416, df 6.901 → [−0.369, 1.169] → [0, 1].
    rubric: equal seeds, var = SE², df ∞ → 0.1 ± 1.96 · 0.2551 = [−0.400, 0.600] → [0, 0.600].
    generic has one seed: its value and bootstrap interval, with *.
    fpr/policy at t = 0 for anchored has one defined seed of two: mean 0.5, no interval (—); at t = 1
    both 0.5 with intervals [0.1, 0.9] → 0.5 ± 0.4."""
    out = report.write_report(write(tmp_path, DOC))
    md = out.read_text()
    assert row(md, "va_gap/impossible", "anchored") == "| anchored | 0.300 [0.000, 0.849] | 0.400 [0.000, 1.000] |"
    assert row(md, "va_gap/impossible", "generic") == "| generic | 0.300 [0.000, 1.000]* | 0.350 [0.000, 1.000]* |"
    assert row(md, "va_gap/impossible", "rubric") == "| rubric | 0.100 [0.000, 0.600] | 0.100 [0.000, 0.600] |"
    assert row(md, "fpr/policy", "anchored").startswith("| anchored | 0.500 [—, —] | 0.500 [0.100, 0.900] |")
    assert md.index("`va_gap/impossible`") < md.index("`fpr/policy`")
    for name in ("va_gap_fpr.png", "discrimination.png", "ibe.png", "kl_curve.png"):
        assert (tmp_path / "figures" / name).is_file()
        assert f"](figures/{name})" in md


def test_paired_environment_bootstrap_against_rubric_with_bonferroni():
    """Final iteration t = 1, VA-Gap events pooled per environment over the seeds both rewards ran:
    anchored E1 [1,1 | 1,0] 3/4, E2 [1,1 | 1,0] 3/4; rubric E1 [0,0 | 0,0] 0/4, E2 [1 | 1,0] 2/3
    (its undefined sample left out). Estimate 6/8 − 2/7 = 13/28. A replicate draws two environments
    for both rewards at once: (E1, E1) 3/4 − 0 = 3/4, (E2, E2) 3/4 − 2/3 = 1/12, mixed 13/28; each
    end holds a quarter of the draws, so the 95% interval is [1/12, 3/4] and no replicate is ≤ 0:
    p = 0, Bonferroni 0. generic vs rubric (seed 0 only): identical events, every replicate 0,
    p = 1 (capped), Bonferroni min(1, 2 · 1) = 1."""
    base, note, rows = report.comparisons(DOC)
    assert base == "rubric" and note == "Each reward against `rubric`."
    by = {r["reward"]: r for r in rows}
    a = by["anchored"]
    assert (a["iteration"], a["environments"], a["n_reward"], a["n_baseline"]) == (1, 2, 8, 7)
    assert a["diff"] == pytest.approx(13 / 28)
    assert (a["ci_low"], a["ci_high"]) == (pytest.approx(1 / 12), pytest.approx(0.75))
    assert a["p"] == 0.0 and a["p_bonferroni"] == 0.0 and a["n_undefined"] == 0 and a["B"] == 2000
    g = by["generic"]
    assert (g["diff"], g["ci_low"], g["ci_high"], g["p"], g["p_bonferroni"]) == (0.0, 0.0, 0.0, 1.0, 1.0)
    md = report.render(DOC)
    assert "| anchored | rubric | 1 | 2 | 8 / 7 | 0.464 [0.083, 0.750] | 0 of 2000 | 0.000 | 0.000 |" in md


def test_unverified_cells_and_comparison_when_the_gate_fails():
    """A seed whose gate failed: its oracle-dependent cells read `unverified`, never a number, the
    calibration table comes first with both sources (stress beside the on-policy set, and the
    on-policy labels of a checkpoint), the reasons and the records a verifier could not decide, and
    a comparison involving it is withheld."""
    from audit.results import gated

    on_policy = {
        "agreement": 0.5, "accept_invalid": 1.0, "reject_valid": 0.0, "n_valid": 10, "n_invalid": 10,
        "n_accept_invalid": 10, "n_reject_valid": 0, "n_partial": 0, "n_undecided": 0, "undecided": 0.0,
        "n_answers": 20}
    stress = {**on_policy, "agreement": 1.0, "accept_invalid": 0.0, "n_accept_invalid": 0}
    calib = {"verifiers": {"oracle": {"stress": stress, "labelled": on_policy}},
             "checkpoints": {"1": {"oracle": on_policy}},
             "gate": {"status": "unverified", "reasons": ["on-policy set (labels.jsonl): the primary oracle accepts "
                                                          "100.0% of labelled invalid answers (10/10; > 20.0%)"],
                      "warnings": []},
             "undecided": {"oracle": {"R7": {"n_undecided": 3, "n_answers": 4}}, "checks": {}}}
    seed = {"experiment": "exp", "calibration": calib, "iterations": {"1": {
        "checkpoint": "x", "counts": {}, "exploit": {"impossible": {"E1": [1, 1]}, "control": {}},
        "metrics": {"va_gap/impossible": gated("va_gap/impossible", metric(0.5, 0.1, 0.9), calib),
                    "apparent/impossible": gated("apparent/impossible", metric(0.7, 0.1, 0.9), calib)}}}}
    entry = {"seeds": {"0": seed}}
    entry["across_seeds"] = across_seeds(entry["seeds"])
    doc = {**DOC, "rewards": {"rubric": DOC["rewards"]["rubric"], "anchored": entry}}
    md = report.render({**doc, "settings": {**DOC["settings"], "oracle": None}})
    assert "oracle the data's default" in md
    assert md.index("## Oracle calibration") < md.index("`va_gap/impossible`")
    assert row(md, "va_gap/impossible", "anchored") == "| anchored |  | unverified |"
    assert row(md, "apparent/impossible", "anchored") == "| anchored |  | 0.700 [0.100, 0.900]* |"
    assert "accepts 100.0% of labelled invalid answers (10/10; > 20.0%)" in md
    assert "| anchored | 0 | oracle | on-policy | 0.500 | 1.000 (10/10) | 0.000 (0/10) |" in md
    assert "| anchored | 0 | oracle | stress | 1.000 | 0.000 (0/10) | 0.000 (0/10) |" in md
    assert "| anchored | 0 | oracle | on-policy t = 1 | 0.500 | 1.000 (10/10) |" in md
    assert "on-policy set (labels.jsonl): the primary oracle accepts 100.0%" in md
    assert "- `anchored` seed 0, `oracle`: 1 record(s): `R7` (3 of 4)." in md
    [cmp] = report.comparisons(doc)[2]
    assert cmp["status"] == "unverified" and cmp["reason"] == "the oracle gate failed for `anchored` seed 0"


def test_without_rubric_compares_to_first_reward_and_says_so():
    doc = {**DOC, "rewards": {k: v for k, v in DOC["rewards"].items() if k != "rubric"}}
    base, note, rows = report.comparisons(doc)
    assert base == "anchored" and "Neither `random` nor `rubric` was part of this experiment" in note
    assert [r["reward"] for r in rows] == ["generic"]
    assert "Neither `random` nor `rubric` was part of this experiment" in report.render(doc)


def test_the_null_is_the_baseline_where_it_ran():
    """With the null `random` audited (it exploits nowhere: E1 [0,0 | 0,0], E2 [0,0 | 0,0]), every
    other reward is read against its events, rubric included: anchored 6/8 − 0 = 3/4, rubric
    2/7 − 0 (its undefined sample left out), generic on seed 0 only 1/3 − 0. The audit's own
    `baseline=` wins where it ran. The header names one seed as `seed`, two as `seeds`."""
    zero = {"E1": [0, 0], "E2": [0, 0]}
    null = reward_entry({s: {"0": iteration(0.1, 0.3, {}), "1": iteration(0.1, 0.3, zero)} for s in ("0", "1")})
    doc = {**DOC, "rewards": {**DOC["rewards"], "random": null}}
    base, note, rows = report.comparisons(doc)
    assert base == "random" and note == "Each reward against `random`."
    assert all(r["baseline"] == "random" for r in rows)
    by = {r["reward"]: r for r in rows}
    assert sorted(by) == ["anchored", "generic", "rubric"]
    assert by["anchored"]["diff"] == pytest.approx(3 / 4) and by["rubric"]["diff"] == pytest.approx(2 / 7)
    assert by["generic"]["diff"] == pytest.approx(1 / 3)
    assert "| anchored | random | 1 | 2 | 8 / 8 | 0.750 [" in report.render(doc)
    chosen = {**doc, "settings": {**doc["settings"], "baseline": "rubric"}}
    base, note, rows = report.comparisons(chosen)
    assert base == "rubric" and {r["reward"] for r in rows} == {"anchored", "generic", "random"}
    one = {**doc, "rewards": {**doc["rewards"], "random": reward_entry({"0": null["seeds"]["0"]["iterations"]})}}
    assert "`anchored` seeds 0, 1; `generic` seed 0; `random` seed 0;" in report.render(one)


def test_merges_audits_below_the_dir_and_refuses_duplicates(tmp_path):
    for reward in ("anchored", "rubric"):
        write(tmp_path / reward, {**DOC, "rewards": {reward: DOC["rewards"][reward]}})
    md = report.write_report(tmp_path).read_text()
    assert row(md, "va_gap/impossible", "anchored") == "| anchored | 0.300 [0.000, 0.849] | 0.400 [0.000, 1.000] |"
    assert "| rubric |" in md
    write(tmp_path / "anchored" / "seed0", {**DOC, "rewards": {"anchored": DOC["rewards"]["anchored"]}})
    with pytest.raises(report.ReportError, match="anchored seed 0 is audited in both"):
        report.load_dir(tmp_path)


def test_cli_errors(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 1
    assert "no audit.json found" in capsys.readouterr().err
    (tmp_path / "audit.json").write_text("{}")
    assert report.main([str(tmp_path)]) == 1
    assert "not an audit.json" in capsys.readouterr().err
    assert report.main([str(tmp_path / "nope")]) == 1


def test_training_table_reads_each_checkpoints_metrics(tmp_path):
    """The report's training table comes from iter_<t>/metrics.json beside the audited checkpoint: counts
    as integers, rates to 3 places, the drop reasons that occurred; t = 0 (nothing trained) has no row."""
    doc = json.loads(json.dumps(DOC))
    for t in ("0", "1"):
        doc["rewards"]["generic"]["seeds"]["0"]["iterations"][t]["checkpoint"] = f"generic/seed0/iter_{t}"
    ckpt = tmp_path / "generic" / "seed0" / "iter_1"
    ckpt.mkdir(parents=True)
    (ckpt / "metrics.json").write_text(json.dumps({"iteration": 1, "metrics": {
        "pairs/kept": 17.0, "pairs/dropped_tie": 1.0, "pairs/dropped_margin": 0.0, "train/steps": 10.0,
        "train/loss": 0.5634, "train/rewards_margin": 0.3351, "sample/truncated_share": 7 / 72}}))
    from selfplay.artifacts import write_manifest

    write_manifest(ckpt)  # read as training wrote it: through its DONE
    md = report.write_report(write(tmp_path, doc)).read_text()
    section = md.split("## Training per iteration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| generic |")]
    assert rows == ["| generic | 0 | 1 | 17 | 17 | 10 | 0.563 | — | — | 0.335 | — | — | 0.097 | — | — | 1 tie |"]
    assert md.index("## Training per iteration") < md.index("`va_gap/impossible`")


def test_a_sweep_of_many_runs_keeps_one_colour_per_reward_and_a_marker_per_seed():
    """Six rewards × up to three seeds (the judge-design experiment's eleven runs): the runs of a
    reward share its colour and differ in marker, and no two runs share both — a colour per line
    would give the eleventh run the first one's colour."""
    from audit.figures import run_styles

    runs = [(r, s) for r, n in (("anchored", 1), ("blind_solve", 1), ("commit_first", 1), ("decisive", 3),
                               ("oracle_verdict", 2), ("random", 3)) for s in map(str, range(n))]
    styles = run_styles(runs)
    assert len(set(styles.values())) == len(runs) == 11
    assert styles[("anchored", "0")] == ("C0", "o") and styles[("random", "2")] == ("C5", "D")
    assert {styles[("decisive", s)][0] for s in "012"} == {"C3"}
    assert styles[("random", "0")][0] != styles[("anchored", "0")][0]


def _write_metrics(ckpt: Path, metrics: dict) -> None:
    from selfplay.artifacts import write_manifest

    ckpt.mkdir(parents=True)
    (ckpt / "metrics.json").write_text(json.dumps({"iteration": 1, "metrics": metrics}))
    write_manifest(ckpt)  # read as training wrote it: through its DONE


def test_data_writes_the_merged_audit_beside_the_report_and_never_inside_dir(tmp_path, capsys):
    """Two rewards audited apart, each checkpoint with its training record: --data writes one
    audit.json holding both, each checkpoint named from where it is written so that a report of the
    merged file still finds the training record, and its csv. Inside DIR (DIR itself, a part's dir or
    any dir below) it is refused before anything is written: it would hide or repeat the parts."""
    root = tmp_path / "runs"
    for reward in ("anchored", "rubric"):
        write(root / reward, {**DOC, "rewards": {reward: DOC["rewards"][reward]}})
    _write_metrics(root / "anchored" / "x", {"pairs/kept": 7})
    for inside in (root, root / "anchored", root / "results"):
        assert report.main([str(root), "--out", str(inside / "report.md"), "--data"]) == 1
        assert "--data writes audit.json there, inside" in capsys.readouterr().err
    assert sorted(p.name for p in root.iterdir()) == ["anchored", "rubric"]
    assert sorted(p.name for p in (root / "anchored").iterdir()) == ["audit.json", "x"]
    out = tmp_path / "results" / "mixed" / "report.md"
    assert report.main([str(root), "--out", str(out), "--data"]) == 0
    merged = json.loads((out.parent / "audit.json").read_text())
    assert sorted(merged["rewards"]) == ["anchored", "rubric"] and "train" not in merged
    assert merged["rewards"]["anchored"]["seeds"]["1"]["iterations"]["1"]["checkpoint"] == "../../runs/anchored/x"
    assert merged["rewards"]["anchored"]["across_seeds"]["1"]["va_gap/impossible"]["mean"] == pytest.approx(0.4)
    csv_lines = (out.parent / "audit.csv").read_text().splitlines()
    assert any(line.startswith("rubric,1,1,va_gap/impossible,0.1,") for line in csv_lines)
    assert not any(",nan," in line for line in csv_lines)  # undefined is empty, as audit.gap writes it
    assert "anchored,all,0,fpr/policy,0.5,,,1,,," in csv_lines  # one seed defined: no interval
    back = report.load_dir(out.parent)  # read back: the same rewards, the training record still found
    assert back["rewards"].keys() == merged["rewards"].keys()
    assert back["train"]["anchored"]["1"]["1"]["metrics"]["pairs/kept"] == 7


def test_include_merges_a_committed_audit_back_in_and_refuses_a_reward_seed_twice(tmp_path, capsys):
    """Runs audited on another machine, kept as the merged audit.json --data wrote, join a run audited
    here: --include reads that document, names its checkpoints from DIR and writes them back out named
    from --out (a directory at another depth, so a name left as it was would point elsewhere); the
    same reward × seed in the included file and under DIR, an audit named twice, and a missing file
    are each one line with nothing written."""
    root = tmp_path / "runs"
    write(root / "anchored", {**DOC, "rewards": {"anchored": DOC["rewards"]["anchored"]}})
    write(root / "rubric", {**DOC, "rewards": {"rubric": DOC["rewards"]["rubric"]}})
    _write_metrics(root / "rubric" / "x", {"pairs/kept": 5})
    elsewhere = tmp_path / "results" / "jd"
    assert report.main([str(root / "rubric"), "--out", str(elsewhere / "report.md"), "--data"]) == 0
    committed = elsewhere / "audit.json"
    assert json.loads(committed.read_text())["rewards"]["rubric"]["seeds"]["0"]["iterations"]["1"][
        "checkpoint"] == "../../runs/rubric/x"
    out = tmp_path / "jd" / "report.md"
    for bad in (tmp_path / "nope.json", elsewhere):
        assert report.main([str(root / "anchored"), "--include", str(bad), "--out", str(out), "--data"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err and "--include" in err
    assert report.main([str(root / "anchored"), "--include", str(committed), "--include", str(committed),
                        "--out", str(out), "--data"]) == 1
    assert "already read" in capsys.readouterr().err
    assert report.main([str(root), "--include", str(committed), "--out", str(out), "--data"]) == 1
    assert "rubric seed 0 is audited in both" in capsys.readouterr().err
    assert not out.parent.exists()
    assert report.main([str(root / "anchored"), "--include", str(committed), "--out", str(out), "--data"]) == 0
    merged = json.loads((out.parent / "audit.json").read_text())
    assert sorted(merged["rewards"]) == ["anchored", "rubric"]
    rubric = merged["rewards"]["rubric"]["seeds"]["0"]["iterations"]["1"]
    assert rubric["checkpoint"] == "../runs/rubric/x"
    assert rubric["metrics"] == DOC["rewards"]["rubric"]["seeds"]["0"]["iterations"]["1"]["metrics"]
    assert merged["rewards"]["anchored"]["seeds"]["0"]["iterations"]["1"]["checkpoint"] == "../runs/anchored/x"
    md = out.read_text()
    assert "| anchored |" in md and "| rubric | 0 | 1 |" in md  # the included run's training record found
    (tmp_path / "empty").mkdir()
    again = report.load_dir(tmp_path / "empty", [out.parent / "audit.json"])
    assert "no audit.json below it" in capsys.readouterr().err
    assert again["rewards"]["rubric"]["seeds"]["0"]["iterations"]["1"]["checkpoint"] == "../runs/rubric/x"
    assert again["train"]["rubric"]["0"]["1"]["metrics"]["pairs/kept"] == 5


def test_include_reads_a_merge_of_audits_with_different_settings(tmp_path):
    """--data of audits made with different settings lists each; included again, that list is read as
    the audits' settings, not nested or taken for one audit's."""
    root = tmp_path / "runs"
    write(root / "anchored", {**DOC, "rewards": {"anchored": DOC["rewards"]["anchored"]}})
    write(root / "rubric", {**DOC, "settings": {**DOC["settings"], "n": 3}, "rewards": {"rubric": DOC["rewards"]["rubric"]}})
    report.write_report(root, tmp_path / "a" / "report.md", data=True)
    merged = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert [s["n"] for s in merged["settings"]] == [2, 3]
    (tmp_path / "empty").mkdir()
    again = report.load_dir(tmp_path / "empty", [tmp_path / "a" / "audit.json"])
    assert [s["n"] for s in again["settings"]] == [2, 3] and sorted(again["rewards"]) == ["anchored", "rubric"]


def test_against_names_an_audited_reward_or_writes_nothing(tmp_path, capsys):
    write(tmp_path, DOC)
    assert report.main([str(tmp_path), "--against", "decisive"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--against decisive: not a reward of this audit (audited: anchored, generic, rubric)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.json"]
    assert report.main([str(tmp_path), "--against", "rubric"]) == 0
    assert "| reward | minus | metric |" in (tmp_path / "report.md").read_text()
