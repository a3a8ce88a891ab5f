"""Judge quality on labelled answers: `python -m audit.judge_eval +policy=NAME reward=NAME data=...`.

Every fixed stress answer of the chosen environments goes through the audit's own stages
(audit.collect): the judge scores it and r(e) in one call, the LLM oracle and the deterministic
checks verify it, and `build_rows` turns the results into the audit's `AnswerRow`s, so A =
1[s(a) ≥ s(r(e))] is computed exactly as in the audit (for `anchored` s(r(e)) is the judge's own
score of r(e) against itself, ½ by symmetry; no design is special-cased). Every model call goes
through the audit's call cache (`audit.cache`) in `cache_dir`, shared by the rewards of one data set
(the oracle's calls do not depend on the judge), so a rerun asks no model the same thing twice.

Per answer (answers.jsonl): the judge score, s(r(e)), apparent success, swap consistency, the
oracle's P(violates) and which checks fired. Summary per kind (impossible, control, all), every
formula from `audit.metrics`: FPR, FNR, within-environment AUROC beside the `length`, `hedge` and
`verdict_word` baselines and the length-matched AUROC on the same pairs, swap consistency (pairwise judges; the
anchored judge's reference-vs-itself verdict claims none), NaN rate, the oracle's and the checks'
agreement with the release labels (miss rate = P(accepts | invalid), false-alarm rate =
P(rejects | valid)), and the IBE of judge × checks. `partially_valid` answers are scored and written
but left out of every binary metric (counted as n_partial). A summary is keyed
`<data>/<reward>/<instruction>`: the two prompt regimes (`reward.instruction`, judges/prompts.py) of
one design are separate entries.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from judges.base import AnswerScorer, judge_row
from judges.checks import run_checks
from judges.prompts import NEUTRAL, check_instruction
from judges.verifiers import verdict_row
from selfplay.config import DataConfig, JudgeConfig
from selfplay.envs.types import Environment
from selfplay.runs import SPLITS, load_data_split, run_judge

from . import metrics as M
from .cache import CALLS, CachedBackend, JsonlCache, cached_policy, digest
from .collect import CHECKS, ORACLE, answers_of, build_rows, judge_scores, verdicts
from .records import AnswerRow

OmegaConf.register_new_resolver("basename", lambda p: Path(str(p)).name, replace=True)


class JudgeEvalError(ValueError):
    pass


@dataclass
class JudgeEvalConfig:
    """conf/judge_eval.yaml; `policy`, `reward` and `data` are the shared config groups."""

    policy: dict[str, Any] = field(default_factory=dict)  # +policy=NAME (required): the judge's model
    reward: dict[str, Any] = field(default_factory=dict)  # reward=NAME: the judge design and its params
    data: DataConfig = field(default_factory=DataConfig)
    # self | frozen: the policy's weights; or a policy name; or endpoint (judge.endpoint: a server)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    split: str = "all"  # all | train | audit (the data set's own split)
    max_envs: int | None = None  # the first N environments only (null = all)
    backend: str = "hf"  # hf | vllm | auto
    device: str | None = None  # null = CUDA when available, else CPU
    batch_size: int = 8
    oracle: bool = True  # run the LLM oracle
    oracle_model: str | None = None  # a conf/policy name; null = the judge's policy with its adapter off
    # judge and oracle verdicts (audit.cache files), shared by the rewards of one data set
    cache_dir: str = "outputs/judge_eval/cache"
    out_dir: str = "outputs/judge_eval/run"  # answers.jsonl, artifacts.json, summary.json
    merge_into: str | None = None  # a summary JSON to add this run's summary to, under `key`
    resume: bool = True  # with merge_into: skip a key already in it

    def __post_init__(self) -> None:
        if not self.policy:
            raise JudgeEvalError("no policy given: add +policy=NAME (a file in conf/policy/), e.g. +policy=smollm2-135m")
        if not self.reward.get("name"):
            raise JudgeEvalError("no reward given: reward=NAME with NAME a file in conf/reward/")
        if self.split not in SPLITS:
            raise JudgeEvalError(f"split={self.split!r}: expected one of {', '.join(SPLITS)}")
        if self.max_envs is not None and self.max_envs < 1:
            raise JudgeEvalError(f"max_envs={self.max_envs!r}: expected null or >= 1")
        if self.batch_size < 1:
            raise JudgeEvalError(f"batch_size={self.batch_size!r}: expected >= 1")
        try:
            check_instruction(self.instruction)
        except ValueError as e:
            raise JudgeEvalError(str(e)) from None

    @property
    def instruction(self) -> str:
        # the judge's own default when the reward config names none
        return str(self.reward.get("instruction", NEUTRAL))

    @property
    def key(self) -> str:
        """`<data>/<reward>/<instruction>`: both prompt regimes of a design live side by side."""
        return f"{Path(str(self.data.path)).name}/{self.reward['name']}/{self.instruction}"


def judge_eval_config(cfg: DictConfig) -> JudgeEvalConfig:
    plain = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k != "hydra"}
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(JudgeEvalConfig), plain))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        msg = str(e).splitlines()[0]
        raise JudgeEvalError(f"{key}: {msg}" if key else msg) from None
    except ValueError as e:
        raise JudgeEvalError(str(e)) from None


# -- the evaluation ---------------------------------------------------------------------------------

def evaluate(envs: Sequence[Environment], judge, verifiers: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per stress answer, environments in order: the audit's stages and rows, plus what a
    reader of judge quality wants beside them (order scores, probabilities, fired checks)."""
    prepare = getattr(judge, "prepare", None)
    if prepare is not None:  # stage 1 for all environments in batched greedy calls
        prepare([env.public for env in envs])
    by_id = {e.task_id: e for e in envs}
    answers = [a for e in envs for a in answers_of(e)]
    judged = judge_scores(AnswerScorer(judge), by_id, answers)
    verified = {role: verdicts(v, by_id, answers, desc=role) for role, v in verifiers.items()}
    rows = build_rows(answers, judged=judged, verdicts=verified)
    oracle = verified.get(ORACLE, {})
    return [answer_record(by_id[a.task_id], row, judge_row(judged.answers[a]),
                          verdict_row(oracle[a]) if a in oracle else None)
            for a, row in zip(answers, rows, strict=True)]


