"""Typed, validated settings of `python -m selfplay.train`: the one source of their defaults and docs.

`TrainConfig` holds the non-group keys of a composed config; `DataConfig`, `JudgeConfig` and
`LoggerConfig` the `data`, `judge` and `logger` groups. Each field carries its help text in
`metadata["help"]` (as TRL's configs do). Importing this module registers their defaults in Hydra's
ConfigStore: `train_defaults` (the first entry of conf/config.yaml's defaults list) and `<group>/base`
(the first entry of every option in conf/data/, conf/judge/, conf/logger/), so the YAML files hold
only the group choices, what makes an option that option, and Hydra's settings. Every entry point
that composes conf/ imports this module first (selfplay.train, audit.gap, audit.judge_eval).

The defaults are registered as plain values, not as typed structured configs, on purpose: a value of
the wrong type (`k=two`) or an unknown key then reaches `train_settings`, which names the key in one
line; Hydra's own schema errors are several lines, printed before the entry point can catch them.
`train_settings(cfg)` merges the composed config over these dataclasses (OmegaConf names a mistyped
key) and `__post_init__` checks ranges. The dataclasses are not frozen because OmegaConf cannot merge
into frozen nested dataclasses; treat the instances as read-only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from selfplay.models import BACKEND_CHOICES
from selfplay.models.config import LoraSettings

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_ROOT / "conf"
# config groups composed by Hydra; everything else at the top level is a TrainConfig field
GROUPS = ("policy", "reward", "data", "judge", "logger")
# settings a resumed run may change without invalidating the iterations already written
RESUMABLE_KEYS = ("iterations", "logger", "output_root", "backend")


def train_lora() -> dict[str, Any]:
    """The adapter of a training run: rank 16 on the attention projections (a fresh dict per call)."""
    return {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


@dataclass
class TrainConfig:
    experiment_name: str = field(default="selfplay", metadata={"help": (
        "First level of outputs/<experiment_name>/<reward>/seed<s>/. `+experiment=NAME` picks a "
        "ready-made experiment in experiments/conf/experiment/, which sets this name.")})
    seed: int = field(default=0, metadata={"help": "Seeds sampling (per iteration) and the DPO data order."})
    iterations: int = field(default=3, metadata={"help": (
        "T: the number of self-play iterations; may grow when a run is resumed.")})
    k: int = field(default=4, metadata={"help": "Samples per train environment per iteration (>= 2)."})
    temperature: float = field(default=1.0, metadata={"help": "τ: the policy's sampling temperature."})
    max_new_tokens: int = field(default=256, metadata={"help": "Token budget of each sampled answer."})
    margin: float = field(default=0.1, metadata={"help": (
        "δ: the smallest chosen-minus-rejected score gap kept as a DPO pair (scores lie in [0, 1]); a "
        "judge design's own reward.margin, where set, replaces it for that design.")})
    beta: float = field(default=0.1, metadata={"help": "DPO β."})
    learning_rate: float = field(default=5.0e-5, metadata={"help": "DPO learning rate of the LoRA adapter."})
    epochs: int = field(default=1, metadata={"help": "Passes of DPO over one iteration's pairs."})
    batch_size: int = field(default=2, metadata={"help": (
        "Pairs per optimizer micro-step (per device). DPO activations dominate memory (bench P4), so "
        "a larger effective batch comes from grad_accum rather than from this.")})
    grad_accum: int = field(default=2, metadata={"help": (
        "Gradient accumulation steps: the effective batch is batch_size × grad_accum pairs.")})
    max_seq_len: int = field(default=4096, metadata={"help": (
        "Ceiling on prompt+answer tokens of a DPO sequence. The limit actually used is the longest "
        "pair of the iteration (nothing truncated) unless that exceeds this ceiling; truncation is "
        "counted.")})
    max_train_envs: int | None = field(default=None, metadata={"help": (
        "Use only the first N train environments (quick runs); null = every train environment.")})
    reference: str = field(default="previous", metadata={"help": (
        "The DPO reference policy: previous (π_{t-1}) or initial (π_0, the adapter off).")})
    backend: str = field(default="auto", metadata={"help": (
        f"The policy backend: {' | '.join(BACKEND_CHOICES)} (selfplay.models.BACKENDS).")})
    gradient_checkpointing: bool = field(default=False, metadata={"help": (
        "Recompute activations in the DPO backward pass (less memory, more time).")})
    sample_batch_size: int = field(default=32, metadata={"help": (
        "Sequences generated together on the hf backend (prompts × k). Larger batches amortise each "
        "decode step's weight reads on a CPU, at the cost of KV-cache memory (~46 KB per token for "
        "SmolLM2-135M in fp32).")})
    max_pairs: int | None = field(default=None, metadata={"help": (
        "At most this many DPO pairs per iteration: a random subset, drawn afresh each iteration from "
        "its own seed stream, when more are found (an offline reward, which pairs every labelled "
        "answer, finds ~100-150 on mini); null = every pair.")})
    pair_truncated: bool = field(default=False, metadata={"help": (
        "Keep answers cut at max_new_tokens in DPO pairs. False leaves them out (TRL would end them "
        "with an EOS the policy never wrote); true only for smoke runs of random test models, which "
        "never stop on their own.")})
    output_root: str = field(default="outputs", metadata={"help": "Directory holding every experiment's runs."})
    lora: dict[str, Any] = field(default_factory=train_lora, metadata={"help": (
        "The LoRA adapter: r, alpha, dropout, target_modules (selfplay.models.config.LoraSettings).")})

    def __post_init__(self) -> None:
        _require(bool(self.experiment_name) and "/" not in self.experiment_name, "experiment_name", self.experiment_name,
                 "a non-empty name without '/'")
        _require(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        _require(self.iterations >= 1, "iterations", self.iterations, "an integer >= 1")
        _require(self.k >= 2, "k", self.k, "an integer >= 2 (a pair needs two answers)")
        _require(self.temperature > 0 and math.isfinite(self.temperature), "temperature", self.temperature, "> 0")
        _require(self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens, "an integer >= 1")
        _require(0.0 <= self.margin <= 1.0, "margin", self.margin, "in [0, 1] (scores lie in [0, 1])")
        _require(self.beta > 0, "beta", self.beta, "> 0")
        _require(self.learning_rate > 0, "learning_rate", self.learning_rate, "> 0")
        _require(self.epochs >= 1, "epochs", self.epochs, "an integer >= 1")
        _require(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")
        _require(self.grad_accum >= 1, "grad_accum", self.grad_accum, "an integer >= 1")
        _require(self.sample_batch_size >= 1, "sample_batch_size", self.sample_batch_size, "an integer >= 1")
        _require(self.max_seq_len >= 16, "max_seq_len", self.max_seq_len, "an integer >= 16")
        _require(self.max_train_envs is None or self.max_train_envs >= 1, "max_train_envs",
                 self.max_train_envs, "null or an integer >= 1")
        _require(self.max_pairs is None or self.max_pairs >= 1, "max_pairs", self.max_pairs,
                 "null or an integer >= 1")
        _require(self.reference in ("previous", "initial"), "reference", self.reference, "previous or initial")
        _require(self.backend in BACKEND_CHOICES, "backend", self.backend, ", ".join(BACKEND_CHOICES))
        try:
            LoraSettings.from_mapping(self.lora)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"lora={self.lora!r}: {e}") from None

    @property
    def lora_settings(self) -> LoraSettings:
        return LoraSettings.from_mapping(self.lora)


@dataclass
class DataConfig:
    # required: the `data` group's options set it (mini: data/mini; release: data.path=DIR)
    path: str = field(default=MISSING, metadata={"help": (
        "A release directory or a combined *.jsonl export. A relative path is looked up in the "
        "current directory first, then in the project root (where the bundled data/mini lives).")})
    splits: str | None = field(default=None, metadata={"help": (
        "The directory holding the splits/ files; null = the data directory itself.")})

    def __post_init__(self) -> None:
        _require(bool(self.path), "data.path", self.path, "a path")


@dataclass
class JudgeConfig:
    model: str = field(default="self", metadata={"help": (
        "The judge's weights: self (π_{t-1}, the adapter on), frozen (π_0, the adapter off), the "
        "name of a conf/policy config (its base weights), or endpoint (an OpenAI-compatible server "
        "named by `endpoint`, e.g. `vllm serve` of a larger model that every job of a sweep shares).")})
    endpoint: dict[str, Any] | None = field(default=None, metadata={"help": (
        "With model=endpoint: the server, as selfplay.models.endpoint.EndpointConfig fields (base_url, "
        "model, api_key_env = the NAME of the variable holding the key, prefill, verdict_mode, "
        "concurrency, ...); conf/judge/endpoint.yaml is an example. Null otherwise.")})

    def __post_init__(self) -> None:
        _require(bool(self.model), "judge.model", self.model, "self, frozen, a policy config name or endpoint")
        if self.model == "endpoint":
            _require(self.endpoint is not None, "judge.endpoint", self.endpoint,
                     "the server's settings with judge.model=endpoint, e.g. "
                     "judge.endpoint='{base_url: \"http://HOST:8000/v1\", model: NAME}'")
            try:
                self.endpoint_config  # noqa: B018 -- validates the fields, one line naming the bad one
            except ValueError as e:
                raise ConfigError(f"judge.{e}") from None

    @property
    def endpoint_config(self):
        """The validated `EndpointConfig` of model=endpoint, else None."""
        from selfplay.models.endpoint import EndpointConfig

        if self.model != "endpoint" or self.endpoint is None:
            return None
        return EndpointConfig.from_mapping(self.endpoint)


@dataclass
class LoggerConfig:
    kind: str = field(default="wandb", metadata={"help": "wandb (one run per seed) | none."})
    project: str = field(default="selfplay-judges", metadata={"help": "The wandb project."})
    mode: str = field(default="offline", metadata={"help": (
        "The wandb mode: offline (files under the run directory, no network), online, disabled.")})
    entity: str | None = field(default=None, metadata={"help": "The wandb entity; null = the account's default."})
    dir: str | None = field(default=None, metadata={"help": "Where wandb writes its files; null = the run directory."})

    def __post_init__(self) -> None:
        _require(self.kind in ("wandb", "none"), "logger.kind", self.kind, "wandb or none")
        _require(self.mode in ("offline", "online", "disabled"), "logger.mode", self.mode,
                 "offline, online or disabled")


# the group configs this module owns (`policy` and `reward` belong to selfplay.models and judges)
GROUP_SCHEMAS: dict[str, type] = {"data": DataConfig, "judge": JudgeConfig, "logger": LoggerConfig}


@dataclass(frozen=True)
class Settings:
    """Everything the loop reads, validated; `policy` and `reward` stay as the raw group configs because
    their schemas belong to `selfplay.models` and `judges`."""

    train: TrainConfig
    data: DataConfig
    judge: JudgeConfig
    logger: LoggerConfig
    policy: DictConfig
    reward: DictConfig
    reward_name: str
    policy_name: str


class ConfigError(ValueError):
    pass


def _require(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r}: expected {expected}")


def _typed(schema: type, node: Any, where: str) -> Any:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node if node is not None else {})
        return OmegaConf.to_object(merged)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    except OmegaConfBaseException as e:  # a value of the wrong type, e.g. k=two
        key = getattr(e, "full_key", None) or ""
        prefix = "" if where == "settings" else f"{where}."
        value = OmegaConf.select(OmegaConf.create(node or {}), key) if key else None
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{prefix}{key}={value!r}: {first}" if key else f"{where}: {first}") from None


def check_reward(name: str, params: Any) -> None:
    """The reward group names a judge design and its parameters; checked before anything runs."""
    import judges

    if name not in judges.JUDGES:
        raise ConfigError(f"reward={name!r}: unknown judge design; known: {', '.join(sorted(judges.JUDGES))}")
    try:
        judges.check_reward(name, params)  # the design's own parameter check (judges.registry)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"reward={name}: {e}") from None


def check_judge_model(model: str) -> None:
    """judge.model: self, frozen, endpoint (its settings are checked by JudgeConfig), or the name of a
    conf/policy config that exists and is valid."""
    if model in ("self", "frozen", "endpoint"):
        return
    from selfplay.models.config import PolicyConfig

    try:
        PolicyConfig.named(model)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"judge.model={model!r}: expected self, frozen, endpoint or a policy config name; {e}") from None


def check_data_path(data: DataConfig) -> None:
    """data.path (and data.splits) must exist; named as given, with where it was looked for."""
    for key, value in (("data.path", data.path), ("data.splits", data.splits)):
        if value is None:
            continue
        found = resolve_data_path(value)
        if not found.exists():
            where = "" if Path(value).expanduser().is_absolute() else f" (looked in {Path.cwd()} and {PROJECT_ROOT})"
            broken = " (a dangling symlink)" if found.is_symlink() else ""
            raise ConfigError(f"{key}={value}: no such file or directory{broken}{where}")


def policy_choices() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "policy").glob("*.yaml"))


def train_settings(cfg: DictConfig) -> Settings:
    """Validate a composed config. Raises ConfigError with one clear message."""
    if cfg.get("policy") is None:
        raise ConfigError(
            "no policy given: add +policy=NAME, one of: " + ", ".join(policy_choices())
            + " (e.g. python -m selfplay.train +policy=smollm2-135m reward=anchored)"
        )
    resolved = OmegaConf.to_container(cfg, resolve=True)
    # a "???" would otherwise be merged away by the schema default, silently
    missing = OmegaConf.missing_keys(cfg)
    if missing:
        hint = " (data=release needs data.path=DIR)" if "data.path" in missing else ""
        raise ConfigError(f"required setting(s) not given: {', '.join(sorted(missing))}{hint}")
    train_keys = {f.name for f in fields(TrainConfig)}
    top = {k: v for k, v in resolved.items() if k not in GROUPS}
    unknown = sorted(set(top) - train_keys)
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown}; valid: {sorted(train_keys)}")
    reward = resolved.get("reward") or {}
    if not reward.get("name"):
        raise ConfigError("no reward given: reward=NAME with NAME a file in conf/reward/")
    settings = Settings(
        train=_typed(TrainConfig, top, "settings"),
        data=_typed(DataConfig, resolved.get("data"), "data"),
        judge=_typed(JudgeConfig, resolved.get("judge"), "judge"),
        logger=_typed(LoggerConfig, resolved.get("logger"), "logger"),
        policy=OmegaConf.create(resolved["policy"]),
        reward=OmegaConf.create(reward),
        reward_name=str(reward["name"]),
        policy_name=str(resolved["policy"].get("name", "")),
    )
    check_policy(resolved["policy"])
    check_reward(settings.reward_name, reward)
    check_judge_model(settings.judge.model)
    return settings


def check_policy(policy: Any) -> None:
    from selfplay.models.config import PolicyConfig

    try:
        PolicyConfig.from_mapping(policy)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"policy: {e}") from None


def resolve_data_path(path: str, cwd: Path | None = None) -> Path:
    """A relative path is found in the current directory first, then in the project root."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    here = (cwd or Path.cwd()) / p
    return here if here.exists() else PROJECT_ROOT / p


def comparable(resolved: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that must match for a run directory to be resumed."""
    return {k: v for k, v in resolved.items() if k not in RESUMABLE_KEYS and k != "hydra"}


# -- Hydra's ConfigStore: the defaults above, as the base of conf/config.yaml and of each group option

def defaults_of(schema: type) -> dict[str, Any]:
    """The field defaults of a config dataclass as plain data (what Hydra composes)."""
    return OmegaConf.to_container(OmegaConf.structured(schema))


def register_defaults() -> None:
    store = ConfigStore.instance()
    store.store(name="train_defaults", node=defaults_of(TrainConfig))
    for group, schema in GROUP_SCHEMAS.items():
        store.store(group=group, name="base", node=defaults_of(schema))


register_defaults()
