"""Self-play LoRA-DPO against an LLM judge (docs/method.md §Self-play loop).

    python -m selfplay.train +policy=smollm2-135m reward=anchored            # CPU
    python -m selfplay.train +policy=qwen3-4b reward=anchored                # GPU
    python -m selfplay.train -m +policy=qwen3-4b reward=anchored,commit_first,blind_solve seed=0,1,2

Recipe: compose the config -> build the policy backend, the judge and the train environments ->
record iteration 0 (π_0) -> for t = 1..T: sample k answers per environment from π_{t-1}, score them
with the judge, pair best against worst, run one LoRA-DPO step (TRL) continuing π_{t-1}'s adapter,
and write `iter_<t>/` atomically -> finish the logger.

How this departs from textbook self-play DPO: one LoRA adapter carries on across iterations (no
merging), so "adapter off" is always π_0, which serves as the `initial` reference and as the `frozen`
judge without a second model copy; with `judge.model=self` the judge is π_{t-1} itself, the policy
that produced the answers. Rerunning the same command resumes after the last complete iteration.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from judges.base import judge_row
from selfplay import artifacts as A
from selfplay.config import ConfigError, Settings, check_data_path, train_settings
from selfplay.dpo import DPOSettings, dpo_step
from selfplay.envs.prompt import policy_messages
from selfplay.envs.types import Environment
from selfplay.models.backend import Completion, is_truncated
from selfplay.pairs import all_pairs, build_pairs, subsample
from selfplay.runs import first_too_long, judge_prompts_too_long, load_data_split, run_judge
from selfplay.tracking import SAMPLE_COLUMNS, iteration_samples, sample_rows, start_logger

log = logging.getLogger("selfplay.train")
# conf/hydra/launcher/submitit_*.yaml share their names with the plugin's schemas on purpose (so
# `hydra/launcher=submitit_slurm` picks up our settings); Hydra validates them against those schemas
# and warns that it does so.
warnings.filterwarnings("ignore", message=".*is validated against ConfigStore schema with the same name")


def derive_seed(seed: int, *parts: int) -> int:
    """A 31-bit seed for one purpose of one iteration, independent of every other (seed, parts)."""
    return int(np.random.SeedSequence([seed, *parts]).generate_state(1)[0] >> 1)


SAMPLE, TRAIN, PAIRS = 1, 2, 3  # seed streams


@contextmanager
def timed(times: dict[str, float], phase: str) -> Iterator[None]:
    """Adds the wall time of the block to `times["time/<phase>_s"]` (logged with the metrics)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        times[f"time/{phase}_s"] = times.get(f"time/{phase}_s", 0.0) + time.perf_counter() - start


def chunks(items: Sequence, size: int) -> list[Sequence]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def load_train_envs(settings: Settings) -> list[Environment]:
    train = load_data_split(settings.data, "train")
    limit = settings.train.max_train_envs
    return train[:limit] if limit else train


def build_policy(settings: Settings):
    from selfplay.models import load_backend
    from selfplay.models.config import PolicyConfig

    policy = PolicyConfig.from_mapping(settings.policy)
    return load_backend(policy, backend=settings.train.backend, lora=settings.train.lora_settings,
                        hf_batch_size=settings.train.sample_batch_size)


def build_judge_for(settings: Settings, policy, t: int, judge_backend=None):
    """The iteration-t judge: π_{t-1} (self), π_0 (frozen) or another policy's weights (adapter off)."""
    return run_judge(settings.reward, settings.judge.model, policy=lambda: policy, other=lambda m: judge_backend,
                     seed=settings.train.seed, iteration=t - 1)


def sleep_engines(*backends) -> None:
    for b in backends:
        if b is not None and hasattr(b, "sleep"):
            b.sleep()


def wake_engines(*backends) -> None:
    for b in backends:
        if b is not None and hasattr(b, "wake_up"):
            b.wake_up()


def sample_answers(policy, prompts: list[str], settings: Settings, t: int, batch_envs: int) -> list[list[str]]:
    tr = settings.train
    answers: list[list[str]] = []
    for c, chunk in enumerate(tqdm(chunks(prompts, batch_envs), desc=f"iter {t}: generate")):
        answers += policy.sample(list(chunk), n=tr.k, temperature=tr.temperature, max_new_tokens=tr.max_new_tokens,
                                 seed=derive_seed(tr.seed, SAMPLE, t, c))
    return answers


def candidates_of(settings: Settings) -> str:
    """What the loop scores each iteration (judges.base.CANDIDATES): the policy's samples, each train
    environment's authored stress answers, or both in one pool."""
    return str(settings.reward.get("candidates", "policy"))


