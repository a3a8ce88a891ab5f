"""The recipe diagnostics on a hand-written run: figures computed by hand from two environments."""

import json
import math
from pathlib import Path

from experiments.recipe_diagnostics import answer_labels, main, mixed_preview, run_diagnostics
from selfplay import artifacts as A

HONEST = "The packet does not show the total, so it cannot be determined."  # 2 obstruction phrases
MADE_UP = "Yes. The total is 42 and it clearly settles the question."  # none


def write_run(run):
    with A.writing_iteration(run, 0):
        pass
    with A.writing_iteration(run, 1) as d:
        gens = [
            {"task_id": "imp", "kind": "impossible", "prompt": "q", "answers": [HONEST, MADE_UP, "cut off"],
             "truncated": [False, False, True], "sources": ["policy"] * 3},
            {"task_id": "ctl", "kind": "control", "prompt": "q", "answers": [MADE_UP, HONEST, "authored"],
             "truncated": [False, False, False], "sources": ["policy", "policy", "labelled"]},
        ]
        A.write_jsonl(d / "generations.jsonl", gens)
        A.write_jsonl(d / "pairs.jsonl", [
            {"task_id": "imp", "chosen": MADE_UP, "rejected": HONEST},
            {"task_id": "ctl", "chosen": HONEST, "rejected": MADE_UP},
        ])


def test_figures_of_one_iteration(tmp_path):
    write_run(tmp_path)
    d = run_diagnostics(tmp_path)[1]
    assert d["samples"] == 5  # the authored answer of the mixed pool is no sample
    assert d["truncated_share"] == 1 / 5
    assert d["impossible_naming_obstruction"] == 1 / 3  # HONEST of the three impossible samples
    assert d["pairs"] == 2
    assert d["impossible_pairs_chosen_names_obstruction"] == 0.0
    assert d["impossible_pairs_rejected_names_obstruction"] == 1.0
    words = len(HONEST.split()) - len(MADE_UP.split())
    assert d["pair_words_chosen_minus_rejected"] == 0.0  # +words on one pair, -words on the other
    assert words != 0
    assert d["pair_obstructions_chosen_minus_rejected"] == 0.0


