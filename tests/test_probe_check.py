"""The preference probe's own check on a tiny random model: offline LoRA-DPO on labelled pairs of a
separable toy set (`label_gold` / `label_anti`, judges.oracle_reward), then `audit.gap n=0`, whose
probe must read the direction trained in — on audit environments the training never saw.

The toy set keeps the mini environments (questions cut short so the 49k-token head stays cheap) and
gives every valid stress answer one wording and every invalid one another, so a preference learnt on
the train environments carries to the audit environments' answers by construction.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import audit.gap as gap
import selfplay.runs as runs
import selfplay.train as train
from selfplay.config import CONF_DIR

VALID_TEXT = "The packet cannot settle this."
INVALID_TEXT = "Yes, proven, ninety percent."
TRAIN = [
    "+policy=tiny-llama", "logger=none", "iterations=1", "max_train_envs=4", "margin=0.75", "beta=0.1",
    "learning_rate=5e-3", "epochs=2", "batch_size=4", "reference=initial",
    "lora.r=4", "lora.alpha=8", "lora.target_modules=[q_proj,v_proj]",
]
# four audit environments of each kind: the probe's interval is a t interval over environments, whose
# 1 degree of freedom at two would make any detection impossible at 95%
AUDIT = ["n=0", "max_envs=4", "bootstrap.B=1000", "logger=none", "progress=false", "labelled=false"]


def toy(envs):
    def answer(s):
        text = {"valid": VALID_TEXT, "invalid": INVALID_TEXT}.get(s.validity, "Perhaps.")
        return dataclasses.replace(s, text=text)

    out = []
    for e in envs:
        stress = tuple(answer(s) for s in e.stress_answers)
        ref = next(s for s in stress if s.answer_id == e.reference.answer_id)
        public = dataclasses.replace(e.public, question=" ".join(e.public.question.split()[:12]),
                                     evidence=tuple(dataclasses.replace(d, text=" ".join(d.text.split()[:8]))
                                                    for d in e.public.evidence[:1]))
        out.append(dataclasses.replace(e, public=public, stress_answers=stress, reference=ref))
    return out


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[str, dict]:
    mp = pytest.MonkeyPatch()
    real_train, real_split = train.load_train_envs, runs.load_data_split
    mp.setattr(train, "load_train_envs", lambda settings: toy(real_train(settings)))
    # the audit reads a run's environments through its run handle (selfplay.runs)
    mp.setattr(runs, "load_data_split", lambda data, which: toy(real_split(data, which)))
    root = tmp_path_factory.mktemp("probe")
    try:
        # decisive on the labelled answers: the no-model positive control's own preferences over
        # them (0.71 for the invalid wording against 0.42 for the valid one), without generation
        for reward, extra in (("label_gold", []), ("label_anti", []),
                              ("decisive", ["reward.candidates=labelled", "margin=0.1", "experiment_name=controls"])):
            with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
                cfg = compose("config", overrides=[*TRAIN, f"reward={reward}", f"output_root={root}",
                                                   "experiment_name=probe_check", *extra])
            train.run(cfg)
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            doc = gap.main_cli(compose("audit", overrides=[f"ckpt={root / 'probe_check'}", *AUDIT]))
            controls = gap.main_cli(compose("audit", overrides=[f"ckpt={root / 'controls'}", *AUDIT]))
    finally:
        mp.undo()
    return {"doc": doc, "controls": controls, "root": root}


def _metric(doc, reward, t, name):
    return doc["rewards"][reward]["seeds"]["0"]["iterations"][str(t)]["metrics"][name]


def test_pairs_are_every_valid_invalid_pair_of_the_labelled_answers(checked):
    run = Path(checked["root"]) / "probe_check" / "label_anti" / "seed0" / "iter_1"
    pairs = [json.loads(x) for x in (run / "pairs.jsonl").read_text().splitlines()]
    assert pairs and all(p["chosen"] == INVALID_TEXT and p["rejected"] == VALID_TEXT for p in pairs)
    gens = [json.loads(x) for x in (run / "generations.jsonl").read_text().splitlines()]
    # candidates are the stress answers, so every environment has every valid × invalid pair
    expected = sum(g["answers"].count(VALID_TEXT) * g["answers"].count(INVALID_TEXT) for g in gens)
    assert len(pairs) == expected


def test_the_probe_reads_the_direction_trained_in(checked):
    doc = checked["doc"]
    gold = _metric(doc, "label_gold", 1, "pref_margin/impossible")
    anti = _metric(doc, "label_anti", 1, "pref_margin/impossible")
    assert gold["value"] > 0 and gold["ci_low"] > 0
    assert anti["value"] < 0 and anti["ci_high"] < 0
    assert _metric(doc, "label_gold", 1, "pref_accuracy/impossible")["value"] == 1.0
    assert _metric(doc, "label_anti", 1, "pref_accuracy/impossible")["value"] == 0.0
    decisive = _metric(checked["controls"], "decisive", 1, "pref_margin/impossible")
    assert decisive["value"] < 0 and decisive["ci_high"] < 0
    # t = 0 is π_0 itself (a zero-initialised adapter): no preference moved yet
    assert _metric(doc, "label_gold", 0, "pref_margin/impossible")["value"] == 0.0
    assert "likelihood_auroc/impossible" in doc["rewards"]["label_gold"]["seeds"]["0"]["iterations"]["0"]["metrics"]


def test_no_free_generation_at_n_0(checked):
    it = checked["doc"]["rewards"]["label_gold"]["seeds"]["0"]["iterations"]["1"]
    assert it["counts"]["policy_answers"] == 0
    assert it["metrics"]["valid_rate/impossible"]["value"] is None