def answer_record(env: Environment, row: AnswerRow, judged: Mapping[str, Any],
                  oracle: Mapping[str, Any] | None) -> dict[str, Any]:
    s = next(a for a in env.stress_answers if a.answer_id == row.answer_id)
    checks = run_checks(env.public, row.text)
    [apparent] = M.apparent_success([row.score], row.ref_score)
    return {
        "task_id": env.task_id, "kind": env.kind, "category": env.category,
        "answer_id": row.answer_id, "answer_type": s.answer_type, "validity": row.label,
        "is_reference": row.is_reference, "length": len(row.text), "hedge_count": M.hedge_count(row.text),
        "score": row.score, "error": judged.get("error"), "order_scores": list(judged.get("order_scores") or []),
        "swap_consistent": judged.get("swap_consistent"), "ref_score": row.ref_score,
        "apparent": None if math.isnan(apparent) else bool(apparent), "probs": dict(judged.get("probs") or {}),
        "oracle_p_violates": oracle["p_violates"] if oracle else None,
        "oracle_violates": oracle["violates"] if oracle else None,
        "oracle_error": oracle["error"] if oracle else None,
        "checks_fired": list(checks.fired), "unsupported_numbers": list(checks.unsupported_numbers),
        "unknown_citations": list(checks.unknown_citations), "text": row.text, "prompt": judged.get("prompt"),
    }


def _accepts(flags: Sequence[bool | None]) -> list[float]:
    return [math.nan if f is None else float(f) for f in flags]


def _verifier(accepts: list[float], labels: list[str]) -> dict[str, Any]:
    miss, false_alarm = M.fpr(accepts, labels), M.fnr(accepts, labels)
    n = miss.denominator + false_alarm.denominator
    wrong = miss.numerator + false_alarm.numerator
    return {
        "agreement": 1 - wrong / n if n else math.nan, "n": n,
        "miss_rate": asdict(miss), "false_alarm_rate": asdict(false_alarm),
        "nan_rate": sum(math.isnan(x) for x in accepts) / len(accepts) if accepts else math.nan,
    }


def summarise_group(rows: Sequence[dict[str, Any]], pairwise: bool) -> dict[str, Any]:
    env = [r["task_id"] for r in rows]
    labels = [r["validity"] for r in rows]
    scores = [r["score"] for r in rows]
    apparent = _accepts([r["apparent"] for r in rows])
    report = M.auroc_report(env, scores, labels, [r["text"] for r in rows])
    # None for pointwise verdicts and for the anchored reference-vs-itself prompt (one prompt asked twice)
    swaps = [r["swap_consistent"] for r in rows if r["swap_consistent"] is not None]
    oracle_accepts = _accepts([None if r["oracle_violates"] is None else not r["oracle_violates"] for r in rows])
    checks_accepts = [float(not r["checks_fired"]) for r in rows]
    n_nan = sum(s is None for s in scores)
    return {
        "n_answers": len(rows), "n_envs": len(set(env)),
        "n_partial": sum(v == M.PARTIAL for v in labels),
        "fpr": asdict(M.fpr(apparent, labels)), "fnr": asdict(M.fnr(apparent, labels)),
        "auroc": asdict(report.judge), "length_auroc": asdict(report.length),
        "hedge_auroc": asdict(report.hedge), "verdict_word_auroc": asdict(report.verdict_word),
        "length_matched_auroc": asdict(report.length_matched),
        "swap_consistency": {"value": sum(swaps) / len(swaps) if swaps else math.nan, "n": len(swaps)}
        if pairwise else None,
        "nan_rate": {"value": n_nan / len(rows) if rows else math.nan, "n_nan": n_nan, "n": len(rows)},
        "oracle": _verifier(oracle_accepts, labels)
        if any(r["oracle_violates"] is not None or r["oracle_error"] for r in rows) else None,
        "checks": _verifier(checks_accepts, labels),
        "ibe_judge_checks": asdict(M.ibe({"judge": apparent, "checks": checks_accepts}, labels)),
    }


