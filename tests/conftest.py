import os
from pathlib import Path

import pytest

# No network in tests: hub lookups fail fast, wandb never leaves the machine.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
RELEASE = REPO.parent / "shared" / "impossible_rubrics"
MINI = REPO / "data" / "mini"


@pytest.fixture(scope="session")
def release_dir() -> Path:
    if not RELEASE.is_dir():
        pytest.skip(f"release records not found at {RELEASE}")
    return RELEASE


@pytest.fixture(scope="session")
def mini_dir() -> Path:
    return MINI


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
