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
