"""`make bench`: speed and memory ratios of the parts, each measured within one run on this machine.

    python -m bench.run [--out bench/results.json] [--quick]

Ratios, not absolute times, because shared CPU machines are noisy: both sides of every ratio are
measured in the same process minutes apart, each timed as the median of `--repeats` runs.

P1  judge scoring tokens/s ÷ plain prefill tokens/s of the same model on the same token sequences
P2  scoring k candidates of one environment ÷ one prefill of its packet, with and without prefix reuse
P3  logprob judge wall time ÷ a judge that first generates a 128-token rationale, same items
P4  DPO step peak RSS with the adapter-off reference ÷ with precomputed reference log-probs
    (each in a fresh process; reported on the whole process and on the increment over the loaded model)
P5  one iteration's wall time ÷ (generation + judging + DPO measured inside it)
S   iteration wall time at 2× the train environments ÷ at 1×
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
POLICY = "smollm2-135m"


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mini_envs():
    from selfplay.envs import load_envs

    return load_envs(REPO / "data" / "mini")


def backend(**kw):
    from selfplay.models import load_backend

    return load_backend(POLICY, backend="hf", progress=False, **kw)


def judge_items(envs, per_env: int):
    from judges import JudgeItem

    return [JudgeItem(e.public, a.text, e.reference_answer) for e in envs for a in e.stress_answers[:per_env]]


@torch.no_grad()
def plain_prefill(model, seqs: list[list[int]], batch: int) -> None:
    """The forward pass generation starts with: all prompt tokens in, the last position's logits out."""
    for i in range(0, len(seqs), batch):
        chunk = seqs[i : i + batch]
        width = max(map(len, chunk))
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, s in enumerate(chunk):  # left padding, as in generation
            ids[r, width - len(s) :] = torch.tensor(s)
            mask[r, width - len(s) :] = 1
        model(input_ids=ids, attention_mask=mask, logits_to_keep=1)


