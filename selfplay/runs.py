"""Setup that training, the audit and judge evaluation share: which environments a data config's split
holds, which weights a judge reads, and the judge a run configures on them.

One definition of each, so the three entry points cannot drift apart (a judge identity written one
way in training and another in the audit would key two stage-1 caches for the same weights).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from judges import Judge, build_judge
from judges.registry import design
from selfplay.config import (
    ConfigError,
    DataConfig,
    Settings,
    comparable,
    resolve_data_path,
    train_settings,
)
from selfplay.envs import load_envs, train_audit_split
from selfplay.envs.prompt import policy_messages
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


def run_settings(config: Mapping[str, Any]) -> Settings:
    """A run's saved config (its `config.yaml`, Hydra's own key left out), validated as training
    validates it; ConfigError, ValueError or TypeError naming the problem."""
    from judges import JUDGES
    from selfplay.models.config import PolicyConfig

    settings = train_settings(OmegaConf.create({k: v for k, v in config.items() if k != "hydra"}))
    PolicyConfig.from_mapping(settings.policy)
    if settings.reward_name not in JUDGES:
        raise ConfigError(f"unknown reward {settings.reward_name!r} (known: {sorted(JUDGES)})")
    return settings


def first_too_long(tokenizer: Any, envs: Sequence[Environment], prompts: Sequence[str], budget: int,
                   max_context: int) -> tuple[Environment, int] | None:
    """The first environment whose rendered prompt plus an answer budget of `budget` tokens does not
    fit `max_context`, with its prompt's token count; None when all fit. Training and the audit both
    check this before any sampling, so an over-long record is named up front, never truncated."""
    ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"] if prompts else []
    for e, seq in zip(envs, ids, strict=True):
        if len(seq) + budget > max_context:
            return e, len(seq)
    return None


def judge_prompts_too_long(settings: Settings, envs: Sequence[Environment], *, answer_tokens: int | None,
                           stress: bool, tokenizer: Any = None, tokenizers: dict[str, Any] | None = None):
    """The first judge prompt of the run `settings` on `envs` that does not fit the judge model's
    context (a `judges.lengths.TooLong`), or None: see `judges.lengths.judge_too_long` for the
    candidates `answer_tokens` and `stress` put before it. The judge model is the policy's config
    (self, frozen) or the named one; a judge behind an endpoint declares no context and is not
    checked. `tokenizer` is that model's tokenizer when at hand; else it is loaded (no weights),
    memoised in `tokenizers` under the key `Run.read` uses."""
    import json

    from judges.lengths import judge_too_long
    from selfplay.models.config import PolicyConfig
    from selfplay.models.loading import load_tokenizer

    model = settings.judge.model
    if model == "endpoint" or not design(settings.reward_name).uses_model:
        return None
    own = model in ("self", "frozen")
    cfg = PolicyConfig.from_mapping(settings.policy) if own else PolicyConfig.named(model)
    if tokenizer is None:
        tokenizers = {} if tokenizers is None else tokenizers
        key = (json.dumps(OmegaConf.to_container(settings.policy), sort_keys=True, default=str) if own
               else f"judge.model={model}")
        if key not in tokenizers:
            tokenizers[key] = load_tokenizer(cfg)
        tokenizer = tokenizers[key]
    reward = OmegaConf.to_container(settings.reward, resolve=True) if isinstance(settings.reward, DictConfig) \
        else dict(settings.reward)
    return judge_too_long(reward, cfg, tokenizer, envs, answer_tokens=answer_tokens, stress=stress)


@dataclass(frozen=True)
class Prompts:
    """A run's policy prompts rendered once through its chat template: the text by task id, and the
    string that closes the policy's own turn (what sampling stops at)."""

    text: Mapping[str, str]
    end_of_turn: str


def sweep_differences(a: Mapping[str, Any], b: Mapping[str, Any], *, same_reward: bool) -> list[str]:
    """'key: a -> b' for every setting two runs of one sweep must share: the run config but its seed
    (and its reward, between rewards) and what a resumed run may change (selfplay.config.comparable)."""
    from selfplay.artifacts import config_differences

    drop = {"seed"} | (set() if same_reward else {"reward"})

    def shared(config: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in comparable(dict(config)).items() if k not in drop}
        reward = out.get("reward")
        # a reward seeded by its run (the null's `seed: ${seed}`) differs between seeds as the run does
        if isinstance(reward, Mapping) and "seed" in reward and reward["seed"] == config.get("seed"):
            out["reward"] = {k: v for k, v in reward.items() if k != "seed"}
        return out

    return config_differences(shared(a), shared(b))


def capped(envs: Sequence[Environment], max_per_kind: int | None) -> list[Environment]:
    """The first `max_per_kind` environments of each kind, in order (all of them for None)."""
    if max_per_kind is None:
        return list(envs)
    kept = {"impossible": 0, "control": 0}
    out = []
    for e in envs:
        if kept[e.kind] < max_per_kind:
            kept[e.kind] += 1
            out.append(e)
    return out