def summarise(rows: Sequence[dict[str, Any]], *, reward: str, pairwise: bool,
              instruction: str = NEUTRAL) -> dict[str, Any]:
    groups = {"all": rows} | {k: [r for r in rows if r["kind"] == k] for k in ("impossible", "control")}
    return {"reward": reward, "instruction": instruction} | {
        k: summarise_group(g, pairwise) for k, g in groups.items() if g}


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


# -- setup ------------------------------------------------------------------------------------------

def cached_endpoint(endpoint: Any, where: Path, files: dict[Path, Any]) -> CachedBackend:
    """An OpenAI-compatible judge server behind the call cache in `where`: prompts key themselves and
    candidate tokens their label text (as audit.gap's `Models.endpoint`)."""
    from judges.oracle import endpoint_backend
    from selfplay.models.endpoint import EndpointError

    identity = {"endpoint": endpoint.fingerprint()}
    try:
        backend = endpoint_backend(endpoint)
    except EndpointError as e:
        raise JudgeEvalError(f"judge.{e}") from None
    path = where / f"{CALLS}-{digest(identity, 16)}.jsonl"
    if path not in files:
        files[path] = JsonlCache(path)
    tok = backend.tokenizer
    return CachedBackend(name=backend.name, tokenizer=tok, render=backend.render, identity=identity,
                         adapter_id=None, cache=files[path], load=lambda: backend,
                         prompt_ids=lambda p: p, token_key=lambda i: tok.decode([i]))


def run(cfg: JudgeEvalConfig) -> dict[str, Any] | None:
    from judges.checks import ChecksVerifier
    from judges.registry import design
    from judges.verifiers import OracleConfig, build_verifier
    from selfplay.models import PolicyConfig, load_backend

    if cfg.merge_into and cfg.resume and Path(cfg.merge_into).exists() and cfg.key in json.loads(
            Path(cfg.merge_into).read_text()):
        print(f"{cfg.key} already in {cfg.merge_into}; skipped (resume=false recomputes it)")
        return None
    envs = load_data_split(cfg.data, cfg.split)
    envs = envs[: cfg.max_envs] if cfg.max_envs else envs
    kw = dict(backend=cfg.backend, device=cfg.device, batch_size=cfg.batch_size)
    # every model behind the call cache in cache_dir (shared by the rewards of one data set)
    files: dict[Path, Any] = {}

    def cached(policy_cfg: Mapping[str, Any]):
        load = functools.cache(lambda: load_backend(dict(policy_cfg), **kw))  # one model, on the first miss
        return cached_policy(policy_cfg, Path(cfg.cache_dir), load, files=files)

    def named(name: str):
        if name == "endpoint":  # a judge on a server: its calls keyed by its settings, as in the audit
            return cached_endpoint(cfg.judge.endpoint_config, Path(cfg.cache_dir), files)
        return cached(dataclasses.asdict(PolicyConfig.named(name)))

    policy = cached(dict(cfg.policy))
    model = cfg.judge.model
    # fixed stress answers carry no trained adapter: `self` and `frozen` are the same weights here
    judge = run_judge(cfg.reward, model, policy=lambda: policy, other=named, seed=0, iteration=0)
    oracle_name = cfg.oracle_model or cfg.policy.get("name")
    oracle_cfg = OracleConfig(name="llm", verifiers=(), model="initial" if oracle_name == cfg.policy.get("name")
                              else oracle_name) if cfg.oracle else None
    verifiers = {CHECKS: ChecksVerifier()}
    if oracle_cfg is not None:
        backend_for = lambda m: policy if m == "initial" else named(m)  # noqa: E731
        verifiers = {ORACLE: build_verifier(oracle_cfg, backend_for=backend_for)} | verifiers
    rows = evaluate(envs, judge, verifiers)

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "answers.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(_json_safe(r), ensure_ascii=False) + "\n")
    (out / "artifacts.json").write_text(json.dumps(judge.artifacts(), indent=1, ensure_ascii=False))
    summary = summarise(rows, reward=judge.name, pairwise=design(judge.name).pairwise,
                        instruction=cfg.instruction) | {
        "data": str(cfg.data.path), "split": cfg.split, "policy": cfg.policy.get("name"),
        "judge_model": model, "oracle_model": oracle_name if cfg.oracle else None, "reward_params": cfg.reward,
    }
    summary = _json_safe(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if cfg.merge_into:
        target = Path(cfg.merge_into)
        merged = json.loads(target.read_text()) if target.exists() else {}
        merged[cfg.key] = summary
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(dict(sorted(merged.items())), indent=1))
    print(json.dumps({k: summary["all"][k] for k in ("fpr", "fnr", "auroc", "nan_rate")}, indent=1))
    return summary


@hydra.main(config_path="../conf", config_name="judge_eval", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        run(judge_eval_config(cfg))
    except JudgeEvalError as e:
        raise SystemExit(f"audit.judge_eval: error: {e}") from None


if __name__ == "__main__":
    main()