def p1_p3(be, envs, repeats: int) -> dict:
    from judges import build_judge
    from judges.scoring import flat_ids, verdict_token_ids

    judge = build_judge("generic", be, identity="bench")
    items = judge_items(envs[:4], per_env=3)
    prompts = [p for it in items for p in judge.prompts_for(it, None)]
    seqs = be.encode(prompts)
    tokens = sum(map(len, seqs))
    t_judge = median_time(lambda: judge.score(items), repeats)
    with be.adapter_disabled():  # a fresh adapter is a no-op; plain base forward for the baseline
        t_prefill = median_time(lambda: plain_prefill(be.model, seqs, be.batch_size), repeats)

    # P3's comparison judge: the same prompt, a 128-token greedy rationale, then the verdict read
    verdict_ids = flat_ids(verdict_token_ids(be.tokenizer, [str(i) for i in range(1, 6)]))
    rationale_items = items[:4]
    r_prompts = [judge.prompts_for(it, None)[0] for it in rationale_items]

    def rationale_judge() -> None:
        enc = be.encode(r_prompts)
        for s in enc:
            out = be.model.generate(input_ids=torch.tensor([s]), max_new_tokens=128, min_new_tokens=128,
                                    do_sample=False, pad_token_id=be.tokenizer.eos_token_id)
            text = be.tokenizer.decode(out[0, len(s):], skip_special_tokens=True)
            be.next_token_logprobs([be.tokenizer.decode(s) + text + "\nScore: "], verdict_ids)

    t_logprob_small = median_time(lambda: judge.score(rationale_items), repeats)
    t_rationale = median_time(rationale_judge, max(1, repeats // 2))
    return {
        "P1_judge_over_prefill_tokens_per_s": t_prefill / t_judge,
        "P1_detail": {"tokens": tokens, "judge_s": t_judge, "prefill_s": t_prefill, "items": len(items)},
        "P3_logprob_over_rationale_judge_time": t_logprob_small / t_rationale,
        "P3_detail": {"items": len(rationale_items), "logprob_s": t_logprob_small, "rationale_s": t_rationale},
    }


def p2(be, envs, repeats: int) -> dict:
    from judges import build_judge
    from judges.scoring import flat_ids, verdict_token_ids

    env = max(envs, key=lambda e: sum(len(d.text) for d in e.public.evidence))
    judge = build_judge("generic", be, identity="bench")
    verdict_ids = flat_ids(verdict_token_ids(be.tokenizer, [str(i) for i in range(1, 6)]))
    answers = [a.text for a in env.stress_answers]
    packet = judge.prompts_for(judge_items([env], 1)[0], None)[0]
    packet_prefix = packet[: packet.index(env.stress_answers[0].text)]
    t_packet = median_time(lambda: be.next_token_logprobs([packet_prefix], verdict_ids), repeats)
    out: dict = {"P2_detail": {"task_id": env.task_id, "packet_prefill_s": t_packet,
                               "packet_tokens": len(be.encode([packet_prefix])[0])}}
    from judges import JudgeItem

    for k in (4, 8):
        cands = [answers[i % len(answers)] + " " * (i // len(answers)) for i in range(k)]
        prompts = [judge.prompts_for(JudgeItem(env.public, c, None), None)[0] for c in cands]
        for reuse in (True, False):
            be.reuse_prefix = reuse
            t = median_time(lambda prompts=prompts: be.next_token_logprobs(prompts, verdict_ids), repeats)
            key = f"P2_k{k}_{'reuse' if reuse else 'plain'}_over_one_prefill"
            out[key] = t / t_packet
        be.reuse_prefix = True
    return out


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def dpo_memory(reference: str) -> dict:
    """One DPO step on four mini pairs in this (fresh) process: RSS before it and the process peak."""
    from selfplay.dpo import DPOSettings, dpo_step
    from selfplay.envs.prompt import policy_messages
    from selfplay.pairs import Pair

    be = backend()
    pairs = []
    for e in mini_envs()[:4]:
        valid = next(a.text for a in e.stress_answers if a.validity == "valid")
        invalid = next(a.text for a in e.stress_answers if a.validity == "invalid")
        pairs.append(Pair(e.task_id, be.render(policy_messages(e.public)), valid, invalid, 0, 1, 1.0, 0.0))
    before = rss_kb()
    with tempfile.TemporaryDirectory() as d:
        dpo_step(be.model, be.tokenizer, pairs, DPOSettings(
            beta=0.1, learning_rate=1e-5, epochs=1, batch_size=4, grad_accum=1, max_seq_len=4096,
            reference=reference, seed=0, progress=False), Path(d))
    return {"before_kb": before, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def p4() -> dict:
    res = {}
    for ref in ("initial", "previous"):
        # a fresh process per mode: peak RSS is a per-process high-water mark
        out = subprocess.run([sys.executable, "-m", "bench.run", "--dpo-memory", ref],
                             capture_output=True, text=True, check=True, cwd=REPO)
        res[ref] = json.loads(out.stdout.strip().splitlines()[-1])
    inc = {k: v["peak_kb"] - v["before_kb"] for k, v in res.items()}
    return {
        "P4_adapter_off_over_precomputed_peak_rss": res["initial"]["peak_kb"] / res["previous"]["peak_kb"],
        "P4_increment_ratio": inc["initial"] / inc["previous"] if inc["previous"] > 0 else None,
        "P4_detail": res,
    }


def one_iteration(root: Path, n_envs: int, k: int, max_new_tokens: int) -> dict:
    from hydra import compose, initialize_config_dir

    from selfplay.train import run

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[
            f"+policy={POLICY}", "reward=generic", "logger=none", "iterations=1", f"k={k}",
            f"max_new_tokens={max_new_tokens}", f"max_train_envs={n_envs}", "margin=0.0",
            f"output_root={root}", f"experiment_name=bench{n_envs}", "backend=hf",
        ])
    out = run(cfg)
    return json.loads((out / "iter_1" / "metrics.json").read_text())["metrics"]


def p5_scaling(quick: bool) -> dict:
    k, tokens = (2, 24) if quick else (4, 48)
    with tempfile.TemporaryDirectory() as d:
        one = one_iteration(Path(d), 2, k, tokens)
        two = one_iteration(Path(d), 4, k, tokens)
    inside = one["time/generate_s"] + one["time/judge_s"] + one["time/dpo_s"]
    return {
        "P5_iteration_over_phases": one["time/iteration_s"] / inside,
        "P5_detail": {key: one[key] for key in one if key.startswith("time/")},
        "S_iteration_2x_over_1x_envs": two["time/iteration_s"] / one["time/iteration_s"],
        "S_detail": {"envs": [2, 4], "iteration_s": [one["time/iteration_s"], two["time/iteration_s"]]},
    }


GOALS = {"P1_judge_over_prefill_tokens_per_s": (">=", 0.8), "P2_k8_reuse_over_one_prefill": ("<=", 1.5),
         "P3_logprob_over_rationale_judge_time": ("<=", 0.3),
         "P4_adapter_off_over_precomputed_peak_rss": ("<=", 1.1), "P5_iteration_over_phases": ("<=", 1.3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "bench" / "results.json"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller budgets (a smoke run)")
    ap.add_argument("--dpo-memory", choices=["initial", "previous"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dpo_memory:  # P4's child process
        print(json.dumps(dpo_memory(args.dpo_memory)))
        return 0
    torch.manual_seed(0)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    results: dict = {"commit": commit, "machine": {"cpus": torch.get_num_threads(), "python": platform.python_version(),
                                                    "torch": torch.__version__}, "policy": POLICY}
    envs = mini_envs()
    be = backend()
    results |= p1_p3(be, envs, args.repeats)
    results |= p2(be, envs, args.repeats)
    del be
    results |= p4()
    results |= p5_scaling(args.quick)
    results["peak_rss_mb_bench_process"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    results["goals"] = {k: {"goal": f"{op} {v}", "value": results[k],
                            "met": (results[k] >= v) if op == ">=" else (results[k] <= v)} for k, (op, v) in GOALS.items()}

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'ratio':48s} {'value':>8s}  goal")
    for key, value in results.items():
        if key[0] in "PS" and isinstance(value, float):
            goal = results["goals"].get(key, {}).get("goal", "")
            print(f"{key:48s} {value:8.3f}  {goal}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
