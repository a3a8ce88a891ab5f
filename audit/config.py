"""Typed, validated settings of `python -m audit.gap` (conf/audit.yaml).

The primary oracle is the `oracle` group (conf/oracle/); left unset it is the data's default:
`any` of `spec` + `checks` (no model) where every audited record carries `evaluation_spec.checks`
(data/mini), the LLM oracle `llm` otherwise. The LLM oracle's default model is `initial`: the run's
own policy base weights with the LoRA adapter off (π_0), the one model every run has at hand
offline, which never saw a reward and is the same at every iteration and seed. At 135M it is a weak
reader of certificates, which its calibration shows and the gate acts on (audit.calibration).
`second_oracle=NAME` adds a second LLM oracle for the IBE of judge × oracle2.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from selfplay.config import ConfigError, LoggerConfig

from .calibration import GateConfig
from .stats import DEFAULT_B, MIN_B


class AuditConfigError(ValueError):
    pass


@dataclass
class BootstrapConfig:
    B: int = DEFAULT_B  # environment resamples per interval (2000 by default, docs/method.md §Intervals over environments; fewer than MIN_B is refused)
    alpha: float = 0.05  # 1 − interval level


@dataclass
class AuditConfig:
    ckpt: str = "???"  # iter_<t>, seed, reward or experiment dir of selfplay.train (required)
    n: int = 8  # policy answers per audit environment; 0: no free generation (stress answers and probe only)
    temperature: float | None = None  # null: the run's own sampling temperature
    max_new_tokens: int | None = None  # null: the run's own answer budget
    seed: int = 0  # seeds sampling (per environment) and every bootstrap
    max_envs: int | None = None  # audit only the first N audit environments (quick checks)
    # audit only t = 0 and these iterations of each run (-1: the last one every run has completed,
    # so that seeds and rewards meet at the same t); null: every one (audit.checkpoints)
    iterations: list[int] | None = None
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    length_match: float = 0.2  # length-matched AUROC: relative length difference below this
    # the primary oracle: the `oracle` group (conf/oracle/: llm | checks | spec | any, fields in
    # judges.verifiers.OracleConfig); null = the data's default (`any` of spec + checks where every
    # audited record carries evaluation_spec.checks, as on mini; `llm` on a release)
    oracle: dict[str, Any] | None = None
    # a conf/policy name (or `initial`) for a second LLM oracle, for the IBE of judge × oracle2
    second_oracle: str | None = None
    # the primary oracle's calibration gate (audit.calibration.GateConfig): max_accept_invalid,
    # max_reject_valid (shares, 0.2), min_per_class (10 labelled answers of each class), and
    # max_undecided (0.1: warn above this share of undecided verdicts)
    gate: GateConfig = field(default_factory=GateConfig)
    # calibrate on the data set's labelled_answers.jsonl (mini) besides the stress answers, when
    # the file exists
    labelled: bool = True
    kl: bool = True  # estimate KL(π_t ‖ π_0) from the audit's samples (two log-prob passes per answer)
    # the preference probe (docs/method.md §Preference probe): Δℓ_t of every labelled answer of the audited environments
    probe: bool = True
    # the probe on the labelled on-policy answers of the audited environments too (on mini, most of
    # the probe's forward passes), reported apart from the stress answers
    probe_labelled: bool = True
    # the reward every other is contrasted with, paired over environments (audit.contrasts)
    baseline: str = "random"
    # a second held-out probe set (audit.probe_sets): a release- or mini-shaped directory whose
    # labelled stress answers the probe also scores, written as `<metric>@<name>`, never pooled with
    # the audit split; its name is the directory's unless probe_data_name says otherwise
    probe_data: str | None = None
    probe_data_name: str | None = None
    batch_size: int = 8  # hf backend batch size; the audit samples batch_size // n environments per call
    device: str | None = None  # null: cuda when available, else cpu
    progress: bool = True  # tqdm bars
    # the `logger` group shared with selfplay.train: kind wandb (one run per seed, offline by
    # default) or none; validated by selfplay.config.LoggerConfig
    logger: LoggerConfig = field(default_factory=LoggerConfig)

    def __post_init__(self) -> None:
        _require(self.n >= 0, "n", self.n, "an integer >= 0")
        _require(self.temperature is None or (self.temperature > 0 and math.isfinite(self.temperature)),
                 "temperature", self.temperature, "null or > 0")
        _require(self.max_new_tokens is None or self.max_new_tokens >= 1, "max_new_tokens",
                 self.max_new_tokens, "null or an integer >= 1")
        _require(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        _require(self.iterations is None or (len(self.iterations) > 0 and all(t >= -1 for t in self.iterations)),
                 "iterations", self.iterations, "null or a non-empty list of iterations >= 0 (-1: the last)")
        _require(self.max_envs is None or self.max_envs >= 1, "max_envs", self.max_envs, "null or >= 1")
        _require(self.bootstrap.B >= MIN_B, "bootstrap.B", self.bootstrap.B,
                 f"an integer >= {MIN_B} ({DEFAULT_B} by default): fewer resamples give unstable interval ends")
        _require(0 < self.bootstrap.alpha < 1, "bootstrap.alpha", self.bootstrap.alpha, "in (0, 1)")
        _require(0 < self.length_match <= 1, "length_match", self.length_match, "in (0, 1]")
        models = [self.second_oracle] if self.second_oracle is not None else []
        if self.oracle is not None:
            from judges.verifiers import OracleConfig

            try:
                oracle = OracleConfig.from_mapping(self.oracle)
            except (TypeError, ValueError) as e:
                raise AuditConfigError(str(e)) from None
            models += [oracle.model] if oracle.uses_llm else []
        for model in models:  # a conf/policy name, the run's own weights, or a server
            if model not in ("initial", "endpoint"):
                from selfplay.models.config import PolicyConfig

                try:
                    PolicyConfig.named(model)
                except ValueError as e:
                    raise AuditConfigError(f"oracle model: {e}") from None
        _require(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")

    def fingerprint(self) -> dict[str, Any]:
        """The settings that shape the numbers (what audit.json records); not paths or display."""
        from .collect import chunk_size

        d = asdict(self)
        for k in ("ckpt", "progress", "logger", "batch_size", "device"):
            d.pop(k)
        if self.iterations is None:  # every iteration: as audits written before the key existed read
            d.pop("iterations")
        # how many environments share a generate call shapes the answers (audit.collect.chunk_size)
        d["sample_chunk"] = chunk_size(self.batch_size, self.n)
        return d


def _require(ok: bool, key: str, value: Any, expected: str) -> None:
    if not ok:
        raise AuditConfigError(f"{key}={value!r}: expected {expected}")


def audit_config(cfg: DictConfig) -> AuditConfig:
    """Validate the composed config; one AuditConfigError naming the key on any problem."""
    if OmegaConf.is_missing(cfg, "ckpt") or not str(cfg.get("ckpt") or "").strip():
        raise AuditConfigError("ckpt=PATH is required: an iter_<t>, seed<s>, reward or experiment dir "
                               "written by selfplay.train (e.g. python -m audit.gap "
                               "ckpt=outputs/selfplay/anchored/seed0)")
    plain = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k != "hydra"}
    try:
        merged = OmegaConf.merge(OmegaConf.structured(AuditConfig), plain)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        msg = str(e).splitlines()[0]
        raise AuditConfigError(f"{key}: {msg}" if key else msg) from None
    except (ConfigError, ValueError) as e:
        raise AuditConfigError(str(e)) from None
