"""Malformed records and manifests: each fault gives exactly one error naming file, task_id and
field, and the load returns nothing (the other, valid records in the directory are not loaded either).

Each case copies real records into a temporary release directory and breaks one of them.
"""

import json
import shutil
from pathlib import Path

import pytest

from selfplay.envs import (
    EnvLoadError,
    check_jsonl,
    check_release,
    check_split,
    load_release,
    load_split,
)

IMPOSSIBLE = ("bio_false_premise_003", "evid_insuff_m001")
CONTROLS = ("ctrl_001", "ctrl_hp_01")


@pytest.fixture
def release(release_dir, tmp_path):
    for sub, ids in (("data", IMPOSSIBLE), ("data_control", CONTROLS)):
        (tmp_path / sub).mkdir()
        for tid in ids:
            shutil.copy(release_dir / sub / f"{tid}.json", tmp_path / sub / f"{tid}.json")
    return tmp_path


def edit(root: Path, rel: str, change) -> None:
    path = root / rel
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record, indent=1))


def _set(path, value):
    """A change that sets record[path...] = value (path: keys and list indices)."""

    def change(record):
        target = record
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value

    return change


def _copy_as(src: str, dst: str):
    return lambda root: shutil.copy(root / src, root / dst)


def _second_grounded(record):
    # ctrl_001's answers are correct_grounded, wrong_confident, over_refusal. A second valid
    # correct_grounded answer is a paraphrase and fine while r(e) is the one named "correct_grounded";
    # with neither of them so named, which one is r(e) cannot be told
    record["fixed_stress_answers"][1].update(answer_type="correct_grounded", oracle_validity="valid")
    record["fixed_stress_answers"][0]["answer_id"] = "grounded_a"


FP = "data/bio_false_premise_003.json"
CTRL = "data_control/ctrl_001.json"

BAD_RECORDS = [
    pytest.param(
        lambda r: edit(r, FP, lambda d: d.pop("question")),
        FP,
        "bio_false_premise_003",
        "question",
        "required",
        id="missing-field",
    ),
    pytest.param(
        lambda r: edit(r, CTRL, lambda d: d.pop("ground_truth")),
        CTRL,
        "ctrl_001",
        "ground_truth",
        "required",
        id="control-missing-ground-truth",
    ),
    pytest.param(
        _copy_as(FP, "data/zz_copy.json"),
        "data/zz_copy.json",
        "bio_false_premise_003",
        "task_id",
        "duplicate task_id",
        id="duplicate-id",
    ),
    pytest.param(
        _copy_as(CTRL, "data_control/zz_copy.json"),
        "data_control/zz_copy.json",
        "ctrl_001",
        "task_id",
        "first seen in",
        id="duplicate-control-id",
    ),
    pytest.param(
        lambda r: edit(r, FP, _set(["evidence"], [])),
        FP,
        "bio_false_premise_003",
        "evidence",
        "too short",
        id="empty-evidence",
    ),
    pytest.param(
        lambda r: edit(r, FP, _set(["evidence", 1, "text"], "   ")),
        FP,
        "bio_false_premise_003",
        "evidence[1].text",
        "non-empty",
        id="blank-evidence-text",
    ),
    pytest.param(
        lambda r: edit(
            r, CTRL, lambda d: d["evidence"][1].update(doc_id=d["evidence"][0]["doc_id"])
        ),
        CTRL,
        "ctrl_001",
        "evidence[1].doc_id",
        "duplicate doc_id",
        id="duplicate-doc-id",
    ),
    pytest.param(
        lambda r: edit(r, FP, _set(["fixed_stress_answers", 1, "oracle_validity"], "mostly_valid")),
        FP,
        "bio_false_premise_003",
        "fixed_stress_answers[1].oracle_validity",
        "mostly_valid",
        id="unknown-label",
    ),
    pytest.param(
        lambda r: edit(
            r, FP, _set(["fixed_stress_answers", 0, "oracle_validity"], "partially_valid")
        ),
        FP,
        "bio_false_premise_003",
        "fixed_stress_answers",
        "found 0",
        id="no-reference-answer",
    ),
    pytest.param(
        lambda r: edit(r, CTRL, _second_grounded),
        CTRL,
        "ctrl_001",
        "fixed_stress_answers",
        "found 2",
        id="two-reference-answers",
    ),
    pytest.param(
        lambda r: edit(r, FP, _set(["question"], 42)),
        FP,
        "bio_false_premise_003",
        "question",
        "not of type 'string'",
        id="wrong-type",
    ),
    pytest.param(
        lambda r: edit(r, FP, _set(["evidence", 0, "text"], ["a list"])),
        FP,
        "bio_false_premise_003",
        "evidence[0].text",
        "not of type 'string'",
        id="wrong-type-nested",
    ),
    pytest.param(
        lambda r: edit(r, FP, _set(["question"], "  \n ")),
        FP,
        "bio_false_premise_003",
        "question",
        "non-empty",
        id="blank-question",
    ),
    pytest.param(
        lambda r: edit(r, FP, _set(["impossibility_type"], "merely_hard")),
        FP,
        "bio_false_premise_003",
        "impossibility_type",
        "merely_hard",
        id="unknown-impossibility-type",
    ),
    pytest.param(
        lambda r: (r / FP).write_text((r / FP).read_text()[:-40]),
        FP,
        None,
        "",
        "invalid JSON",
        id="bad-json",
    ),
]


