"""Oracles as one interface: `Verifier.verify(pairs) -> list[OracleVerdict]`, built from config.

Verifiers (docs/method.md §Oracles, `conf/oracle/`) are the entries of `judges.registry.VERIFIERS`, each registered
by the module that defines it:
- `llm`: the LLM oracle (`judges/oracle.py`) on `model`: "initial" (the run's π_0, adapter off), a
  `conf/policy` config name, or "endpoint" (an OpenAI-compatible server, `selfplay.models.endpoint`);
- `checks`: the deterministic number / citation checks (`judges/checks.py`), public view only;
- `spec`: `evaluation_spec.checks` (`judges/spec.py`); None on a record without it.
`any` combines two or more of them: violates when any listed verifier says so. Rule, in order:
violates = True when at least one listed verifier says True (`verifier` = the names that did,
joined by "+"); otherwise None when at least one is undecided (an undecided verifier can never
clear an answer; `verifier` = the undecided names); otherwise False (`verifier` = every name).
`parts` keeps each verifier's own verdict, so one run calibrates the combination and each member.

Defaults (`default_oracle_name`): `any` of `spec` + `checks` where every audited record carries
`evaluation_spec.checks` (data/mini), `llm` otherwise (a release).

Rows: `verdict_row(v)` is a verdict as JSON, `verdict_from_row` reads it back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from selfplay.envs.types import Environment
from selfplay.fields import field_values
from selfplay.models.endpoint import EndpointConfig

from .oracle import OracleVerdict
from .registry import VERIFIERS, verifier

ANY = "any"
ORACLE_DIR = Path(__file__).resolve().parents[1] / "conf" / "oracle"


@runtime_checkable
class Verifier(Protocol):
    name: str

    def verify(self, pairs: Sequence[tuple[Environment, str]]) -> list[OracleVerdict]:
        """One verdict per (environment, answer), in order."""


# ---------------------------------------------------------------- config


@dataclass(frozen=True)
class OracleConfig:
    """The `oracle` group (conf/oracle/<name>.yaml); every file holds all fields.

    name: a registered verifier ("llm", "checks", "spec", ...) or "any".
    verifiers: for `any`, the members (two or more registered verifiers); empty otherwise.
    model: the LLM oracle's model, used when `llm` is the oracle or a member: "initial" (the run's
        π_0, adapter off), a conf/policy config name, or "endpoint" (then `endpoint` is required).
    min_mass: floor on the Yes/No verdict-token mass below which the LLM oracle abstains
        (judges.scoring); null = the judges' default. Tiny random test models need 0.
    endpoint: `selfplay.models.endpoint.EndpointConfig` fields (base_url, model, api_key_env, ...)
        when model = "endpoint"; null otherwise.
    """

    name: str = ANY
    verifiers: tuple[str, ...] = ("spec", "checks")
    model: str = "initial"
    min_mass: float | None = None
    endpoint: EndpointConfig | None = None

    def __post_init__(self) -> None:
        known = tuple(sorted(VERIFIERS))
        if self.name not in known + (ANY,):
            raise ValueError(f"oracle.name={self.name!r}: expected one of {known + (ANY,)}")
        members = tuple(self.verifiers or ())
        object.__setattr__(self, "verifiers", members)
        if self.name == ANY:
            bad = [m for m in members if m not in known]
            if bad or len(members) < 2 or len(set(members)) != len(members):
                raise ValueError(f"oracle.verifiers={list(members)!r}: `any` needs two or more distinct "
                                 f"members of {known}")
        elif members:
            raise ValueError(f"oracle.verifiers={list(members)!r}: only `any` takes members "
                             f"(oracle.name={self.name!r})")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError(f"oracle.model={self.model!r}: expected initial, a policy config name or endpoint")
        if self.min_mass is not None and not 0 <= self.min_mass < 1:
            raise ValueError(f"oracle.min_mass={self.min_mass!r}: expected null or in [0, 1)")
        if isinstance(self.endpoint, Mapping):
            object.__setattr__(self, "endpoint", EndpointConfig.from_mapping(self.endpoint))
        if self.uses_llm and self.model == "endpoint" and self.endpoint is None:
            raise ValueError("oracle.model=endpoint needs oracle.endpoint (base_url, model, api_key_env)")

    @property
    def members(self) -> tuple[str, ...]:
        return self.verifiers if self.name == ANY else (self.name,)

    @property
    def uses_llm(self) -> bool:
        return any(VERIFIERS[m].uses_llm for m in self.members)

    @property
    def reads_anchor(self) -> bool:
        return any(VERIFIERS[m].reads_anchor for m in self.members)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> OracleConfig:
        """From a dict or an OmegaConf node (`cfg.oracle`); unknown keys are an error."""
        from omegaconf import DictConfig, OmegaConf

        if isinstance(values, DictConfig):
            values = OmegaConf.to_container(values, resolve=True)
        values = field_values(cls, values, "oracle: unknown keys {unknown}; known: {known}")
        if values.get("verifiers") is not None:
            values["verifiers"] = tuple(values["verifiers"])
        else:
            values["verifiers"] = ()
        if values.get("endpoint") is not None:
            values["endpoint"] = dict(values["endpoint"].items())
        return cls(**values)

    @classmethod
    def named(cls, name: str) -> OracleConfig:
        """conf/oracle/<name>.yaml."""
        path = ORACLE_DIR / f"{name}.yaml"
        if not path.is_file():
            raise ValueError(f"no oracle config {name!r} in {ORACLE_DIR} (have: {sorted(p.stem for p in ORACLE_DIR.glob('*.yaml'))})")
        return cls.from_mapping(yaml.safe_load(path.read_text()))

    def fingerprint(self) -> dict[str, Any]:
        """JSON-able settings that shape verdicts (never the key: only the endpoint's public settings)."""
        out: dict[str, Any] = {"name": self.name, "verifiers": list(self.verifiers)}
        if self.uses_llm:
            out |= {"model": self.model, "min_mass": self.min_mass,
                    "endpoint": self.endpoint.fingerprint() if self.endpoint else None}
        return out


def default_oracle_name(envs: Sequence[Environment]) -> str:
    """"any" (of spec + checks) when every record carries evaluation_spec.checks, else "llm"."""
    from .spec import checks_of

    return "any" if envs and all(checks_of(e) is not None for e in envs) else "llm"


# ---------------------------------------------------------------- verifiers


class AnyVerifier:
    """Violates when any member says so (the rule in the module docstring)."""

    name = ANY

    def __init__(self, members: Sequence[Verifier]):
        if len(members) < 2:
            raise ValueError("`any` needs two or more verifiers")
        self.members = tuple(members)

    def verify(self, pairs: Sequence[tuple[Environment, str]]) -> list[OracleVerdict]:
        per = [m.verify(pairs) for m in self.members]
        return [combine(tuple(vs)) for vs in zip(*per, strict=True)]


def combine(parts: tuple[OracleVerdict, ...]) -> OracleVerdict:
    yes = [p for p in parts if p.violates is True]
    undecided = [p for p in parts if p.violates is None]
    if yes:
        violates, deciders = True, yes
    elif undecided:
        violates, deciders = None, undecided
    else:
        violates, deciders = False, list(parts)
    decided = [p.p_violates for p in parts if p.violates is not None and p.p_violates is not None]
    p = None if violates is None or not decided else max(decided)
    error = None if violates is not None else "; ".join(f"{d.verifier}: {d.error}" for d in deciders)
    reason = "; ".join(f"{d.verifier}: {d.reason}" for d in deciders)
    return OracleVerdict(p, violates, error, verifier="+".join(d.verifier for d in deciders), reason=reason,
                         fired=tuple(f for d in yes for f in d.fired), parts=parts)


def build_verifier(oracle_cfg: OracleConfig | Mapping[str, Any], *,
                   backend_for: Callable[[str], Any] | None = None) -> Verifier:
    """The verifier `oracle_cfg` names (for `any`, each member combined). `backend_for(model) ->
    Backend` goes to each member's builder; only one that uses a model calls it (the caller owns
    model loading: the audit maps "initial" to the run's policy, whose adapter the oracle switches
    off; see judges.oracle.build_llm_oracle)."""
    cfg = oracle_cfg if isinstance(oracle_cfg, OracleConfig) else OracleConfig.from_mapping(oracle_cfg)
    built = [verifier(m).build(cfg, backend_for) for m in cfg.members]
    return AnyVerifier(built) if cfg.name == ANY else built[0]


# ---------------------------------------------------------------- verdict rows


def verdict_row(v: OracleVerdict) -> dict[str, Any]:
    """A JSON-able row (the prompt left out: it is rebuilt from the environment and the answer)."""
    return {"violates": v.violates, "p_violates": v.p_violates, "error": v.error, "probs": dict(v.probs),
            "verifier": v.verifier, "reason": v.reason, "fired": list(v.fired), "mode": v.mode,
            "parts": [verdict_row(p) for p in v.parts]}


def verdict_from_row(row: Mapping[str, Any]) -> OracleVerdict:
    return OracleVerdict(row["p_violates"], row["violates"], row.get("error"), dict(row.get("probs") or {}),
                         verifier=row.get("verifier", "llm"), reason=row.get("reason", ""),
                         fired=tuple(row.get("fired") or ()), mode=row.get("mode"),
                         parts=tuple(verdict_from_row(p) for p in row.get("parts") or ()))
