"""Loading the real release: counts, kinds, reference answers, JSONL round trip, splits, CLI."""

import json
from collections import Counter
from pathlib import Path

import pytest

from selfplay.envs import (
    IMPOSSIBILITY_TYPES,
    EnvLoadError,
    SchemaNotFound,
    Split,
    check_release,
    find_schema_dir,
    load_jsonl,
    load_release,
    load_split,
    select,
    to_dataset,
    train_audit_split,
)
from selfplay.envs.__main__ import main
from selfplay.envs.schema import SHARED_SCHEMA_DIR


@pytest.fixture(scope="module")
def envs(release_dir):
    return load_release(release_dir)


def _raw_records(release_dir: Path) -> list[dict]:
    files = sorted((release_dir / "data").glob("*.json")) + sorted(
        (release_dir / "data_control").glob("*.json")
    )
    return [json.loads(f.read_text()) for f in files]


def test_release_counts_and_categories(envs):
    kinds = Counter(e.kind for e in envs)
    assert kinds == {"impossible": 12, "control": 8}
    by_type = Counter(e.category for e in envs if e.kind == "impossible")
    assert by_type == {t: 2 for t in IMPOSSIBILITY_TYPES}
    controls = {e.task_id: e.category for e in envs if e.kind == "control"}
    # the README: clear positives are ctrl_0xx, hard positives ctrl_hp_xx
    assert controls == {
        t: ("hard_positive" if t.startswith("ctrl_hp_") else "clear_positive") for t in controls
    }
    assert len(controls) == 8


def test_reference_answer_is_the_valid_honest_or_grounded_one(envs):
    by_id = {e.task_id: e for e in envs}
    assert by_id["bio_false_premise_003"].reference.answer_id == "ANS_HONEST"
    assert by_id["ctrl_001"].reference.answer_id == "correct_grounded"
    for e in envs:
        assert e.reference.validity == "valid"
        assert (
            e.reference.answer_type
            == {"impossible": "honest", "control": "correct_grounded"}[e.kind]
        )
        assert e.reference_answer == e.reference.text and e.reference in e.stress_answers


def test_public_view_matches_record(envs, release_dir):
    raw = json.loads((release_dir / "data" / "evid_insuff_m001.json").read_text())
    (env,) = [e for e in envs if e.task_id == "evid_insuff_m001"]
    assert env.public.question == raw["question"]
    assert [(d.doc_id, d.text) for d in env.public.evidence] == [
        (d["doc_id"], d["text"]) for d in raw["evidence"]
    ]
    assert (
        env.certificate == raw["oracle_certificate"]
        and env.evaluation_spec == raw["evaluation_spec"]
    )
    assert env.ground_truth is None
    assert env.source == str(release_dir / "data" / "evid_insuff_m001.json")


def test_jsonl_round_trip(envs, release_dir, tmp_path):
    path = tmp_path / "all.jsonl"
    records = _raw_records(release_dir)
    del records[-1]["env_type"]  # a control is still recognised by its ground_truth
    path.write_text(
        "\n".join(json.dumps(r) for r in records) + "\n\n"
    )  # trailing blank line is fine
    loaded = load_jsonl(path, schema_dir=release_dir / "schema")
    key = lambda e: (e.public, e.kind, e.category, e.stress_answers, e.reference)  # noqa: E731
    assert [key(e) for e in loaded] == [key(e) for e in envs]
    assert loaded[3].source == f"{path}:4"


def test_split_manifest_and_select(envs, release_dir):
    split = load_split(release_dir / "splits" / "hard45.json")
    assert split.name == "Hard-45" and len(split.task_ids) == 45
    selected, missing = select(envs, split)
    assert len(selected) == 7 and len(missing) == 38
    assert [e.task_id for e in selected] == [t for t in split.task_ids if t not in missing]
    assert select(envs, Split("x", ("ctrl_002", "nope", "ctrl_001"))) == (
        [e for t in ("ctrl_002", "ctrl_001") for e in envs if e.task_id == t],
        ["nope"],
    )


def test_release_train_audit_split(envs, release_dir):
    train, audit = train_audit_split(envs, release_dir)
    hard = set(load_split(release_dir / "splits" / "hard45.json").task_ids)
    # sorted control ids: ctrl_001 ctrl_002 ctrl_hp_01 ctrl_hp_08 ctrl_hp_15 ctrl_hp_22 ctrl_hp_29 ctrl_hp_36
    # every other one from the first goes to audit
    assert {e.task_id for e in audit if e.kind == "control"} == {
        "ctrl_001",
        "ctrl_hp_01",
        "ctrl_hp_15",
        "ctrl_hp_29",
    }
    assert {e.task_id for e in audit if e.kind == "impossible"} == {e.task_id for e in envs} & hard
    assert len(audit) == 7 + 4 and len(train) == 5 + 4
    assert not {e.task_id for e in train} & {e.task_id for e in audit}


def _write_manifests(root: Path, train: list[str], audit: list[str]) -> None:
    (root / "splits").mkdir()
    (root / "splits" / "train.json").write_text(json.dumps({"name": "train", "task_ids": train}))
    (root / "splits" / "audit.json").write_text(json.dumps({"name": "audit", "task_ids": audit}))


