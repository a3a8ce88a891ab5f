"""A LoRA adapter moved off π_0 without training, for checks that need adapter on ≠ off.

PEFT initialises every LoRA B matrix to zero, so a fresh adapter is a no-op and "adapter on versus
off" compares π_0 with itself. The backend checks (`make gpu-check`, the vLLM-vs-HF comparison) and
the tests of the KL axis, the adapter switch and the DPO step need an adapter that changes the
log-probs; seeded Gaussian noise on the B matrices gives one, reproducibly.
"""

from __future__ import annotations

import torch


def perturb_lora(model: torch.nn.Module, seed: int, scale: float = 0.05) -> None:
    """Set every LoRA B matrix of `model` to N(0, scale²) noise drawn from a CPU generator seeded
    with `seed` (the same values on every device), in the parameter's own device and dtype."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=g) * scale).to(p.device, p.dtype))