@dataclass(frozen=True)
class RunData:
    """What one pass over a run's data gives a reader of its checkpoints."""

    audit: tuple[Environment, ...]  # its audit split (capped, see `Run.read`)
    envs: Mapping[str, Environment]  # every environment of its data, by task id
    data_dir: Path  # the data set's resolved path
    prompts: Prompts  # the audit split's policy prompts
    too_long: tuple[Environment, int] | None  # see `first_too_long`
    checked: bool  # every audit record carries evaluation_spec.checks
    policy: Any  # the policy's selfplay.models.config.PolicyConfig
    # the first judge prompt on the audit split that does not fit the judge's context (a
    # judges.lengths.TooLong; see `judge_prompts_too_long`), or None; unchecked unless asked
    judge_too_long: Any = None


@dataclass(frozen=True)
class Run:
    """One training run, `outputs/<experiment>/<reward>/seed<s>/`, as training builds it: its settings,
    environments, policy, prompts, the judge at iteration t, the adapter at t and its lock. The audit
    and `audit.label` read a run through this handle instead of rebuilding it from the loop's parts."""

    dir: Path  # the seed dir holding iter_<t>/
    settings: Settings
    seed: int

    @classmethod
    def from_config(cls, seed_dir: Path, config: Mapping[str, Any], seed: int) -> Run:
        return cls(Path(seed_dir), run_settings(config), seed)

    @property
    def policy(self) -> Any:
        """The policy's `selfplay.models.config.PolicyConfig`."""
        from selfplay.models.config import PolicyConfig

        return PolicyConfig.from_mapping(self.settings.policy)

    def envs(self, which: str) -> list[Environment]:
        """The run's environments of split `which` (all, train or audit)."""
        return load_data_split(self.settings.data, which)

    @staticmethod
    def prompt(env: Environment) -> list[dict[str, str]]:
        """The chat messages the policy answers `env` from (its public view only)."""
        return policy_messages(env.public)

    def rendered(self, tokenizer: Any, envs: Sequence[Environment]) -> list[str]:
        """Each environment's policy prompt through the policy's chat template."""
        from selfplay.models.chat import render

        policy = self.policy
        return [render(tokenizer, policy, self.prompt(e)) for e in envs]

    def prompts(self, tokenizer: Any, envs: Sequence[Environment]) -> Prompts:
        """`rendered` by task id, with the policy's end-of-turn string: what the audit's stages read."""
        from selfplay.models.chat import end_of_turn

        return Prompts(dict(zip((e.task_id for e in envs), self.rendered(tokenizer, envs), strict=True)),
                       end_of_turn(tokenizer))

    def read(self, *, budget: int, max_per_kind: int | None = None,
             tokenizers: dict[str, Any] | None = None, judge_answers: bool = False,
             judge_answer_tokens: int | None = None) -> RunData:
        """The run's data in one pass: its audit split (`max_per_kind` of each kind at most) and all its
        environments, the audit prompts rendered, and the first whose prompt plus `budget` tokens does
        not fit the policy's context; with `judge_answers`, also the first judge prompt that would
        not fit the judge's once it reads every stress answer and, unless `judge_answer_tokens` is
        None, a sampled answer of that many tokens. Loads tokenizers (memoised in `tokenizers`), no weights."""
        import json

        from judges.spec import checks_of
        from selfplay.models.loading import load_tokenizer

        policy = self.policy
        key = json.dumps(OmegaConf.to_container(self.settings.policy), sort_keys=True, default=str)
        tokenizers = {} if tokenizers is None else tokenizers
        if key not in tokenizers:
            tokenizers[key] = load_tokenizer(policy)
        audit = tuple(capped(load_data_split(self.settings.data, "audit"), max_per_kind))
        prompts = self.prompts(tokenizers[key], audit)
        return RunData(audit, {e.task_id: e for e in load_data_split(self.settings.data, "all")},
                       resolve_data_path(str(self.settings.data.path)), prompts,
                       first_too_long(tokenizers[key], audit, list(prompts.text.values()), budget,
                                      policy.max_context) if audit else None,
                       bool(audit) and all(checks_of(e) is not None for e in audit), policy,
                       judge_prompts_too_long(self.settings, audit, stress=True, tokenizers=tokenizers,
                                              answer_tokens=judge_answer_tokens) if judge_answers and audit else None)

    def iteration(self, t: int) -> Path:
        return self.dir / f"iter_{t}"

    def adapter(self, t: int) -> Path:
        """The LoRA adapter of iteration t (iter_0's is the fresh no-op adapter of π_0)."""
        return self.iteration(t) / "adapter"

    def judge(self, t: int, *, policy: Callable[[], Any], other: Callable[[str], Any]) -> Judge:
        """The run's judge as it stands at iteration t (see `run_judge`)."""
        return run_judge(self.settings.reward, self.settings.judge.model, policy=policy, other=other,
                         seed=self.seed, iteration=t)

    def lock(self, name: str, user: str):
        """Hold lock file `name` in the run dir (selfplay.artifacts.run_lock)."""
        from selfplay.artifacts import run_lock

        return run_lock(self.dir, name, user)