def margin_of(settings: Settings) -> float:
    """δ of this run's pairs: the reward's own `margin` where it sets one (a judge design's scores live
    on that judge's scale), else the run's."""
    own = settings.reward.get("margin")
    return settings.train.margin if own is None else float(own)


def labelled_candidates(envs: list[Environment]) -> list[list[str]]:
    """The fixed stress answers of each environment, as finished completions."""
    return [[Completion(s.text, finished=True) for s in e.stress_answers] for e in envs]


def candidate_pool(policy, envs: list[Environment], prompts: list[str], settings: Settings, t: int,
                   batch_envs: int) -> tuple[list[list[str]], list[list[str]]]:
    """The answers scored at iteration t and, aligned with them, where each came from (policy |
    labelled). `mixed` puts an environment's samples first, then its authored answers."""
    mode = candidates_of(settings)
    sampled = (sample_answers(policy, prompts, settings, t, batch_envs) if mode != "labelled"
               else [[] for _ in envs])
    authored = labelled_candidates(envs) if mode != "policy" else [[] for _ in envs]
    answers = [s + a for s, a in zip(sampled, authored, strict=True)]
    sources = [["policy"] * len(s) + ["labelled"] * len(a) for s, a in zip(sampled, authored, strict=True)]
    return answers, sources


def judge_answers(judge, envs: list[Environment], answers: list[list[str]], t: int, batch_envs: int):
    from judges.base import judge_item

    verdicts = []
    for chunk in tqdm(chunks(list(range(len(envs))), batch_envs), desc=f"iter {t}: judge"):
        items = [judge_item(judge, envs[i], str(a)) for i in chunk for a in answers[i]]
        verdicts += judge.score(items)
    out, start = [], 0
    for a in answers:  # environments may differ in their number of candidates (labelled ones)
        out.append(verdicts[start : start + len(a)])
        start += len(a)
    return out


def sample_metrics(truncated: list[list[bool]]) -> dict[str, float]:
    flat = [c for env in truncated for c in env]
    if not flat:  # candidates: labelled samples nothing; a share of no samples is undefined, not 0
        return {"sample/answers": 0.0}
    return {"sample/answers": float(len(flat)), "sample/truncated_share": sum(flat) / len(flat)}


def judge_metrics(verdicts) -> dict[str, float]:
    flat = [v for env in verdicts for v in env]
    scores = [v.score for v in flat if v.score is not None]
    consistent = [v.swap_consistent for v in flat if v.swap_consistent is not None]
    out = {"judge/nan_rate": (len(flat) - len(scores)) / len(flat) if flat else 0.0}
    if scores:
        out |= {"judge/score_mean": float(np.mean(scores)), "judge/score_std": float(np.std(scores))}
    if consistent:
        out["judge/swap_consistency"] = float(np.mean(consistent))
    return out


def write_iteration(dest: Path, t: int, envs, prompts, answers, sources, verdicts, pairs, reasons, metrics,
                    resolved) -> None:
    A.write_jsonl(dest / "generations.jsonl", (
        {"task_id": e.task_id, "kind": e.kind, "category": e.category, "prompt": p,
         "answers": [str(x) for x in a], "truncated": [is_truncated(x) for x in a], "sources": src}
        for e, p, a, src in zip(envs, prompts, answers, sources, strict=True)))
    A.write_jsonl(dest / "judgments.jsonl", (
        {"task_id": e.task_id, "index": i} | judge_row(v)
        for e, env_verdicts in zip(envs, verdicts, strict=True) for i, v in enumerate(env_verdicts)))
    A.write_jsonl(dest / "pairs.jsonl", (
        {"task_id": p.task_id, "chosen_index": p.chosen_index, "rejected_index": p.rejected_index,
         "chosen_score": p.chosen_score, "rejected_score": p.rejected_score, "margin": p.margin,
         "chosen": p.chosen, "rejected": p.rejected} for p in pairs))
    dropped = {e.task_id: r for e, r in zip(envs, reasons, strict=True) if r is not None}
    A.write_json(dest / "metrics.json", {"iteration": t, "metrics": metrics, "pair_drops": dropped})
    A.write_config(dest / A.CONFIG, resolved)


def check_labelled_candidates(settings: Settings, envs: list[Environment]) -> None:
    """`candidates: labelled` scores the same authored answers every iteration, so a train split on
    which no pair can form would run every iteration without one step: refused before the first.
    A reward that pays the label (`prefer`) needs two labels in one environment, any other reward
    two distinct texts."""
    if candidates_of(settings) != "labelled":
        return
    by_label = "prefer" in settings.reward
    for e in envs:
        texts = {s.text for s in e.stress_answers}
        if len({s.validity for s in e.stress_answers} if by_label else texts) >= 2 and len(texts) >= 2:
            return
    need = "stress answers of two different labels" if by_label else "two different stress answers"
    raise ConfigError(
        f"reward={settings.reward_name} with candidates: labelled: none of the {len(envs)} train environments "
        f"of data.path={settings.data.path} has {need}, so no pair can form and no iteration would train; "
        "use a split whose train environments hold both valid and invalid stress answers")


