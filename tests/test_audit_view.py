"""`python -m audit.view`: the run viewer, on a run written by hand with the training loop's own writers.

The run (`tiny`, reward `decisive`, seed 0, T = 2) is built from a real resolved config and
`selfplay.artifacts.writing_iteration`, so the checkpoints pass the audit's checks; its answers are
chosen to exercise every join: an answer that is markup (`<script>`, `</script>`, an `onerror`
image), one of the environment's authored stress answers (its label is known), a truncated answer,
an environment that gave no pair. The audit's answers are written with `audit_answers_text` from
AnswerRows, as audit.gap writes them. One test trains a tiny random Llama and audits it for real
(the file audit.gap writes, the wandb sample table train.py logs); one opens the page in a headless
Chromium and skips, saying why, where none is installed.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import short_evidence
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from audit import view
from audit.records import AnswerRow
from selfplay import artifacts as A
from selfplay import tracking
from selfplay.config import CONF_DIR
from selfplay.runs import load_data_split

SCRIPT = "<script>document.body.setAttribute('data-pwned', '1')</script> The figure is 42."
IMG = '</script><img src=x onerror="document.body.setAttribute(\'data-pwned\', \'2\')"> & done'


def resolved(root: Path) -> dict:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["+policy=tiny-llama", "reward=decisive", "logger=none",
                                           f"output_root={root}", "experiment_name=tiny"])
    return OmegaConf.to_container(cfg, resolve=True)


def write_iter(run: Path, t: int, config: dict, gens: list, judgments: list, pairs: list, drops: dict) -> None:
    with A.writing_iteration(run, t) as dest:
        (dest / "adapter").mkdir()
        (dest / "adapter" / "adapter_config.json").write_text("{}")
        if gens:
            A.write_jsonl(dest / "generations.jsonl", gens)
            A.write_jsonl(dest / "judgments.jsonl", judgments)
            A.write_jsonl(dest / "pairs.jsonl", pairs)
        A.write_json(dest / "metrics.json", {"iteration": t, "metrics": {}, "pair_drops": drops})
        A.write_config(dest / A.CONFIG, config)


def gen(env, answers, truncated=None):
    return {"task_id": env.task_id, "kind": env.kind, "category": env.category, "prompt": "p",
            "answers": answers, "truncated": truncated or [False] * len(answers)}


def judged(env, scores):
    return [{"task_id": env.task_id, "index": i, "score": s, "error": None if s is not None else "no verdict"}
            for i, s in enumerate(scores)]


def pair(env, c, r, answers, scores):
    return {"task_id": env.task_id, "chosen_index": c, "rejected_index": r, "chosen_score": scores[c],
            "rejected_score": scores[r], "margin": scores[c] - scores[r], "chosen": answers[c], "rejected": answers[r]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(experiment dir, train envs used, audit env used, the honest stress answer of train env a)."""
    root = tmp_path_factory.mktemp("outputs")
    config = resolved(root)
    from selfplay.config import train_settings

    data = train_settings(OmegaConf.create(config)).data
    train = load_data_split(data, "train")
    a = next(e for e in train if e.kind == "impossible")
    b = next(e for e in train if e.kind == "control")
    audit_env = next(e for e in load_data_split(data, "audit") if e.kind == "impossible")
    honest = a.reference_answer
    run = A.run_dir(root, "tiny", "decisive", 0)
    write_iter(run, 0, config, [], [], [], {})
    # iteration 1: a's honest answer (the oracle accepts it) loses to a markup answer with an
    # invented figure (the oracle rejects it): judge preferred what the oracle rejects
    a1, s1 = [honest, SCRIPT], [0.2, 0.9]
    b1, sb1 = [IMG, "cut off mid"], [0.5, 0.5]
    write_iter(run, 1, config, [gen(a, a1), gen(b, b1, [False, True])], judged(a, s1) + judged(b, sb1),
               [pair(a, 1, 0, a1, s1)], {b.task_id: "tie"})
    a2, s2 = ["Yes, certainly.", honest], [None, 0.7]
    write_iter(run, 2, config, [gen(a, a2)], judged(a, s2), [], {a.task_id: "nan"})

    # the audit: the policy's answer at t = 0 and t = 2, one stress answer with its probe terms
    stress = audit_env.stress_answers[0]
    rows = {0: [AnswerRow(audit_env.task_id, "impossible", "policy", "p0", "an answer of pi_0", 0.4, 0.5, "valid",
                          {"oracle": True, "checks": True}, log_ratio=0.0, tokens=5)],
            2: [AnswerRow(audit_env.task_id, "impossible", "policy", "p0", SCRIPT, 0.8, 0.5, "invalid",
                          {"oracle": False, "oracle/spec": False, "checks": True}, log_ratio=1.5, tokens=9),
                AnswerRow(audit_env.task_id, "impossible", "stress", stress.answer_id, stress.text, 0.3, 0.5,
                          stress.validity, {"oracle": True}, probe_logp=-40.0, probe_logp0=-42.0, probe_tokens=8)]}
    exp = root / "tiny"
    (exp / view.ANSWERS_FILE).write_text(view.audit_answers_text(
        {("decisive", 0): rows},
        {("decisive", 0, 0): "decisive/seed0/iter_0", ("decisive", 0, 2): "decisive/seed0/iter_2"}))
    cache = run / "iter_2" / "audit_cache"
    cache.mkdir()
    (cache / "answers-0.jsonl").write_text(json.dumps(
        {"key": audit_env.task_id, "task_id": audit_env.task_id, "answers": [SCRIPT], "finished": [False]}) + "\n")
    (exp / "labels.jsonl").write_text(json.dumps(
        {"task_id": audit_env.task_id, "kind": "impossible", "text": SCRIPT, "label": "invalid",
         "reason": "invents the figure", "labeller": "ab", "checkpoint": "decisive/seed0/iter_2", "answers_file": "answers-0.jsonl", "index": 0,
         "iteration": 2, "reward": "decisive", "run_seed": 0}) + "\n")
    return exp, (a, b), audit_env, honest


