"""Model backends behind one interface (`Backend`, backend.py).

`load_backend(policy_cfg, backend="auto")` gives an `HFBackend` (transformers + PEFT LoRA, CPU or GPU)
or a `VLLMBackend` (GPU; vLLM serves the saved LoRA adapter, an HFBackend holds the weights trained).
"auto" picks vLLM when it is installed and CUDA is available, else HF. `BACKENDS` is the registry:
config validation (`train.backend`) and `load_backend` read the names from it, and
tests/test_contracts.py checks every class in it against `PolicyBackend`.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any

from selfplay.models.backend import Backend, PolicyBackend
from selfplay.models.chat import render
from selfplay.models.config import LoraSettings, PolicyConfig
from selfplay.models.loading import ModelUnavailableError, load_model, load_tokenizer, tiny_model

__all__ = [
    "BACKENDS",
    "BACKEND_CHOICES",
    "Backend",
    "LoraSettings",
    "ModelUnavailableError",
    "PolicyBackend",
    "PolicyConfig",
    "backend_class",
    "load_backend",
    "load_model",
    "load_tokenizer",
    "render",
    "tiny_model",
]


# The policy backends, by the name `train.backend` and `load_backend(backend=)` take: "module:Class",
# imported only when chosen (vLLM is the optional `gpu` extra).
BACKENDS: dict[str, str] = {
    "hf": "selfplay.models.hf:HFBackend",
    "vllm": "selfplay.models.vllm_backend:VLLMBackend",
}
BACKEND_CHOICES = ("auto", *BACKENDS)  # "auto": vllm when usable (vllm_usable), else hf


def backend_class(name: str) -> type:
    """The class registered as `name` in BACKENDS."""
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def _policy(cfg: PolicyConfig | Mapping[str, Any] | str) -> PolicyConfig:
    if isinstance(cfg, PolicyConfig):
        return cfg
    if isinstance(cfg, str):
        return PolicyConfig.named(cfg)
    return PolicyConfig.from_mapping(cfg)


def vllm_usable() -> bool:
    import torch

    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def load_backend(
    policy_cfg: PolicyConfig | Mapping[str, Any] | str,
    *,
    backend: str = "auto",
    lora: LoraSettings | Mapping[str, Any] | None = None,
    device: str | None = None,
    **kwargs: Any,
) -> PolicyBackend:
    """A ready backend for `policy_cfg` (a PolicyConfig, a mapping such as `cfg.policy`, or a name).

    `lora`: LoraSettings or a mapping of its fields (r, alpha, dropout, target_modules).
    `kwargs` go to the backend (HF: batch_size, progress, reuse_prefix, min_prefix; vLLM:
    gpu_memory_utilization, adapter_dir, ...).
    """
    cfg = _policy(policy_cfg)
    lora = lora if isinstance(lora, LoraSettings) else LoraSettings.from_mapping(lora)
    if backend not in BACKEND_CHOICES:
        raise ValueError(f"backend must be one of {', '.join(BACKEND_CHOICES)}; got {backend!r}")
    if backend == "auto":
        backend = "vllm" if vllm_usable() and cfg.tiny_arch is None else "hf"
    if backend == "vllm":
        kwargs.pop("hf_batch_size", None)
        return backend_class(backend).from_config(cfg, lora=lora, **kwargs)
    hf_batch = kwargs.pop("hf_batch_size", None)  # a setting of the hf backend only; vLLM batches itself
    if hf_batch is not None:
        kwargs["batch_size"] = hf_batch
    return backend_class(backend).from_config(cfg, lora=lora, device=device, **kwargs)