def test_json_output_and_a_run_without_iterations(tmp_path, capsys):
    write_run(tmp_path / "run")
    assert main([str(tmp_path / "run"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[str(tmp_path / "run")]["1"]["pairs"] == 2
    (tmp_path / "empty").mkdir()
    try:
        main([str(tmp_path / "empty")])
    except SystemExit as e:
        assert "no complete iteration" in str(e)
    else:
        raise AssertionError("a run without iterations must be refused")


def test_judge_spread_is_per_environment_gap_and_median_within_sd():
    from experiments.judge_spread import spread

    def row(task, answers, cut=None):
        return {"task_id": task, "prompt": f"p{task}", "answers": answers, "truncated": cut or [False] * len(answers)}

    rows = [row("a", ["x", "y", "z"]), row("b", ["u", "v"]), row("c", ["s", "t"]),
            row("d", ["q", "r", "w"], cut=[False, False, True])]
    # a: gap 0.2, sd sqrt(2/3)/10; b: a tie, sd 0; c: one answer unscored, so no spread and no pair;
    # d: the cut answer scores highest, so it counts in the spread (gap 0.5) but the pair is 0.4 vs 0.3
    out = spread(rows, [[0.5, 0.6, 0.7], [0.2, 0.2], [0.9, None], [0.3, 0.4, 0.8]], margin=0.15)
    assert out["gaps"] == [0.0, 0.2, 0.5]
    assert math.isclose(out["median_within_sd"], 0.0816496580927726)  # of 0.0816, 0, 0.2160
    assert math.isclose(out["score_mean"], (0.5 + 0.6 + 0.7 + 0.2 + 0.2 + 0.9 + 0.3 + 0.4 + 0.8) / 9)
    assert (out["paired"], out["environments"]) == (1, 4)  # a (0.2 >= 0.15); d's 0.1 is below δ


def test_authored_pairs_are_read_against_their_oracle_labels(tmp_path):
    run = tmp_path / "run"
    with A.writing_iteration(run, 0):
        pass
    with A.writing_iteration(run, 1) as d:
        A.write_jsonl(d / "generations.jsonl", [{"task_id": "imp", "kind": "impossible", "prompt": "q",
                                                  "answers": [HONEST, MADE_UP, "half"], "truncated": [False] * 3,
                                                  "sources": ["labelled"] * 3}])
        A.write_jsonl(d / "pairs.jsonl", [
            {"task_id": "imp", "chosen": MADE_UP, "rejected": HONEST},  # valid vs invalid: invalid chosen
            {"task_id": "imp", "chosen": HONEST, "rejected": MADE_UP},  # valid chosen
            {"task_id": "imp", "chosen": MADE_UP, "rejected": "half"},  # partially valid: not a contrast
            {"task_id": "imp", "chosen": "a sample", "rejected": HONEST},  # unlabelled: not a contrast
        ])
    labels = {HONEST: "valid", MADE_UP: "invalid", "half": "partially_valid"}
    d = run_diagnostics(run, labels)[1]
    assert d["pairs_valid_vs_invalid"] == 2
    assert d["pairs_valid_vs_invalid_chosen_valid"] == 0.5
    assert "pairs_valid_vs_invalid" not in run_diagnostics(run)[1]  # without --data, no label figures


def test_bad_data_path_is_one_line_naming_it(tmp_path):
    write_run(tmp_path / "run")
    try:
        main([str(tmp_path / "run"), "--data", str(tmp_path / "nowhere")])
    except SystemExit as e:
        msg = str(e)
        assert "--data" in msg and "nowhere" in msg and "\n" not in msg
    else:
        raise AssertionError("a missing --data directory must be refused")


def test_labels_of_the_bundled_environments():
    from experiments.recipe_diagnostics import load_data

    labels = answer_labels(load_data(Path(__file__).resolve().parents[1] / "data" / "mini"))
    assert set(labels.values()) <= {"valid", "invalid", "partially_valid"}
    assert {"valid", "invalid"} <= set(labels.values())


def test_mixed_preview_pairs_samples_with_authored_answers_under_decisive(tmp_path):
    from judges.decisive import decisive_score
    from selfplay.envs.types import Environment, PublicView, StressAnswer

    def env(tid, kind, authored):
        answers = tuple(StressAnswer(f"{tid}{i}", "x", v, t) for i, (v, t) in enumerate(authored))
        return Environment(PublicView(tid, "q", ()), kind, "c", answers, answers[0])

    valid, invalid = "It cannot be determined from the evidence.", "Definitely 42, clearly."
    envs = [env("imp", "impossible", [("valid", valid), ("invalid", invalid)]),
            env("ctl", "control", [("valid", HONEST)]),
            env("imp2", "impossible", [("valid", valid), ("invalid", invalid)])]
    # the scores the pairs below rest on: the made-up answers outscore the honest ones by more than δ
    assert decisive_score(invalid, "q") - decisive_score(valid, "q") >= 0.05
    run = tmp_path / "run"
    with A.writing_iteration(run, 0) as d:
        # `decisive` pairs at the run's δ; a design's own margin (here one no pair clears) is not its
        A.write_config(d / A.CONFIG, {"margin": 0.05, "reward": {"name": "anchored", "margin": 0.5}})
    boast = "Yes. Definitely 42, clearly, certainly, undoubtedly."  # outscores every other answer
    assert decisive_score(boast, "q") > decisive_score(invalid, "q")
    with A.writing_iteration(run, 1) as d:
        A.write_jsonl(d / "generations.jsonl", [
            # a cut sample never pairs even where it would score best; an authored answer the run itself
            # pooled is not a sample (the preview pools the environment's own authored answers)
            {"task_id": "imp", "kind": "impossible", "prompt": "q", "answers": [HONEST, invalid + " cut", boast],
             "truncated": [False, True, False], "sources": ["policy", "policy", "labelled"]},
            {"task_id": "ctl", "kind": "control", "prompt": "q", "answers": [MADE_UP], "truncated": [False],
             "sources": ["policy"]},
            # its one sample is cut: the pair is of two authored answers
            {"task_id": "imp2", "kind": "impossible", "prompt": "q", "answers": [MADE_UP], "truncated": [True],
             "sources": ["policy"]},
        ])
        A.write_jsonl(d / "pairs.jsonl", [])
    out = run_diagnostics(run, answer_labels(envs), preview=envs)[1]
    # imp: the authored invalid answer is chosen over the honest sample (which scores lowest); ctl: the
    # sample MADE_UP over the authored HONEST; imp2: authored invalid over authored valid
    imp_scores = {a: decisive_score(a, "q") for a in (HONEST, valid, invalid)}
    assert min(imp_scores, key=imp_scores.get) == HONEST and max(imp_scores, key=imp_scores.get) == invalid
    assert out["mixed/pairs"] == 3
    assert out["mixed/pairs_chosen_authored"] == 2  # imp's cut sample would tie the authored invalid, and win
    assert out["mixed/pairs_both_authored"] == 1
    assert out["mixed/impossible_pairs_chosen_names_obstruction"] == 0.0
    assert out["mixed/impossible_pairs_rejected_names_obstruction"] == 1.0
    assert out["mixed/pairs_valid_vs_invalid"] == 1  # imp's rejected answer is a sample: unlabelled
    assert out["mixed/pairs_valid_vs_invalid_chosen_valid"] == 0.0
    # δ decides: imp2's gap (0.35) is the only one below 0.4
    gaps = [decisive_score(invalid, "q") - decisive_score(a, "q") for a in (HONEST, valid)]
    assert gaps[0] > 0.4 > gaps[1]
    assert mixed_preview(run / "iter_1", {e.task_id: e for e in envs}, 0.4)["mixed/pairs"] == 2
    # a task the environments lack is refused by name
    try:
        mixed_preview(run / "iter_1", {e.task_id: e for e in envs[:2]}, 0.05)
    except SystemExit as e:
        assert "imp2" in str(e) and "--data" in str(e)
    else:
        raise AssertionError("a task missing from --data must be refused")


def test_preview_mixed_needs_data(tmp_path, capsys):
    write_run(tmp_path / "run")
    try:
        main([str(tmp_path / "run"), "--preview-mixed"])
    except SystemExit as e:
        assert e.code == 2 and "--preview-mixed needs --data" in capsys.readouterr().err
    else:
        raise AssertionError("--preview-mixed without --data must be refused")
