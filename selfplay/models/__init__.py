"""Model backends behind one interface (`Backend`, backend.py).

`load_backend(policy_cfg, backend="auto")` gives an `HFBackend` (transformers + PEFT LoRA, CPU or GPU)
or a `VLLMBackend` (GPU; vLLM serves the saved LoRA adapter, an HFBackend holds the weights trained).
"auto" picks vLLM when it is installed and CUDA is available, else HF. `load_judge_backend` builds the
weights of a judge that is not the policy: another policy config's (inference only) or an
OpenAI-compatible server (`endpoint.py`). `BACKENDS` is the registry:
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
    "load_judge_backend",
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


VLLM_PYTHON = (3, 11)  # vLLM 0.32's own floor; the `gpu` extra carries it as a marker (pyproject.toml)


def check_vllm_installed() -> None:
    """backend=vllm without vLLM: one line saying how to get it, or why this Python cannot."""
    import sys

    if importlib.util.find_spec("vllm") is not None:
        return
    here = tuple(sys.version_info[:2])
    if here < VLLM_PYTHON:
        raise ModelUnavailableError(
            f"backend=vllm needs vLLM, which needs Python >= {'.'.join(map(str, VLLM_PYTHON))} (this is "
            f"{'.'.join(map(str, here))}; the gpu extra installs nothing here); use backend=hf or a newer Python")
    raise ModelUnavailableError("backend=vllm needs vLLM: pip install -c constraints/gpu.txt -e '.[gpu]' (README, GPU)")


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
        check_vllm_installed()
        kwargs.pop("hf_batch_size", None)
        return backend_class(backend).from_config(cfg, lora=lora, **kwargs)
    hf_batch = kwargs.pop("hf_batch_size", None)  # a setting of the hf backend only; vLLM batches itself
    if hf_batch is not None:
        kwargs["batch_size"] = hf_batch
    return backend_class(backend).from_config(cfg, lora=lora, device=device, **kwargs)


# A judge's own vLLM engine shares the GPU with the policy's engine and the HF copy that DPO trains;
# both engines sleep during the DPO step (selfplay.train), so this share is only held while sampling
# and judging.
JUDGE_GPU_MEMORY_UTILIZATION = 0.3


def load_judge_backend(judge: Any, *, backend: str = "auto") -> Backend:
    """The weights of a judge that is not the policy (`judge` is a selfplay.config.JudgeConfig):

    - `model=endpoint`: an `EndpointBackend` on `judge.endpoint` (its key's variable is read now, so a
      missing one is a ModelUnavailableError naming it, before anything is written);
    - a conf/policy name: that config's base weights, for inference only (on vLLM no trainable HF copy;
      the engine sleeps and wakes with the policy's around each DPO step).
    """
    if judge.model == "endpoint":
        from selfplay.models.endpoint import EndpointBackend, EndpointError

        cfg = judge.endpoint_config
        try:
            return EndpointBackend.from_config(cfg, name=f"endpoint:{cfg.model}")
        except EndpointError as e:
            raise ModelUnavailableError(f"judge.{e}") from None
    cfg = PolicyConfig.named(judge.model)
    if backend == "auto":
        backend = "vllm" if vllm_usable() and cfg.tiny_arch is None else "hf"
    if backend == "vllm":
        check_vllm_installed()
        return backend_class("vllm").from_config(cfg, trainable=False,
                                                 gpu_memory_utilization=JUDGE_GPU_MEMORY_UTILIZATION)
    return load_backend(cfg, backend=backend)