def test_manifest_train_audit_split(envs, tmp_path):
    ids = [e.task_id for e in envs]
    _write_manifests(tmp_path, ids[1:], ids[:1])
    train, audit = train_audit_split(envs, tmp_path)
    assert [e.task_id for e in audit] == ids[:1] and [e.task_id for e in train] == ids[1:]


def test_manifest_split_must_be_a_partition(envs, tmp_path):
    ids = [e.task_id for e in envs]
    _write_manifests(tmp_path, ids[1:] + ["ghost"], ids[:2])
    with pytest.raises(EnvLoadError) as info:
        train_audit_split(envs, tmp_path)
    assert [(Path(e.file).name, e.task_id) for e in info.value.errors] == [
        ("audit.json", ids[1]),
        ("train.json", "ghost"),
    ]


def test_to_dataset_has_public_columns_only(envs):
    ds = to_dataset(envs)
    assert ds.column_names == ["task_id", "question", "evidence"]
    assert len(ds) == 20
    row = ds[0]
    assert row["task_id"] == envs[0].task_id and row["question"] == envs[0].public.question
    assert row["evidence"] == [
        {"doc_id": d.doc_id, "text": d.text} for d in envs[0].public.evidence
    ]


def test_schema_dir_search_order(release_dir, tmp_path):
    assert find_schema_dir(release_dir) == release_dir / "schema"
    if SHARED_SCHEMA_DIR.is_dir():  # a directory without schema/ falls back to the shared release
        assert find_schema_dir(tmp_path) == SHARED_SCHEMA_DIR
    with pytest.raises(SchemaNotFound, match="does not hold"):
        find_schema_dir(release_dir, schema_dir=tmp_path)
    result = check_release(release_dir, schema_dir=tmp_path)
    assert result.envs == [] and [e.field for e in result.errors] == ["schema"]


def test_cli_on_release(release_dir, capsys):
    assert main([str(release_dir)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["impossible"] == {"total": 12, "by_type": {t: 2 for t in IMPOSSIBILITY_TYPES}}
    assert out["controls"] == {"total": 8, "clear_positive": 2, "hard_positive": 6}
    assert out["splits"] == [
        {"file": "all169.json", "name": "All-169", "size": 169, "present": 12, "missing": 157},
        {"file": "controls48.json", "name": "Controls-48", "size": 48, "present": 8, "missing": 40},
        {"file": "full150.json", "name": "Full-150", "size": 150, "present": 10, "missing": 140},
        {"file": "hard45.json", "name": "Hard-45", "size": 45, "present": 7, "missing": 38},
    ]
    assert out["train_audit"] == {"train": 9, "audit": 11}
    assert out["schema_dir"] == str(release_dir / "schema") and out["errors"] == []


def test_cli_reports_errors_with_exit_1(release_dir, tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "broken.json").write_text("{")
    assert main([str(tmp_path), "--schema-dir", str(release_dir / "schema")]) == 1
    out = json.loads(capsys.readouterr().out)
    assert (
        out["impossible"]["total"] == 0
        and len(out["errors"]) == 1
        and "broken.json:1" in out["errors"][0]
    )


def test_cli_on_mini(mini_dir, capsys):
    if not (mini_dir / "data").is_dir():
        pytest.skip(f"no bundled environments at {mini_dir}")
    code = main([str(mini_dir)])
    out = json.loads(capsys.readouterr().out)
    assert out["errors"] == [] and code == 0
    assert all(n >= 2 for n in out["impossible"]["by_type"].values())
    assert (
        out["controls"]["total"] >= 6
        and out["controls"]["clear_positive"] >= 1
        and out["controls"]["hard_positive"] >= 1
    )
    assert {s["file"] for s in out["splits"]} == {"train.json", "audit.json"}
    assert all(s["missing"] == 0 for s in out["splits"])
    assert (
        out["train_audit"]["train"] + out["train_audit"]["audit"]
        == out["impossible"]["total"] + out["controls"]["total"]
    )


def test_mini_loads_without_the_release_and_passes_the_release_schemas(mini_dir, release_dir):
    """data/mini carries its own schema (the fields this code reads), so it loads on a machine
    without the release; it must also pass the release's own, stricter schemas."""
    assert find_schema_dir(mini_dir) == mini_dir / "schema"
    own = load_release(mini_dir)
    strict = load_release(mini_dir, schema_dir=release_dir / "schema")
    assert [e.task_id for e in own] == [e.task_id for e in strict] and len(own) >= 18


def test_mini_own_schema_rejects_a_missing_certificate(mini_dir, tmp_path):
    import shutil

    copy = tmp_path / "mini"
    shutil.copytree(mini_dir, copy)
    victim = sorted((copy / "data").glob("*.json"))[0]
    record = json.loads(victim.read_text())
    del record["oracle_certificate"]
    victim.write_text(json.dumps(record))
    result = check_release(copy)
    assert result.envs == [] and [(e.task_id, e.field) for e in result.errors] == [
        (record["task_id"], "oracle_certificate")]
