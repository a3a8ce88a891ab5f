"""The endpoint judge against a real `vllm serve` (CPU build) of SmolLM2, started by this test on
127.0.0.1 and stopped by it: its anchored scores equal the in-process judge's on the same weights
(the HF backend, adapter off) within 1e-3.

Why they can agree: the server applies the same chat template and continues the judge's "Verdict:"
turn (`prefill: continue`), so the verdict token follows the same tokens; the endpoint reads each
label's probability from the top-20 log-probabilities (a lower bound that misses only the tail
below the 20th token), the in-process judge from the full softmax.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from judges import JudgeItem, build_judge
from selfplay.envs.types import Document, PublicView
from selfplay.models import PolicyConfig, load_backend
from selfplay.models.endpoint import EndpointBackend
from selfplay.models.loading import checkpoint_dir

TOL = 1e-3
SERVED = "smollm2-judge"
PUBLIC = PublicView("t1", "Did mortality fall in the treated arm?", (
    Document("D1", "Treated arm: 40 deaths among 900 patients in 2023."),
    Document("D2", "The report gives no figure for the untreated arm."),
))
REFERENCE = "The packet cannot settle it: D2 gives no figure for the untreated arm, so there is nothing to compare."
ANSWERS = ["Yes, mortality fell by a third (D1).", REFERENCE,
           "The packet shows 40 deaths among 900 treated patients (D1) but no comparison arm (D2), so no fall can be concluded.",
           "No."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "vllm_serve.log"
    model = str(checkpoint_dir(PolicyConfig.named("smollm2-135m")))
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            # `vllm serve` reads the version of a distribution named vllm, and the CPU build is vllm-cpu;
            # this is the same server without that lookup
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1", "--port",
             str(port), "--served-model-name", SERVED, "--dtype", "float32", "--max-model-len", "2048",
             "--max-logprobs", "20"], stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not come up in 600 s:\n{log.read_text()[-3000:]}")
            time.sleep(2)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_endpoint_judge_equals_the_in_process_judge(server):
    endpoint = EndpointBackend.from_config({"base_url": server, "model": SERVED, "prefill": "continue",
                                            "top_logprobs": 20, "concurrency": 2, "timeout_s": 300})
    local = load_backend("smollm2-135m", backend="hf", device="cpu", progress=False)
    items = [JudgeItem(PUBLIC, a, REFERENCE) for a in ANSWERS]
    remote = build_judge("anchored", endpoint, adapter=False).score(items)
    here = build_judge("anchored", local, adapter=False).score(items)
    assert endpoint.stats["logprobs"] == 2 * len(items) and endpoint.stats["failed"] == 0
    for r, h in zip(remote, here, strict=True):
        assert h.score is not None and r.score is not None, (r.error, h.error)
        assert abs(r.score - h.score) <= TOL, (r, h)
        for a, b in zip(r.order_scores, h.order_scores, strict=True):
            assert abs(a - b) <= TOL
    # the reference against itself is ½ exactly on both
    assert remote[1].score == here[1].score == 0.5
