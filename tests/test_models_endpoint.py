"""The OpenAI-compatible endpoint backend against a real HTTP server on 127.0.0.1 (http.server in a
thread, scripted replies): the `openai` client, timeouts and retries all run for real.

Expected values: a scripted top-logprobs list {Yes: 0.6, " Yes": 0.1, No: 0.2, Maybe: 0.1} gives
p(Yes) = 0.7, p(No) = 0.2 and P(violates) = 0.7 / 0.9 = 7/9.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from judges import build_judge
from judges.base import JudgeItem
from judges.oracle import LLMOracle
from judges.verifiers import OracleConfig, build_verifier, verdict_row
from selfplay.envs.types import Document, Environment, PublicView, StressAnswer
from selfplay.models.endpoint import RENDER_TAG, EndpointBackend, EndpointConfig, EndpointError

KEY_ENV = "SELFPLAY_TEST_ENDPOINT_KEY"
KEY = "sk-test-0123456789-do-not-leak"


def completion(content="Yes", top=None):
    """A chat.completion body; `top` = {token: prob} for the first token, None = no logprobs."""
    logprobs = None
    if top is not None:
        alts = [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in top.items()]
        logprobs = {"content": [{"token": alts[0]["token"], "logprob": alts[0]["logprob"], "bytes": None,
                                 "top_logprobs": alts}]}
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "served",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "length", "logprobs": logprobs}]}


class Server:
    """`script(request, call_index) -> (status, body, delay_s)`; records requests and peak concurrency.
    A body of bytes is sent as it is (a malformed reply), anything else as JSON."""

    def __init__(self, script):
        self.script, self.requests, self.auth = script, [], []
        self.in_flight = self.peak = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    i = len(outer.requests)
                    outer.requests.append(body)
                    outer.auth.append(self.headers.get("Authorization"))
                    outer.in_flight += 1
                    outer.peak = max(outer.peak, outer.in_flight)
                try:
                    status, reply, delay = outer.script(body, i, self.headers.get("Authorization"))
                    time.sleep(delay)
                    data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()  # bytes: sent as-is
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)
                finally:
                    with lock:
                        outer.in_flight -= 1

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    servers = []

    def start(script, **cfg):
        s = Server(script)
        servers.append(s)
        settings = {"base_url": s.url, "model": "served", "api_key_env": KEY_ENV, "timeout_s": 5.0,
                    "max_retries": 2, "backoff_s": 0.0, "backoff_max_s": 0.0} | cfg
        return s, EndpointBackend.from_config(settings)

    yield start
    for s in servers:
        s.close()


def env():
    ref = StressAnswer("honest", "honest", "valid", "The packet cannot settle it (D1).")
    return Environment(public=PublicView("t", "Did mortality fall?", (Document("D1", "Deaths: 40 of 900."),)),
                       kind="impossible", category="x", stress_answers=(ref,), reference=ref,
                       certificate={"impossibility_claim": "One arm only."},
                       evaluation_spec={"must_state": [], "must_not_state": ["Mortality fell."]})


TOP = {"Yes": 0.6, " Yes": 0.1, "No": 0.2, "Maybe": 0.1}


def test_logprob_verdicts_equal_the_scripted_probabilities(serve):
    server, backend = serve(lambda req, i, auth: (200, completion("Yes", TOP), 0))
    (v,) = LLMOracle(backend).verify([(env(), "Mortality fell.")])
    assert v.p_violates == pytest.approx(7 / 9, abs=1e-12) and v.violates is True and v.mode == "logprobs"
    assert v.probs == pytest.approx({"Yes": 0.7, "No": 0.2}, abs=1e-12)
    (req,) = server.requests
    assert req["model"] == "served" and req["max_tokens"] == 1 and req["temperature"] == 0
    assert req["logprobs"] is True and req["top_logprobs"] == 20
    assert [m["role"] for m in req["messages"]] == ["system", "user"]  # prefill dropped by default
    assert "Deaths: 40 of 900." in req["messages"][1]["content"] and "Mortality fell." in req["messages"][1]["content"]
    assert server.auth == [f"Bearer {KEY}"]
    assert v.prompt.startswith(RENDER_TAG) and v.prompt.endswith("Violates:")


def test_500_then_200_is_retried(serve):
    server, backend = serve(lambda req, i, auth: (500, {"error": {"message": "busy"}}, 0) if i == 0
                            else (200, completion("No", {"No": 0.9, "Yes": 0.1}), 0))
    (v,) = LLMOracle(backend).verify([(env(), "We cannot say.")])
    assert v.p_violates == pytest.approx(0.1) and v.violates is False
    assert len(server.requests) == 2 and backend.stats["retries"] == 1
    assert backend.reading(v.prompt).attempts == 2


def test_timeout_gives_nan_that_is_counted_never_zero(serve):
    server, backend = serve(lambda req, i, auth: (200, completion("No", {"No": 1.0}), 1.0),
                            timeout_s=0.2, max_retries=1)
    ids = backend.tokenizer.encode("Yes") + backend.tokenizer.encode("No")
    rows = backend.next_token_logprobs([backend.render([{"role": "user", "content": "q"}])], ids)
    assert rows.shape == (1, 2) and all(math.isnan(x) for x in rows[0])
    (v,) = LLMOracle(backend).verify([(env(), "x")])
    assert v.p_violates is None and v.violates is None and v.undecided and v.mode == "failed"
    assert "Timeout" in v.error and "2 attempt" in v.error
    assert backend.stats["failed"] == 2 and len(server.requests) == 4


def test_client_errors_are_not_retried(serve):
    server, backend = serve(lambda req, i, auth: (400, {"error": {"message": "bad request"}}, 0))
    (v,) = LLMOracle(backend).verify([(env(), "x")])
    assert v.violates is None and "BadRequest" in v.error and len(server.requests) == 1


@pytest.mark.parametrize("reply, mode_cfg, violates, mode", [
    pytest.param("No", "auto", False, "reply", id="one-token-reply"),
    pytest.param("Yes.", "auto", True, "reply", id="reply-with-punctuation"),
    pytest.param("Maybe", "auto", None, "reply", id="reply-naming-no-label"),
    pytest.param("No", "logprobs", None, "failed", id="logprobs-required"),
])
def test_without_logprobs(serve, reply, mode_cfg, violates, mode):
    server, backend = serve(lambda req, i, auth: (200, completion(reply, None), 0), verdict_mode=mode_cfg)
    (v,) = LLMOracle(backend).verify([(env(), "x")])
    assert v.violates is violates and v.mode == mode
    if violates is not None:
        assert v.p_violates == float(violates)


def test_reply_mode_never_asks_for_logprobs(serve):
    server, backend = serve(lambda req, i, auth: (200, completion("No", None), 0), verdict_mode="reply")
    LLMOracle(backend).verify([(env(), "x")])
    assert "logprobs" not in server.requests[0]


def test_prefill_continue_sends_a_partial_assistant_turn(serve):
    server, backend = serve(lambda req, i, auth: (200, completion("Yes", TOP), 0), prefill="continue",
                            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    LLMOracle(backend).verify([(env(), "x")])
    req = server.requests[0]
    assert req["messages"][-1] == {"role": "assistant", "content": "Violates:"}
    assert req["continue_final_message"] is True and req["add_generation_prompt"] is False
    assert req["chat_template_kwargs"] == {"enable_thinking": False}


def test_concurrency_limit_holds(serve):
    server, backend = serve(lambda req, i, auth: (200, completion("No", {"No": 1.0}), 0.05), concurrency=2)
    prompts = [backend.render([{"role": "user", "content": f"q{i}"}]) for i in range(8)]
    rows = backend.next_token_logprobs(prompts, backend.tokenizer.encode("No"))
    assert rows.shape == (8, 1) and (rows == 0.0).all()  # log 1
    assert 1 <= server.peak <= 2


def test_anchored_judge_on_the_endpoint(serve):
    """P(A) = 0.8 when the candidate is ANSWER A, else 0.3: order ab gives 0.8, order ba gives
    P(B) = 0.7, score = 0.75; the greedy stage-1 path returns the reply text."""

    def script(req, i, auth):
        user = req["messages"][-1]["content"]
        if "=== BEGIN ANSWER B ===" not in user:  # stage 1 (blind solution), not a pairwise verdict
            return 200, completion("A blind solution."), 0
        p_a = 0.8 if "=== BEGIN ANSWER A ===\ncand" in user else 0.3
        return 200, completion("A", {"A": p_a, "B": 1 - p_a}), 0

    server, backend = serve(script)
    judge = build_judge("anchored", backend, adapter=False)
    (v,) = judge.score([JudgeItem(env().public, "cand", "ref")])
    assert v.score == pytest.approx(0.75) and v.swap_consistent is True
    blind = build_judge("blind_solve", backend, adapter=False)
    blind.prepare([env().public])
    assert blind.artifacts() == {"t": "A blind solution."}


def test_generation_failure_is_an_error_not_empty_text(serve):
    server, backend = serve(lambda req, i, auth: (500, {"error": {"message": "down"}}, 0), max_retries=1)
    with pytest.raises(EndpointError, match="generation failed"):
        backend.greedy([backend.render([{"role": "user", "content": "q"}])], max_new_tokens=8)


def test_missing_key_variable_names_it(monkeypatch):
    monkeypatch.delenv("SELFPLAY_NO_SUCH_KEY", raising=False)
    with pytest.raises(EndpointError, match="SELFPLAY_NO_SUCH_KEY"):
        EndpointBackend.from_config({"base_url": "http://127.0.0.1:9/v1", "model": "m",
                                     "api_key_env": "SELFPLAY_NO_SUCH_KEY"})


def test_the_key_appears_in_no_written_file(serve, tmp_path, caplog):
    """Even a server that echoes the Authorization header into its error body leaks nothing."""
    caplog.set_level(logging.DEBUG)

    def script(req, i, auth):
        if i == 0:
            return 500, {"error": {"message": f"rejected header {auth}"}}, 0
        if i == 1:
            return 401, {"error": {"message": f"bad key {auth}"}}, 0
        return 200, completion("Yes", TOP), 0

    server, _ = serve(script, max_retries=0)
    settings = {"name": "llm", "verifiers": [], "model": "endpoint",
                "endpoint": {"base_url": server.url, "model": "served", "api_key_env": KEY_ENV,
                             "max_retries": 0, "backoff_s": 0.0, "backoff_max_s": 0.0, "concurrency": 1}}
    cfg = OracleConfig.from_mapping(settings)
    verifier = build_verifier(cfg)
    verdicts = verifier.verify([(env(), "a"), (env(), "b"), (env(), "c")])
    assert [v.violates for v in verdicts] == [None, None, True]
    assert server.auth[-1] == f"Bearer {KEY}"  # the key was used ...
    (tmp_path / "verdicts.jsonl").write_text("\n".join(json.dumps(verdict_row(v)) for v in verdicts))
    (tmp_path / "config.json").write_text(json.dumps({"cfg": cfg.fingerprint(), "repr": repr(cfg),
                                                      "backend": repr(verifier.backend),
                                                      "errors": [v.error for v in verdicts]}, default=str))
    (tmp_path / "log.txt").write_text(caplog.text)
    written = [p.read_text() for p in tmp_path.iterdir()]
    assert "rejected header Bearer ***" in verdicts[0].error and "bad key Bearer ***" in verdicts[1].error
    assert "HTTP Request: POST" in caplog.text  # the client's own logging was captured
    assert all(KEY not in w for w in written)  # ... and written nowhere


@pytest.mark.parametrize("change, key", [
    pytest.param({"base_url": "127.0.0.1:8000"}, "base_url", id="no-scheme"),
    pytest.param({"top_logprobs": 0}, "top_logprobs", id="no-alternatives"),
    pytest.param({"verdict_mode": "text"}, "verdict_mode", id="unknown-mode"),
    pytest.param({"concurrency": 0}, "concurrency", id="no-concurrency"),
    pytest.param({"api_key_env": KEY}, "api_key_env", id="the-key-itself"),
])
def test_endpoint_config_validates(change, key):
    with pytest.raises(ValueError, match=f"endpoint.{key}=") as e:
        EndpointConfig(**({"base_url": "http://h/v1", "model": "m"} | change))
    assert KEY not in str(e.value)


def test_training_and_audit_against_an_endpoint_judge_write_no_key(serve, tmp_path):
    """`python -m selfplay.train ... judge.model=endpoint` as a user runs it: one iteration of the tiny
    Llama judged by the scripted server, then `audit.gap` and `audit.judge_eval` on the same server. Its anchored verdicts read P(A) = 0.2 + 0.6·(len(A) mod 2),
    so candidates of different parity get different scores; the first request gets a malformed body
    and, with no retries, its verdict is unscored and counted (judge/nan_rate = 1/4), never a 0."""
    import os
    import re
    import subprocess
    import sys

    from selfplay.config import PROJECT_ROOT

    def script(req, i, auth):
        if i == 0:
            return 200, b'{"choices": [', 0
        user = req["messages"][-1]["content"]
        a = re.search(r"=== BEGIN ANSWER A ===\n(.*?)\n=== END ANSWER A ===", user, re.S)
        p_a = 0.2 + 0.6 * (len(a.group(1)) % 2 if a else 0)
        return 200, completion("A", {"A": p_a, "B": 1 - p_a}), 0

    server, _ = serve(script)
    endpoint = (f'{{base_url: "{server.url}", model: served, api_key_env: {KEY_ENV}, max_retries: 0, '
                'concurrency: 4, timeout_s: 10}')
    cmd = [sys.executable, "-m", "selfplay.train", "+policy=tiny-llama", "reward=anchored",
           "judge.model=endpoint", f"judge.endpoint={endpoint}", "reward.min_verdict_mass=0.0",
           "iterations=1", "k=2", "max_new_tokens=8", "max_train_envs=2", "margin=0.0", "pair_truncated=true",
           "lora.r=4", "lora.alpha=8", "logger=none", f"output_root={tmp_path / 'out'}",
           f"hydra.run.dir={tmp_path / 'hydra'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    it = tmp_path / "out" / "selfplay" / "anchored" / "seed0" / "iter_1"
    assert (it / "DONE").exists()
    rows = [json.loads(line) for line in (it / "judgments.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and sum(r["score"] is None for r in rows) == 1
    metrics = json.loads((it / "metrics.json").read_text())["metrics"]
    assert metrics["judge/nan_rate"] == pytest.approx(0.25)
    assert server.auth and set(server.auth) == {f"Bearer {KEY}"}  # the key was sent ...
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [p for p in written if KEY.encode() in p.read_bytes()]  # ... and written nowhere
    assert KEY not in proc.stdout + proc.stderr
    saved = (it / "config.yaml").read_text()
    assert "api_key_env: " + KEY_ENV in saved and "model: endpoint" in saved

    # the audit judges the run's checkpoints on the same server, through its request-keyed cache: a
    # rerun asks the server nothing; audit.judge_eval judges the stress answers there too
    audit = [sys.executable, "-m", "audit.gap", f"ckpt={it.parent}", "n=1", "max_envs=1", "bootstrap.B=1000",
             "probe=false", "kl=false", "logger=none", "progress=false"]
    for attempt in range(2):
        before = len(server.requests)
        proc = subprocess.run(audit, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (len(server.requests) > before) == (attempt == 0)
    assert (it.parent / "audit.json").exists() and list((it.parent / "audit_cache").glob("calls-*.jsonl"))
    evaluate = [sys.executable, "-m", "audit.judge_eval", "+policy=tiny-llama", "reward=anchored",
                "judge.model=endpoint", f"judge.endpoint={endpoint}", "max_envs=1",
                f"out_dir={tmp_path / 'eval'}", f"cache_dir={tmp_path / 'eval_cache'}"]
    before = len(server.requests)
    proc = subprocess.run(evaluate, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "eval" / "answers.jsonl").read_text().splitlines()]
    assert rows and len(server.requests) > before and all(r["score"] is not None for r in rows)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in written if KEY.encode() in p.read_bytes()]


def test_endpoint_judge_settings_are_checked_in_one_line(tmp_path):
    import subprocess
    import sys

    from selfplay.config import PROJECT_ROOT

    base = [sys.executable, "-m", "selfplay.train", "+policy=tiny-llama", "reward=anchored", "judge.model=endpoint",
            "logger=none", f"output_root={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    cases = {
        "no-endpoint": ([], "judge.endpoint=None: expected the server's settings"),
        "bad-url": (['judge.endpoint={base_url: "127.0.0.1:8000", model: m}'], "judge.endpoint.base_url="),
        "unset-key": (['judge.endpoint={base_url: "http://127.0.0.1:9/v1", model: m, api_key_env: SELFPLAY_NO_SUCH_KEY}'],
                      "SELFPLAY_NO_SUCH_KEY"),
    }
    for name, (extra, expected) in cases.items():
        proc = subprocess.run(base + extra, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0, name
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in proc.stderr, (name, proc.stderr)
        assert not list(tmp_path.glob("selfplay/*/seed0/iter_*")), name


def _pairwise(user: str) -> bool:
    return "=== BEGIN ANSWER B ===" in user


def _candidate_first(user: str) -> bool:
    return "=== BEGIN ANSWER A ===\ncand" in user


@pytest.mark.parametrize("script, cfg, score, retries", [
    pytest.param(lambda req, i, auth: (200, completion("A", {"A": 0.8, "B": 0.2}) if _candidate_first(
        req["messages"][-1]["content"]) else completion("B", {"A": 0.3, "B": 0.7}), 0), {}, 0.75, 0, id="logprobs"),
    pytest.param(lambda req, i, auth: (200, completion("A" if _candidate_first(req["messages"][-1]["content"]) else "B",
                                                       None), 0), {}, 1.0, 0, id="reply-only"),
    pytest.param(lambda req, i, auth: (429, {"error": {"message": "slow down"}}, 0) if i < 2
                 else (200, completion("A", {"A": 0.5, "B": 0.5}), 0), {"concurrency": 1}, 0.5, 2, id="429-then-200"),
    pytest.param(lambda req, i, auth: (200, completion("A", {"A": 0.5, "B": 0.5}), 1.0), {"timeout_s": 0.2, "max_retries": 1},
                 None, 2, id="hang"),
    pytest.param(lambda req, i, auth: (200, b'{"choices": [{"index": 0, "mess', 0), {"max_retries": 1}, None, 2,
                 id="malformed"),
])
def test_the_anchored_judge_on_each_kind_of_server(serve, script, cfg, score, retries):
    """Both orders of one candidate: a verdict from log-probabilities (0.8 and 0.7: 0.75), from the
    one-token reply (candidate named in both orders: 1), after two 429s (½), and unscored — None with
    a reason, never 0 — when the server hangs past the timeout or sends a cut body."""
    server, backend = serve(script, **cfg)
    judge = build_judge("anchored", backend, adapter=False)
    (v,) = judge.score([JudgeItem(env().public, "cand", "ref")])
    assert backend.stats["retries"] == retries
    if score is None:
        assert v.score is None and v.error
    else:
        assert v.score == pytest.approx(score) and v.error is None
