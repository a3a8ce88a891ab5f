"""Linear layers on oneDNN-prepacked weights, with the LoRA adapter folded in, for decoding on a CPU.

A decode step multiplies a few rows (one per sample) by every weight matrix of the model, so it is
bound by how fast the weights are read. `F.linear` hands that to MKL's sgemm, which at so few rows
reads an fp32 matrix at a fraction of the memory bandwidth; oneDNN's inner-product kernel on a
weight reordered once into its blocked layout reads it faster at the same precision (bench/README.md).
That pair of ops is torch's own (what torch.compile's CPU weight freezing emits:
`torch.ops.mkldnn._reorder_linear_weight`, `torch.ops.mkldnn._linear_pointwise`), called here
without compiling anything.

A PEFT LoRA layer runs as one packed matrix W + scaling·B·A (PEFT's own `get_delta_weight`), W
alone while the adapter is disabled: its A and B products and the add are hundreds of tiny ops a
decode step. The fold is made when `active` is entered, from the adapter state
then (on or off, the current A and B), and kept until a weight or that state changes.

Inputs with more than `max_rows` rows (a prefill) take the layer's own forward, unchanged. The rest
is float32 arithmetic in another order, so outputs agree with the plain layers to float32
rounding, not bit for bit (tests/test_models.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from peft.tuners.lora import Linear as LoraLinear
from torch import nn


def available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def available_memory() -> float:
    """Bytes the system can still give without swapping (MemAvailable); unbounded where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")


def _version(t: torch.Tensor) -> tuple[int, int]:
    return t.data_ptr(), t._version  # _version counts in-place writes (optimizer steps, copy_)


class PackedLinears:
    """Packed weights of a model's linear layers, kept between calls: one more copy of those weights
    in memory. `max_rows`: the most input rows a layer runs packed."""

    def __init__(self, max_rows: int = 16):
        self.max_rows = max_rows
        self._held: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, torch.Tensor]] = weakref.WeakKeyDictionary()

    @contextmanager
    def active(self, model: nn.Module) -> Iterator[None]:
        """Inside, every foldable linear layer of `model` (LoRA-wrapped or plain, float32 or bf16 on
        the CPU, in eval mode) runs on its packed weight. Inference only: the op has no backward.
        Where the copies not yet held would take more than half the memory the system has available,
        nothing is packed and the layers run as they are."""
        # a LoRA layer's base, A and B are folded into it, not packed on their own
        inside = {id(m) for lora in model.modules() if type(lora) is LoraLinear for m in lora.modules() if m is not lora}
        layers = [(layer, base) for layer in model.modules()
                  if id(layer) not in inside and (base := _base(layer)) is not None]
        new = sum(base.weight.nbytes for layer, base in layers if layer not in self._held)
        if new > available_memory() / 2:
            layers = []
        patched = []
        try:
            for layer, base in layers:
                layer.forward = self._forward(layer, base, self._packed(layer, base))
                patched.append(layer)
            yield
        finally:
            for layer in patched:
                del layer.forward

    def _packed(self, layer: nn.Module, base: nn.Linear) -> torch.Tensor:
        adapters = _lora_adapters(layer)
        key = (_version(base.weight), tuple(
            (name, _version(layer.lora_A[name].weight), _version(layer.lora_B[name].weight), layer.scaling[name])
            for name in adapters))
        held = self._held.get(layer)
        if held is None or held[0] != key:
            with torch.no_grad():
                weight = base.weight.detach()
                for name in adapters:
                    weight = weight + layer.get_delta_weight(name).to(weight.dtype)
                held = (key, torch.ops.mkldnn._reorder_linear_weight(weight, self.max_rows))
            self._held[layer] = held
        return held[1]

    def _forward(self, layer: nn.Module, base: nn.Linear, packed: torch.Tensor):
        plain, bias, dtype, max_rows = type(layer).forward, base.bias, base.weight.dtype, self.max_rows

        def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            if args or kwargs or x.dtype != dtype or x.numel() > max_rows * x.shape[-1]:
                return plain(layer, x, *args, **kwargs)
            return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

        return forward


def _base(layer: nn.Module) -> nn.Linear | None:
    """The nn.Linear whose weight `layer` multiplies by, where its forward can be folded into one
    packed matrix; None otherwise. A forward already set on an instance is someone else's hook
    (accelerate's offloading) and is left alone."""
    if "forward" in vars(layer) or layer.training:
        return None
    if type(layer) is LoraLinear:
        base = layer.get_base_layer()
        if (layer.merged or layer.fan_in_fan_out or "forward" in vars(base)
                or any(layer.lora_variant.get(a) is not None or layer.lora_bias.get(a) for a in _lora_adapters(layer))):
            return None
    elif type(layer) is nn.Linear:
        base = layer
    else:
        return None
    w = base.weight
    ok = type(base) is nn.Linear and w.device.type == "cpu" and w.dtype in (torch.float32, torch.bfloat16)
    return base if ok else None


def _lora_adapters(layer: nn.Module) -> list[str]:
    """The adapters PEFT's forward would add on `layer` now (none while adapters are disabled)."""
    if type(layer) is not LoraLinear or layer.disable_adapters:
        return []
    return [a for a in layer.active_adapters if a in layer.lora_A.keys()]