def check_prompt_lengths(policy, envs: list[Environment], prompts: list[str], settings: Settings,
                         judge_backend=None) -> None:
    """Every prompt the run will build must fit its model's context: each policy prompt plus the
    answer budget, and the judge's prompts with the longest candidate the run can produce (an answer
    of max_new_tokens tokens, an authored stress answer with `candidates: labelled|mixed`), found
    here, naming the record, rather than by the sampler or the judge in the middle of iteration 1."""
    from selfplay.models.config import PolicyConfig

    cfg = PolicyConfig.from_mapping(settings.policy)
    budget = settings.train.max_new_tokens
    over = first_too_long(policy.tokenizer, envs, prompts, budget, cfg.max_context)
    if over is not None:
        e, n = over
        raise ConfigError(
            f"{e.source}: task {e.task_id}: its prompt is {n} tokens + max_new_tokens={budget} > "
            f"max_context {cfg.max_context} of policy {cfg.name}; shorten the record's evidence, lower "
            "max_new_tokens or pick a policy with a longer context")
    mode = candidates_of(settings)
    over = judge_prompts_too_long(settings, envs, answer_tokens=None if mode == "labelled" else budget,
                                  stress=mode != "policy", tokenizer=getattr(policy if judge_backend is None else judge_backend, "tokenizer", None))
    if over is not None:
        raise ConfigError(over.line())


def run(cfg: DictConfig, *, batch_envs: int = 8) -> Path:
    """Train (or resume) the run `cfg` describes; return its run directory.

    Everything a run needs is validated before it writes anything: settings, reward parameters and
    judge model (`train_settings`), the data, then under the run lock the iterations already written
    (checksums, config), then each prompt against the policy's context.
    """
    settings = train_settings(cfg)
    tr = settings.train
    resolved = OmegaConf.to_container(cfg, resolve=True)
    check_data_path(settings.data)
    envs = load_train_envs(settings)
    if not envs:
        raise ConfigError(f"data.path={settings.data.path}: the train split is empty")
    check_labelled_candidates(settings, envs)
    run = A.run_dir(tr.output_root, tr.experiment_name, settings.reward_name, tr.seed)
    with A.run_lock(run):
        return _train(settings, resolved, envs, run, batch_envs)


