"""The two registries of `judges/`: reward designs (`conf/reward/<name>.yaml`) and oracle verifiers
(`conf/oracle/<name>.yaml`), each a name -> entry table that the builders and the config checks read.

A module of this package registers what it defines when it is imported, and `load_all` imports every
module of the package (the package's `__init__` calls it), so a new design or verifier is its own
file (or one entry in `designs.py` for a template design) plus its YAML; no list elsewhere names it.

A design entry (`Design`) says what the judge reads and builds it; a verifier entry (`VerifierEntry`)
says whether it needs a model and whether it reads the hidden anchor, and builds it from the
`oracle` config.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Design(Protocol):
    """A reward design: the judge it builds and what that judge reads."""

    name: str
    uses_model: bool  # False: `build` ignores the backend (the caller need not load one)
    pairwise: bool  # asks both presentation orders (the audit reads swap consistency off it)
    reads_certificate: bool  # `judges.base.judge_item` fills JudgeItem.certificate for it
    reads_anchor: bool  # `judges.base.judge_item` hands it the whole environment

    def params(self, values: Mapping[str, Any] | None) -> Any:
        """The design's validated parameters from `conf/reward/<name>.yaml` (its `name` key
        included); ValueError naming the bad key."""

    def build(self, backend: Any, *, adapter: bool, identity: str, params: Any) -> Any:
        """The `judges.base.Judge` on `backend` with parameters `params` (from `self.params`)."""


@dataclass(frozen=True)
class VerifierEntry:
    """A verifier of the `oracle` group (the combination `any` is not one: it lists them)."""

    name: str
    # build(oracle_cfg, backend_for) -> judges.verifiers.Verifier; see judges.verifiers.build_verifier
    build: Callable[[Any, Callable[[str], Any] | None], Any]
    uses_llm: bool  # needs a model (oracle.model, and a backend)
    reads_anchor: bool  # reads the hidden anchor (certificate, evaluation_spec), not only the public view


JUDGES: dict[str, Design] = {}  # the reward designs by name
VERIFIERS: dict[str, VerifierEntry] = {}


def register_design(design: Design) -> Design:
    if not isinstance(design, Design):
        raise TypeError(f"{design!r} is not a judges.registry.Design")
    if design.name in JUDGES and JUDGES[design.name] != design:
        raise ValueError(f"reward design {design.name!r} is registered twice")
    JUDGES[design.name] = design
    return design


def register_verifier(entry: VerifierEntry) -> VerifierEntry:
    if entry.name == "any" or (entry.name in VERIFIERS and VERIFIERS[entry.name] != entry):
        raise ValueError(f"verifier {entry.name!r} is registered twice (`any` is the combination)")
    VERIFIERS[entry.name] = entry
    return entry


def design(name: str) -> Design:
    if name not in JUDGES:
        raise ValueError(f"unknown reward {name!r}; choose one of {sorted(JUDGES)}")
    return JUDGES[name]


def verifier(name: str) -> VerifierEntry:
    if name not in VERIFIERS:
        raise ValueError(f"unknown verifier {name!r}; choose one of {sorted(VERIFIERS)}")
    return VERIFIERS[name]


def build_judge(name: str, backend: Any, *, adapter: bool = True, identity: str = "",
                params: Mapping[str, Any] | None = None) -> Any:
    """The judge of design `name` on `backend` with `params` (`conf/reward/<name>.yaml`);
    `adapter=False` runs it with the LoRA adapter off (judge.model=frozen)."""
    d = design(name)
    return d.build(backend, adapter=adapter, identity=identity, params=d.params(params))


def check_reward(name: str, params: Mapping[str, Any] | None) -> None:
    """ValueError naming the bad key when `params` are not valid parameters of design `name`."""
    design(name).params(params)


def load_all() -> None:
    """Import every module of the package, so that each registers what it defines."""
    package = importlib.import_module(__package__)
    for m in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{__package__}.{m.name}")