@pytest.mark.parametrize("break_it, rel, task_id, field, says", BAD_RECORDS)
def test_bad_record_gives_one_clear_error(
    release, release_dir, break_it, rel, task_id, field, says
):
    schema = release_dir / "schema"
    assert len(load_release(release, schema_dir=schema)) == 4  # intact before the change
    break_it(release)
    result = check_release(release, schema_dir=schema)
    assert result.envs == []
    assert len(result.errors) == 1, [str(e) for e in result.errors]
    (err,) = result.errors
    assert (err.file, err.task_id, err.field) == (str(release / rel), task_id, field)
    assert says in err.message
    text = str(err)
    assert str(release / rel) in text and f"field={field or '(record)'}" in text
    assert (repr(task_id) if task_id else "task_id=?") in text
    with pytest.raises(EnvLoadError) as info:
        load_release(release, schema_dir=schema)
    assert info.value.errors == (err,)


def test_bad_json_names_the_line(release, release_dir):
    (release / FP).write_text('{\n "task_id": "x",\n "question": oops\n}')
    (err,) = check_release(release, schema_dir=release_dir / "schema").errors
    assert err.line == 3 and f"{release / FP}:3:" in str(err)


def _jsonl(tmp_path, release_dir, lines):
    path = tmp_path / "x.jsonl"
    path.write_text("\n".join(lines))
    return path, check_jsonl(path, schema_dir=release_dir / "schema")


def test_jsonl_bad_line_names_file_and_line(release_dir, tmp_path):
    good = (release_dir / "data" / f"{IMPOSSIBLE[0]}.json").read_text().replace("\n", " ")
    path, result = _jsonl(tmp_path, release_dir, [good, "{not json"])
    assert result.envs == []
    assert [(e.file, e.line, e.task_id) for e in result.errors] == [(str(path), 2, None)]


def test_jsonl_record_of_unknown_kind(release_dir, tmp_path):
    record = json.loads((release_dir / "data" / f"{IMPOSSIBLE[0]}.json").read_text())
    record["ground_truth"] = {"answer": "both kinds at once"}
    path, result = _jsonl(tmp_path, release_dir, [json.dumps(record)])
    assert [(e.line, e.task_id, e.field) for e in result.errors] == [
        (1, IMPOSSIBLE[0], "impossibility_type")
    ]


def test_jsonl_duplicate_id_across_lines(release_dir, tmp_path):
    good = (release_dir / "data_control" / f"{CONTROLS[0]}.json").read_text().replace("\n", " ")
    path, result = _jsonl(tmp_path, release_dir, [good, good])
    assert result.envs == []
    assert [(e.line, e.task_id, e.field) for e in result.errors] == [(2, CONTROLS[0], "task_id")]


BAD_SPLITS = [
    pytest.param(
        {"name": "s", "task_ids": ["a", "b", "a"]},
        "a",
        "task_ids[2]",
        "duplicate",
        id="duplicate-id",
    ),
    pytest.param(
        {"name": "s", "task_ids": ["a", ""]}, "", "task_ids[1]", "non-empty", id="empty-id"
    ),
    pytest.param(
        {"name": "s", "task_ids": [7, "b"]},
        None,
        "task_ids[0]",
        "non-empty strings",
        id="non-string-id",
    ),
    pytest.param(
        {"name": "s", "count": 3, "task_ids": ["a", "b"]},
        None,
        "count",
        "count is 3",
        id="count-mismatch",
    ),
    pytest.param(
        {"name": "s", "ids": ["a"]}, None, "task_ids", "needs a task_ids list", id="no-task-ids"
    ),
]


@pytest.mark.parametrize("manifest, task_id, field, says", BAD_SPLITS)
def test_bad_split_gives_one_clear_error(tmp_path, manifest, task_id, field, says):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(manifest))
    split, errors = check_split(path)
    assert split is None and len(errors) == 1
    (err,) = errors
    assert (err.file, err.task_id, err.field) == (str(path), task_id, field) and says in err.message
    with pytest.raises(EnvLoadError):
        load_split(path)


def test_split_bad_json(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"task_ids": ["a",]}')
    split, (err,) = check_split(path)
    assert split is None and err.line == 1 and "invalid JSON" in err.message


def test_bare_list_manifest_is_accepted(tmp_path):
    path = tmp_path / "train.json"
    path.write_text('["a", "b"]')
    assert load_split(path).name == "train" and load_split(path).task_ids == ("a", "b")
