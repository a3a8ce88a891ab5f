"""The real-vLLM tests run only under `make test-vllm`, which installs vLLM's CPU build in its own
environment (.venv-vllm) and sets SELFPLAY_VLLM_TESTS=1; the default `make test` skips this folder."""

import os

import pytest

if os.environ.get("SELFPLAY_VLLM_TESTS") != "1":
    collect_ignore_glob = ["*.py"]
else:
    # the engine runs in this process (no engine-core subprocess): faster to start on a small CPU
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

DIFFS: list[float] = []  # every max |vLLM - HF| log-prob difference the tests compared


@pytest.fixture(scope="session")
def logprob_diffs() -> list[float]:
    return DIFFS


def pytest_terminal_summary(terminalreporter):
    if DIFFS:
        terminalreporter.write_line(
            f"max |vLLM - HF| log-prob difference: {max(DIFFS):.2e} over {len(DIFFS)} comparisons (bar 1e-4)"
        )