def _train(settings: Settings, resolved: dict, envs: list[Environment], run: Path, batch_envs: int) -> Path:
    tr = settings.train
    state = A.scan_run(run)
    A.verify_run(run, state)
    A.check_resumable(run, state, resolved)
    if state.last is not None and state.last >= tr.iterations:
        log.info("%s: all %d iterations are complete", run, tr.iterations)
        return run

    # -- setup: policy (resumed from the last complete iteration), judge weights, logger
    from transformers import set_seed

    set_seed(tr.seed)  # the fresh adapter's random init
    policy = build_policy(settings)
    if state.last is not None:
        policy.load_adapter(A.iteration_dir(run, state.last) / "adapter")
    judge_backend = None
    if settings.judge.model not in ("self", "frozen"):
        from selfplay.models import load_judge_backend

        judge_backend = load_judge_backend(settings.judge, backend=tr.backend)
    prompts_of = [policy.render(policy_messages(e.public)) for e in envs]
    task_ids = [e.task_id for e in envs]
    check_prompt_lengths(policy, envs, prompts_of, settings, judge_backend)
    A.discard_partial(state)  # the first write: every check above has passed
    logger = start_logger(settings.logger, run, name=f"{settings.reward_name}-seed{tr.seed}",
                          group=tr.experiment_name, config=resolved)
    judge = None  # a frozen or other-policy judge keeps its stage-1 cache across iterations
    try:
        if state.last is None:  # iteration 0: the initial policy, so the audit can measure it
            with A.writing_iteration(run, 0) as dest:
                with A.saving(dest / "adapter"):
                    policy.save_adapter(dest / "adapter")
                A.write_json(dest / "metrics.json", {"iteration": 0, "metrics": {}, "pair_drops": {}})
                A.write_config(dest / A.CONFIG, resolved)
            # vLLM reads a saved adapter lazily from disk: point it at the final, renamed path
            policy.load_adapter(A.iteration_dir(run, 0) / "adapter")

        margin = margin_of(settings)
        for t in range((state.last or 0) + 1, tr.iterations + 1):
            started, times = time.perf_counter(), {}
            with A.writing_iteration(run, t) as dest:
                with timed(times, "generate"):
                    answers, sources = candidate_pool(policy, envs, prompts_of, settings, t, batch_envs)
                with timed(times, "judge"):
                    if judge is None or settings.judge.model == "self":
                        judge = build_judge_for(settings, policy, t, judge_backend)
                    verdicts = judge_answers(judge, envs, answers, t, batch_envs)
                scores = [[v.score for v in env] for env in verdicts]
                cut = [[is_truncated(x) for x in env] for env in answers]
                if candidates_of(settings) == "labelled":
                    pairs, counts, reasons = all_pairs(task_ids, prompts_of, answers, scores, margin)
                else:
                    pairs, counts, reasons = build_pairs(task_ids, prompts_of, answers, scores, margin,
                                                         truncated=None if tr.pair_truncated else cut)
                pairs, counts, reasons = subsample(pairs, counts, reasons, task_ids, tr.max_pairs,
                                                   derive_seed(tr.seed, PAIRS, t))

                # every in-process vLLM engine (the policy's, a judge's own) frees its GPU memory for
                # training; no-op on hf and for an endpoint judge
                sleep_engines(policy, judge_backend)
                with timed(times, "dpo"):
                    train_metrics = dpo_step(policy.model, policy.tokenizer, pairs, DPOSettings(
                        beta=tr.beta, learning_rate=tr.learning_rate, epochs=tr.epochs, batch_size=tr.batch_size,
                        grad_accum=tr.grad_accum, max_seq_len=tr.max_seq_len, reference=tr.reference,
                        seed=derive_seed(tr.seed, TRAIN, t), gradient_checkpointing=tr.gradient_checkpointing,
                    ), scratch=dest / "_trainer")
                shutil.rmtree(dest / "_trainer", ignore_errors=True)
                with A.saving(dest / "adapter"):
                    policy.save_adapter(dest / "adapter")
                wake_engines(policy, judge_backend)

                sampled_cut = [[c for c, src in zip(env, s, strict=True) if src == "policy"]
                               for env, s in zip(cut, sources, strict=True)]
                metrics = (judge_metrics(verdicts) | counts.as_metrics() | {"pairs/margin": margin}
                           | sample_metrics(sampled_cut) | train_metrics | times)
                metrics["time/iteration_s"] = time.perf_counter() - started
                write_iteration(dest, t, envs, prompts_of, answers, sources, verdicts, pairs, reasons, metrics,
                                resolved)
            policy.load_adapter(A.iteration_dir(run, t) / "adapter")  # as after iteration 0
            logger.log(metrics, step=t)
            logger.table("samples", SAMPLE_COLUMNS,
                         sample_rows(iteration_samples(A.iteration_dir(run, t))), step=t)
            log.info("iteration %d: %d pairs of %d environments, loss %s", t, counts.pairs, counts.envs,
                     metrics.get("train/loss"))
    finally:
        logger.finish()
    return run


def interrupted(cfg: DictConfig) -> str:
    """Where a run stopped by Ctrl-C stands: its complete iterations stay, the one being written is
    discarded (A.writing_iteration), and the same command resumes after the last complete one."""
    try:
        settings = train_settings(cfg)
        tr = settings.train
        run = A.run_dir(tr.output_root, tr.experiment_name, settings.reward_name, tr.seed)
        last = A.scan_run(run).last
    except (ConfigError, OSError):
        return "selfplay.train: interrupted (Ctrl-C) before the run was set up; nothing was written"
    if last is None:
        return f"selfplay.train: interrupted (Ctrl-C) in {run} before iteration 0 was written; rerun the same command to start"
    if last >= tr.iterations:
        return f"selfplay.train: interrupted (Ctrl-C) in {run} after its last iteration ({last}) was complete; nothing was lost"
    return (f"selfplay.train: interrupted (Ctrl-C) in {run} during iteration {last + 1}: iterations 0..{last} are "
            f"complete and kept, the unfinished one was discarded; rerun the same command to resume from "
            f"iteration {last + 1}")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    from selfplay.cli import os_error_line
    from selfplay.envs import EnvLoadError
    from selfplay.models import ModelUnavailableError

    try:
        run(cfg)
    except (ConfigError, EnvLoadError, ModelUnavailableError) as e:  # a usage error: one line, no traceback
        raise SystemExit(f"selfplay.train: error: {e}") from None
    except KeyboardInterrupt:
        print(interrupted(cfg), file=sys.stderr)
        raise SystemExit(130) from None
    except OSError as e:  # a full disk, a read-only file system: the path and what to do
        raise SystemExit(f"selfplay.train: error: {os_error_line(e)}") from None


def main() -> None:
    """`python -m selfplay.train`: Hydra's own errors (a bad group value, a key typo) in one line too."""
    from selfplay.cli import hydra_main

    hydra_main(_main, "selfplay.train")


if __name__ == "__main__":
    main()