@pytest.fixture(scope="module")
def page(tiny):
    exp = tiny[0]
    assert view.main([str(exp)]) == 0
    html = (exp / view.VIEW_FILE).read_text(encoding="utf-8")
    return html, view.read_page_data(html)


def rows_of(data, task, t):
    return sorted((r for r in data["train"] if r["task"] == task and r["t"] == t), key=lambda r: r["i"])


def test_every_sample_is_in_the_page(tiny, page):
    exp, (a, b), _, honest = tiny
    _, data = page
    texts = data["texts"]
    got = {(r["t"], r["task"], r["i"]): texts[r["text"]] for r in data["train"]}
    assert got == {(1, a.task_id, 0): honest, (1, a.task_id, 1): SCRIPT, (1, b.task_id, 0): IMG,
                   (1, b.task_id, 1): "cut off mid", (2, a.task_id, 0): "Yes, certainly.", (2, a.task_id, 1): honest}
    assert [r["iterations"] for r in data["runs"]] == [[0, 1, 2]]
    assert set(data["envs"]) >= {a.task_id, b.task_id}
    assert data["envs"][a.task_id]["question"] == a.public.question
    assert data["envs"][a.task_id]["split"] == "train"


def test_training_joins_by_task_and_index(tiny, page):
    """Scores, pair sides, truncation, drops and labels land on the answer they belong to."""
    _, (a, b), _, _ = tiny
    _, data = page
    honest, script = rows_of(data, a.task_id, 1)
    assert (honest["score"], honest["chosen"], honest["rejected"]) == (0.2, 0, 1)
    assert (script["score"], script["chosen"], script["rejected"]) == (0.9, 1, 0)
    assert honest["label"]["label"] == "valid" and honest["label"]["by"] == "authored"
    assert script["label"] is None
    assert [r["truncated"] for r in rows_of(data, b.task_id, 1)] == [False, True]
    assert {(d["t"], d["task"], d["why"]) for d in data["drops"]} == {(1, b.task_id, "tie"), (2, a.task_id, "nan")}
    assert [(p["t"], p["chosen"], p["rejected"], p["margin"]) for p in data["pairs"]] == [(1, 1, 0, pytest.approx(0.7))]
    unscored = rows_of(data, a.task_id, 2)[0]
    assert unscored["score"] is None and unscored["error"] == "no verdict"


