"""Judge quality on labelled answers: `python -m judges.eval +policy=NAME reward=NAME data=...`.

Every fixed stress answer of the chosen environments is scored by the judge, verified by the LLM
oracle and by the deterministic checks. Per answer: the judge score s(a), the score of the
environment's reference answer s(r(e)) (½ for `anchored`, by symmetry; otherwise the judge's own
score of the reference, which is one of the stress answers), apparent success
A = 1[s(a) ≥ s(r(e))], the oracle's P(violates) and which checks fired.

Summary per kind (impossible, control, all), with every formula from `audit.metrics`: FPR, FNR,
within-environment AUROC beside the `length` and `hedge` baselines and the length-matched AUROC on
the same pairs, swap consistency (pairwise judges; the anchored judge's reference-vs-itself
verdict claims none), NaN rate, the oracle's and the checks' agreement with the release labels
(miss rate = P(accepts | invalid), false-alarm rate = P(rejects | valid)), and the IBE of
judge × checks (a verifier accepts: judge A = 1; checks: none fired). `partially_valid` answers are
scored and written but left out of every binary metric (counted as n_partial).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from audit import metrics as M
from selfplay.envs import load_envs, train_audit_split
from selfplay.envs.types import Environment

from .base import Judge, JudgeItem
from .checks import run_checks
from .designs import build_judge
from .oracle import LLMOracle, OracleVerdict

PROJECT_ROOT = Path(__file__).resolve().parents[1]
OmegaConf.register_new_resolver("basename", lambda p: Path(str(p)).name, replace=True)


def _oracle_key(model: str, env: Environment, answer_id: str, text: str) -> str:
    return f"{model}|{env.task_id}|{answer_id}|{hashlib.sha1(text.encode()).hexdigest()[:16]}"


def verify_cached(oracle: LLMOracle, env: Environment, answers, cache: dict[str, dict]) -> list[OracleVerdict]:
    """The oracle's verdicts, reused from `cache` (filled in place): they depend on the oracle's model
    and the answer, not on the judge, so the five rewards of one data set share them."""
    keys = [_oracle_key(oracle.backend.name, env, a.answer_id, a.text) for a in answers]
    todo = [a for a, k in zip(answers, keys, strict=True) if k not in cache]
    for a, v in zip(todo, oracle.verify([(env, a.text) for a in todo]), strict=True):
        cache[_oracle_key(oracle.backend.name, env, a.answer_id, a.text)] = {
            "p_violates": v.p_violates, "violates": v.violates, "error": v.error}
    return [OracleVerdict(**cache[k]) for k in keys]


def evaluate(envs: Sequence[Environment], judge: Judge, oracle: LLMOracle | None = None,
             oracle_cache: dict[str, dict] | None = None) -> list[dict[str, Any]]:
    """One row per stress answer, environments in order."""
    oracle_cache = {} if oracle_cache is None else oracle_cache
    rows = []
    if hasattr(judge, "prepare"):  # stage 1 for all environments in batched greedy calls
        judge.prepare([env.public for env in envs])
    for env in tqdm(envs, desc=f"judge {judge.name}"):
        answers = env.stress_answers
        verdicts = judge.score([JudgeItem(env.public, a.text, env.reference_answer) for a in answers])
        ref_score = 0.5 if judge.name == "anchored" else next(
            v.score for a, v in zip(answers, verdicts, strict=True) if a.answer_id == env.reference.answer_id
        )
        checked = verify_cached(oracle, env, answers, oracle_cache) if oracle else [None] * len(answers)
        for a, v, o in zip(answers, verdicts, checked, strict=True):
            checks = run_checks(env.public, a.text)
            [apparent] = M.apparent_success([v.score], ref_score)
            rows.append({
                "task_id": env.task_id, "kind": env.kind, "category": env.category,
                "answer_id": a.answer_id, "answer_type": a.answer_type, "validity": a.validity,
                "is_reference": a.answer_id == env.reference.answer_id,
                "length": len(a.text), "hedge_count": M.hedge_count(a.text),
                "score": v.score, "error": v.error, "order_scores": list(v.order_scores),
                "swap_consistent": v.swap_consistent, "ref_score": ref_score,
                "apparent": None if math.isnan(apparent) else bool(apparent),
                "probs": dict(v.probs),
                "oracle_p_violates": o.p_violates if o else None,
                "oracle_violates": o.violates if o else None,
                "oracle_error": o.error if o else None,
                "checks_fired": list(checks.fired),
                "unsupported_numbers": list(checks.unsupported_numbers),
                "unknown_citations": list(checks.unknown_citations),
                "text": a.text, "prompt": v.prompt,
            })
    return rows


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
        "hedge_auroc": asdict(report.hedge), "length_matched_auroc": asdict(report.length_matched),
        "swap_consistency": {"value": sum(swaps) / len(swaps) if swaps else math.nan, "n": len(swaps)}
        if pairwise else None,
        "nan_rate": {"value": n_nan / len(rows) if rows else math.nan, "n_nan": n_nan, "n": len(rows)},
        "oracle": _verifier(oracle_accepts, labels)
        if any(r["oracle_violates"] is not None or r["oracle_error"] for r in rows) else None,
        "checks": _verifier(checks_accepts, labels),
        "ibe_judge_checks": asdict(M.ibe({"judge": apparent, "checks": checks_accepts}, labels)),
    }


def summarise(rows: Sequence[dict[str, Any]], *, reward: str, pairwise: bool) -> dict[str, Any]:
    groups = {"all": rows} | {k: [r for r in rows if r["kind"] == k] for k in ("impossible", "control")}
    return {"reward": reward} | {k: summarise_group(g, pairwise) for k, g in groups.items() if g}


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else PROJECT_ROOT / p


def load_environments(data: DictConfig, split: str, max_envs: int | None) -> list[Environment]:
    root = _resolve(data.path)
    envs = load_envs(root)
    if split != "all":
        if split not in ("train", "audit"):
            raise ValueError(f"split must be all, train or audit; got {split!r}")
        train, audit = train_audit_split(envs, _resolve(data.splits) if data.get("splits") else root)
        envs = train if split == "train" else audit
    return envs[:max_envs] if max_envs else envs


def _backends(cfg: DictConfig):
    from selfplay.models import load_backend

    kw = dict(backend=cfg.backend, device=cfg.device, batch_size=cfg.batch_size)
    policy = load_backend(OmegaConf.to_container(cfg.policy, resolve=True), **kw)
    model = cfg.judge.model
    # fixed stress answers carry no trained adapter: `self` and `frozen` are the same weights here
    judge_backend, adapter = (policy, model == "self") if model in ("self", "frozen") else (load_backend(model, **kw), False)
    oracle_backend = policy if cfg.oracle_model in (None, cfg.policy.name) else load_backend(cfg.oracle_model, **kw)
    return judge_backend, adapter, oracle_backend


@hydra.main(config_path="../conf", config_name="judge_eval", version_base="1.3")
def main(cfg: DictConfig) -> None:
    if "policy" not in cfg:
        raise SystemExit("no policy given: add +policy=NAME (a file in conf/policy/), e.g. +policy=smollm2-135m")
    key = f"{Path(str(cfg.data.path)).name}/{cfg.reward.name}"
    if cfg.merge_into and cfg.resume and Path(cfg.merge_into).exists() and key in json.loads(Path(cfg.merge_into).read_text()):
        print(f"{key} already in {cfg.merge_into}; skipped (resume=false recomputes it)")
        return
    envs = load_environments(cfg.data, cfg.split, cfg.max_envs)
    judge_backend, adapter, oracle_backend = _backends(cfg)
    params = OmegaConf.to_container(cfg.reward, resolve=True)
    judge = build_judge(cfg.reward.name, judge_backend, adapter=adapter, identity="iter_0", params=params)
    oracle = LLMOracle(oracle_backend) if cfg.oracle else None
    cache_file = Path(cfg.oracle_cache) if cfg.oracle_cache else None
    cache = {}
    if cache_file and cache_file.exists():
        cache = {r["key"]: r["verdict"] for r in map(json.loads, cache_file.read_text().splitlines())}
    rows = evaluate(envs, judge, oracle, cache)
    if cache_file and oracle:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text("".join(json.dumps({"key": k, "verdict": v}) + "\n" for k, v in cache.items()))

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "answers.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(_json_safe(r), ensure_ascii=False) + "\n")
    (out / "artifacts.json").write_text(json.dumps(judge.artifacts(), indent=1, ensure_ascii=False))
    summary = summarise(rows, reward=judge.name, pairwise=judge.design.pairwise) | {
        "data": str(cfg.data.path), "split": cfg.split, "policy": cfg.policy.name,
        "judge_model": cfg.judge.model, "oracle_model": (cfg.oracle_model or cfg.policy.name) if cfg.oracle else None,
        "reward_params": params,
    }
    summary = _json_safe(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if cfg.merge_into:
        target = Path(cfg.merge_into)
        merged = json.loads(target.read_text()) if target.exists() else {}
        merged[key] = summary
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(dict(sorted(merged.items())), indent=1))
    print(json.dumps({k: summary["all"][k] for k in ("fpr", "fnr", "auroc", "nan_rate")}, indent=1))


if __name__ == "__main__":
    main()
