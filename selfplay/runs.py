"""Setup that training, the audit and judge evaluation share: which environments a data config's split
holds, which weights a judge reads, and the judge a run configures on them.

One definition of each, so the three entry points cannot drift apart (a judge identity written one
way in training and another in the audit would key two stage-1 caches for the same weights).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from judges import Judge, build_judge
from judges.registry import design
from selfplay.config import DataConfig, resolve_data_path
from selfplay.envs import load_envs, train_audit_split
from selfplay.envs.types import Environment

SPLITS = ("all", "train", "audit")


def load_data_split(data: DataConfig | Any, which: str) -> list[Environment]:
    """The environments of `data` (a DataConfig or a mapping with `path` and `splits`) in split
    `which`: all, train or audit (the data set's own fixed split, see selfplay.envs.split)."""
    if which not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {which!r}")
    path = resolve_data_path(str(data.path))
    envs = load_envs(path)
    if which == "all":
        return envs
    splits = getattr(data, "splits", None)
    root = resolve_data_path(str(splits)) if splits else (path if path.is_dir() else path.parent)
    train, audit = train_audit_split(envs, root)
    return train if which == "train" else audit


@dataclass(frozen=True)
class JudgeWeights:
    backend: Any  # the Backend the judge runs on
    adapter: bool  # True: the policy's LoRA adapter on (π_w); False: base weights
    identity: str  # names these weights; keys the judge's stage-1 cache


def judge_identity(model: str, *, seed: int, iteration: int) -> str:
    """The name of the weights `judge_weights` picks (no model needed)."""
    return f"seed{seed}/iter_{iteration}" if model == "self" else ("initial" if model == "frozen" else model)


def judge_weights(model: str, policy: Any, *, seed: int, iteration: int, other: Any = None) -> JudgeWeights:
    """The weights of a judge configured as `judge.model=model`:

    - `self`: the policy with its adapter on, whose weights are those of iteration `iteration`
      (training judges iteration t's answers with π_{t-1}; the audit judges checkpoint t with π_t);
    - `frozen`: the policy's base weights π_0 (adapter off), the same at every iteration;
    - any other name: the backend `other` of that policy config, adapter off.
    """
    identity = judge_identity(model, seed=seed, iteration=iteration)
    if model in ("self", "frozen"):
        return JudgeWeights(policy, model == "self", identity)
    if other is None:
        raise ValueError(f"judge.model={model!r} needs its own backend")
    return JudgeWeights(other, False, identity)


def run_judge(reward: Mapping[str, Any], model: str, *, policy: Callable[[], Any], other: Callable[[str], Any],
              seed: int, iteration: int) -> Judge:
    """The judge of design `reward["name"]` with the parameters `reward` (the run's `reward` group) on
    the weights `judge.model=model` names at `iteration` (see `judge_weights`). `policy()` returns the
    policy backend and `other(model)` the backend of another policy config; each is called only when
    those weights are read, and neither for a design that uses no model."""
    params = OmegaConf.to_container(reward, resolve=True) if isinstance(reward, DictConfig) else dict(reward)
    name = str(params["name"])
    if not design(name).uses_model:
        return build_judge(name, None, params=params)
    own = model in ("self", "frozen")
    w = judge_weights(model, policy() if own else None, seed=seed, iteration=iteration,
                      other=None if own else other(model))
    return build_judge(name, w.backend, adapter=w.adapter, identity=w.identity, params=params)