def test_the_oracle_reads_training_answers_and_flags_what_the_judge_preferred(tiny, page):
    """On mini the page runs spec + checks: the honest answer passes, the invented 42 fails, and
    being scored above an accepted answer of its environment flags it."""
    _, (a, _), _, _ = tiny
    _, data = page
    honest, script = rows_of(data, a.task_id, 1)
    assert honest["oracle"] is True and script["oracle"] is False
    assert script["flagged"] and not honest["flagged"]
    assert data["training_oracle"] == "spec + checks"


@pytest.mark.parametrize("rows, flagged", [
    pytest.param([(True, 0.2), (False, 0.9)], [False, True], id="rejected-above-accepted"),
    pytest.param([(True, 0.9), (False, 0.2)], [False, False], id="rejected-below"),
    pytest.param([(False, 0.9), (False, 0.2)], [False, False], id="nothing-accepted"),
    pytest.param([(True, 0.5), (False, 0.5)], [False, False], id="tie-is-no-preference"),
    pytest.param([(True, 0.5), (None, 0.9)], [False, False], id="undecided-is-not-rejected"),
])
def test_flag_training(rows, flagged):
    rs = [{"oracle": o, "score": s} for o, s in rows]
    view.flag_training(rs)
    assert [r["flagged"] for r in rs] == flagged


def test_audit_answers_join_by_checkpoint(tiny, page):
    _, _, env, _ = tiny
    _, data = page
    by = {(r["t"], r["source"]): r for r in data["audit"]}
    assert set(by) == {(0, "policy"), (2, "policy"), (2, "stress")}
    late = by[(2, "policy")]
    assert data["texts"][late["text"]] == SCRIPT and late["task"] == env.task_id
    assert (late["score"], late["ref_score"], late["oracle"]) == (0.8, 0.5, False)
    assert late["flagged"]  # rejected by the oracle, judged at least as good as r(e)
    assert late["truncated"] is True  # from iter_2/audit_cache/answers-*.jsonl
    assert late["label"] == {"label": "invalid", "by": "audit.label", "reason": "invents the figure", "labeller": "ab"}
    assert by[(0, "policy")]["truncated"] is None and not by[(0, "policy")]["flagged"]
    assert by[(2, "stress")]["delta"] == pytest.approx((-40.0 + 42.0) / 8)  # Δℓ per token
    assert data["answers_files"] == [view.ANSWERS_FILE]


def test_markup_in_an_answer_stays_text(tiny, page):
    """The page holds exactly its own two <script> elements; an answer's `<script>` and `</script>`
    are escaped inside the JSON block and come back as the same text."""
    html, data = page
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert "data-pwned" in html and "<img" not in html and "onerror=\"" not in html
    assert SCRIPT in data["texts"] and IMG in data["texts"]


def test_the_page_is_self_contained(page):
    html, _ = page
    for ref in ("http://", "https://", "src=", "<link", "@import"):
        assert ref not in html.split('id="data">')[0], ref


def test_audit_table_and_sample_table(tiny):
    exp, (a, _), _, _ = tiny
    columns, rows = view.audit_table(exp, "decisive", 0)
    assert len(rows) == 3 and columns == view.AUDIT_COLUMNS
    row = dict(zip(columns, rows[-1], strict=True))
    assert row["probe_delta_per_token"] == pytest.approx(0.25) and row["oracle_accepts"] is True
    assert [r[0] for r in view.audit_table(exp, "decisive", 0, iteration=2)[1]] == [2, 2]
    assert view.audit_table(exp, "anchored", 0)[1] == []
    wandb = pytest.importorskip("wandb")
    table = view.wandb_answer_table(exp, "decisive", 0, 2)
    assert isinstance(table, wandb.Table) and len(table.data) == 2
    samples = tracking.iteration_samples(exp / "decisive" / "seed0" / "iter_1")
    table = dict(zip(tracking.SAMPLE_COLUMNS, tracking.sample_rows(samples)[1], strict=True))
    assert (table["task_id"], table["answer"], table["chosen"], table["judge_score"]) == (a.task_id, SCRIPT, 1, 0.9)
    assert tracking.iteration_samples(exp / "decisive" / "seed0" / "iter_0") == []


def test_wandb_logger_logs_a_table():
    wandb = pytest.importorskip("wandb")
    logged = []

    class Run:
        def log(self, row, step):
            logged.append((row, step))

    tracking.WandbLogger(Run()).table("samples", ("a", "b"), [(1, "<script>")], step=3)
    (row, step), = logged
    assert step == 3 and isinstance(row["samples"], wandb.Table)
    assert row["samples"].columns == ["a", "b"] and row["samples"].data == [[1, "<script>"]]


def test_cli(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    ok = subprocess.run([sys.executable, "-m", "audit.view", "--help"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and "self-contained HTML" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "audit.view", str(tmp_path / "nothing")], capture_output=True,
                         text=True, env=env)
    assert bad.returncode == 1 and bad.stderr.startswith("audit.view: error:") and bad.stderr.count("\n") == 1


# -- in a real browser ------------------------------------------------------------------------------

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def browser() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    pytest.skip(f"no headless browser installed (none of {', '.join(BROWSERS)} on PATH; "
                "on Debian: apt-get install -y chromium)")


def chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_the_page_renders_in_a_browser_with_markup_as_text(tiny, page, tmp_path):
    exp, (a, b), env, _ = tiny
    url = (exp / view.VIEW_FILE).as_uri()
    dom = chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = dom.stdout
    assert a.task_id in body and b.task_id in body and "page 1 of 1" in body
    assert "&lt;script&gt;document.body.setAttribute" in body  # shown as text ...
    assert "data-pwned=" not in body.split("<main")[0]  # ... and never run
    assert "&lt;img src=x onerror=" in body and "<img" not in body
    assert "judge preferred what the oracle rejects" in body
    audit = chromium("--dump-dom", url + "#view=audit&flagged=1")
    assert env.task_id in audit.stdout and "checkpoint t = 2" in audit.stdout
    assert "checkpoint t = 0" not in audit.stdout  # the flagged filter keeps t = 2's answer only
    shot = tmp_path / "view.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1200,900", url)
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr[-2000:]


# -- end to end: the loop writes the samples, the audit its answers -----------------------------------

def test_train_and_audit_a_tiny_run_then_view_it(tmp_path, monkeypatch):
    """A tiny random Llama trained 1 iteration on 2 environments (`decisive`: no model judge) and
    audited with n = 1 on one environment of each kind: the wandb sample table holds every answer,
    audit.gap writes audit_answers.jsonl, and the page shows both."""

    import audit.gap as gap
    import selfplay.runs as runs
    import selfplay.train as train

    cut = short_evidence  # the tiny model's LM head is costly

    real_train, real_split = train.load_train_envs, runs.load_data_split
    monkeypatch.setattr(train, "load_train_envs", lambda settings: cut(real_train(settings)))
    monkeypatch.setattr(runs, "load_data_split", lambda data, which: cut(real_split(data, which)))
    tables = []

    class Recorder(tracking.NullLogger):
        def table(self, key, columns, rows, step):
            tables.append((key, tuple(columns), list(rows), step))

    monkeypatch.setattr(train, "start_logger", lambda *a, **k: Recorder())
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            "+policy=tiny-llama", "reward=decisive", "logger=none", "iterations=1", "k=2", "max_new_tokens=4",
            "max_train_envs=2", "margin=0.0", "batch_size=2", "lora.r=4", "lora.alpha=8",
            "lora.target_modules=[q_proj,v_proj]", "pair_truncated=true", f"output_root={tmp_path}",
            "experiment_name=e2e"])
        train.run(cfg)
        audit_cfg = compose("audit", overrides=[f"ckpt={tmp_path / 'e2e'}", "n=1", "max_new_tokens=4", "max_envs=1",
                                                "bootstrap.B=1000", "logger=none", "progress=false"])
    gap.main_cli(audit_cfg)
    (key, columns, rows, step), = tables
    assert (key, columns, step, len(rows)) == ("samples", tracking.SAMPLE_COLUMNS, 1, 4)
    answers = view.read_audit_answers(tmp_path / "e2e" / view.ANSWERS_FILE)
    assert {(r["iteration"], r["source"]) for r in answers} >= {(0, "policy"), (1, "policy"), (0, "stress")}
    assert view.main([str(tmp_path / "e2e")]) == 0
    data = view.read_page_data((tmp_path / "e2e" / view.VIEW_FILE).read_text(encoding="utf-8"))
    assert len(data["train"]) == 4 and len(data["audit"]) == len(answers)
    assert all(r["truncated"] is not None for r in data["audit"] if r["source"] == "policy")
