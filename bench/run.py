"""`make bench`: speed and memory ratios of the parts, each measured within one run on this machine.

    python -m bench.run [--out bench/results.json] [--quick] [--only P8]

Ratios, not absolute times, because shared CPU machines are noisy (and differ from one another): both
sides of every ratio are measured in the same process minutes apart, each timed as the median of
`--repeats` runs. The bounds come from this run's own measurements of the machine:

M   fp32 matmul FLOP/s at the model's own shapes (each linear layer of a decoder layer and the LM
    head, on a 512-token row block) and memory read bandwidth (a sum over a 512 MiB tensor)

P1  judge scoring tokens/s ÷ plain prefill tokens/s of the same model on the same token sequences
P2  scoring k candidates of one environment with packet reuse ÷ the token-proportional ideal: the
    tokens the k prompts share once plus every candidate's own tokens, at P1's plain prefill rate
P3  logprob judge wall time ÷ a judge that first generates a 128-token rationale, same items
P4  DPO step peak RSS with the adapter-off reference ÷ with precomputed reference log-probs
    (each in a fresh process; reported on the whole process and on the increment over the loaded model)
P5  one iteration's wall time ÷ (generation + judging + DPO measured inside it)
P7  DPO wall s per pair (default training settings, the whole `dpo_step`) ÷ FLOP-bound s per pair:
    6·N FLOP per token over chosen and rejected (LoRA forward + backward 4·N, reference forward 2·N,
    N the base model's parameters) at M's matmul rate
P8  sampling wall time for k answers of one prompt ÷ (one prefill of the prompt at P1's plain prefill
    rate + each decode step at M's bandwidth: all weights and the batch's KV cache read once per step);
    the detail also times the model's own weight matrices at k rows through `F.linear` and
    through the oneDNN-packed op that CPU decoding uses: the rates the matmuls of a decode step reach
P9  the preference probe's log-probs of every authored answer of one environment (one prompt, each
    answer scored as the policy's turn) with the prompt run once for all of them ÷ the plain path
    that runs prompt + answer per row; the detail gives both against the token-proportional ideal
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


def judge_prompts_and_prefill(be, envs, repeats: int):
    """P1's judge, items and prompt token ids, and the plain prefill time of those ids: a fresh
    adapter is a no-op, so the plain base forward, on the attention kernel the backend itself runs
    (KV heads read natively)."""
    from judges import build_judge
    from selfplay.models.hf import native_gqa

    judge = build_judge("generic", be, identity="bench")
    items = judge_items(envs[:4], per_env=3)
    seqs = be.encode([p for it in items for p in judge.prompts_for(it, None)])
    with be.adapter_disabled(), native_gqa():
        t_prefill = median_time(lambda: plain_prefill(be.model, seqs, be.batch_size), repeats)
    return judge, items, seqs, t_prefill


def p1_p3(be, envs, repeats: int) -> dict:
    from judges.scoring import flat_ids, verdict_token_ids

    judge, items, seqs, t_prefill = judge_prompts_and_prefill(be, envs, repeats)
    tokens = sum(map(len, seqs))
    t_judge = median_time(lambda: judge.score(items), repeats)

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
        "P1_detail": {"tokens": tokens, "judge_s": t_judge, "prefill_s": t_prefill, "items": len(items),
                      "prefill_tokens_per_s": tokens / t_prefill},
        "P3_logprob_over_rationale_judge_time": t_logprob_small / t_rationale,
        "P3_detail": {"items": len(rationale_items), "logprob_s": t_logprob_small, "rationale_s": t_rationale},
    }


def shared_and_own_tokens(seqs: list[list[int]]) -> tuple[int, int]:
    """Tokens all `seqs` share at their start, and the tokens after that summed over the sequences."""
    from selfplay.models.hf import common_prefix_len

    shared = min(common_prefix_len(seqs[0], s) for s in seqs)
    return shared, sum(len(s) - shared for s in seqs)


def p2(be, envs, prefill_rate: float, repeats: int) -> dict:
    from judges import JudgeItem, build_judge
    from judges.scoring import flat_ids, verdict_token_ids

    env = max(envs, key=lambda e: sum(len(d.text) for d in e.public.evidence))
    judge = build_judge("generic", be, identity="bench")
    verdict_ids = flat_ids(verdict_token_ids(be.tokenizer, [str(i) for i in range(1, 6)]))
    answers = [a.text for a in env.stress_answers]
    out: dict = {"P2_detail": {"task_id": env.task_id, "prefill_tokens_per_s": prefill_rate}}
    for k in (4, 8):
        cands = [answers[i % len(answers)] + " " * (i // len(answers)) for i in range(k)]
        prompts = [judge.prompts_for(JudgeItem(env.public, c, None), None)[0] for c in cands]
        shared, own = shared_and_own_tokens(be.encode(prompts))
        be.reuse_prefix = True
        t = median_time(lambda prompts=prompts: be.next_token_logprobs(prompts, verdict_ids), repeats)
        ideal = (shared + own) / prefill_rate
        out[f"P2_k{k}_reuse_over_token_ideal"] = t / ideal
        out["P2_detail"][f"k{k}"] = {"packet_tokens": shared, "candidate_tokens": own, "reuse_s": t, "ideal_s": ideal}
    be.reuse_prefix = False  # the plain path once, for scale
    t_plain = median_time(lambda: be.next_token_logprobs(prompts, verdict_ids), 1)
    be.reuse_prefix = True
    out["P2_detail"]["k8"]["plain_s"] = t_plain
    return out


def p9(be, envs, prefill_rate: float, repeats: int) -> dict:
    from selfplay.envs.prompt import policy_messages
    from selfplay.models.chat import end_of_turn

    env = max(envs, key=lambda e: sum(len(d.text) for d in e.public.evidence))
    prompt = be.render(policy_messages(env.public))
    turns = [a.text + end_of_turn(be.tokenizer) for a in env.stress_answers]
    prompts = [prompt] * len(turns)
    shared, own = shared_and_own_tokens([p + c for p, c in zip(be.encode(prompts), be.encode(turns, check_length=False), strict=True)])
    times = {}
    try:
        for reuse in (True, False):
            be.reuse_prefix = reuse
            times[reuse] = median_time(lambda: be.sequence_logprobs(prompts, turns), repeats)
    finally:
        be.reuse_prefix = True
    ideal = (shared + own) / prefill_rate  # the tokens all rows share once, then each row's own
    return {"P9_probe_shared_prompt_over_plain": times[True] / times[False],
            "P9_detail": {"task_id": env.task_id, "answers": len(turns), "prompt_tokens": len(be.encode([prompt])[0]),
                          "shared_tokens": shared, "own_tokens": own,
                          "shared_s": times[True], "plain_s": times[False], "token_ideal_s": ideal}}


def machine(model, repeats: int) -> dict:
    """fp32 matmul FLOP/s over the model's own linear shapes and memory read bandwidth, this run."""
    cfg = model.config.get_text_config()
    h, inter, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    head_dim = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * head_dim, cfg.num_key_value_heads * head_dim
    # (in, out) of q, k, v, o, gate, up, down, weighted by layers, plus the LM head once
    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)]
    rows = 512
    weights = {s: torch.randn(s) for s in set(shapes) | {(h, vocab)}}
    inputs = {i: torch.randn(rows, i) for i in {s[0] for s in weights}}
    layers = cfg.num_hidden_layers

    def one_pass() -> None:
        for _ in range(layers):
            for s in shapes:
                inputs[s[0]] @ weights[s]
        inputs[h] @ weights[(h, vocab)]

    flop = 2 * rows * (layers * sum(a * b for a, b in shapes) + h * vocab)
    one_pass()  # warm-up
    t_mm = median_time(one_pass, repeats)
    big = torch.ones(128 * 2**20)  # 512 MiB of float32, well past any cache
    big.sum()
    t_read = median_time(big.sum, repeats)
    return {"matmul_flops": flop / t_mm, "read_bytes_per_s": big.numel() * 4 / t_read,
            "matmul_detail": {"rows": rows, "flop": flop, "s": t_mm}, "read_detail": {"bytes": big.numel() * 4, "s": t_read}}


def n_params(model, lora: bool = False) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if ("lora_" in n) == lora)


def mini_pairs(be, n: int):
    """One (valid, invalid) stress-answer pair of each of the first `n` mini environments."""
    from selfplay.envs.prompt import policy_messages
    from selfplay.pairs import Pair

    pairs = []
    for e in mini_envs()[:n]:
        valid = next(a.text for a in e.stress_answers if a.validity == "valid")
        invalid = next(a.text for a in e.stress_answers if a.validity == "invalid")
        pairs.append(Pair(e.task_id, be.render(policy_messages(e.public)), valid, invalid, 0, 1, 1.0, 0.0))
    return pairs


def pair_tokens(be, pairs) -> int:
    """Tokens TRL trains on: prompt + answer + EOS, chosen and rejected."""
    eos = be.tokenizer.eos_token
    ids = be.encode([p.prompt + a + eos for p in pairs for a in (p.chosen, p.rejected)], check_length=False)
    return sum(map(len, ids))


def p7(be, m: dict, repeats: int) -> dict:
    from selfplay.config import TrainConfig
    from selfplay.dpo import DPOSettings, dpo_step

    tr = TrainConfig()
    pairs = mini_pairs(be, 4)
    settings = DPOSettings(beta=tr.beta, learning_rate=tr.learning_rate, epochs=tr.epochs, batch_size=tr.batch_size,
                           grad_accum=tr.grad_accum, max_seq_len=tr.max_seq_len, reference=tr.reference, seed=0,
                           gradient_checkpointing=tr.gradient_checkpointing, progress=False)
    state = {n: p.detach().clone() for n, p in be.model.named_parameters() if "lora_" in n}

    def step() -> None:
        with tempfile.TemporaryDirectory() as d:
            dpo_step(be.model, be.tokenizer, pairs, settings, Path(d))

    t = median_time(step, repeats)
    with torch.no_grad():  # back to the fresh adapter for whatever is measured next
        for n, p in be.model.named_parameters():
            if n in state:
                p.copy_(state[n])
    tokens, n = pair_tokens(be, pairs), n_params(be.model)
    bound = 6 * n * tokens / m["matmul_flops"]
    return {"P7_dpo_over_flop_bound": t / bound,
            "P7_detail": {"pairs": len(pairs), "tokens": tokens, "params": n, "dpo_s": t, "flop_bound_s": bound,
                          "s_per_pair": t / len(pairs), "batch_size": tr.batch_size, "grad_accum": tr.grad_accum}}


def p8(be, m: dict, prefill_rate: float, repeats: int, k: int, max_new_tokens: int) -> dict:
    from selfplay.envs.prompt import policy_messages

    env = mini_envs()[0]
    prompt = be.render(policy_messages(env.public))
    plen = len(be.encode([prompt])[0])
    out: list = []
    t = median_time(lambda: out.append(be.sample([prompt], n=k, temperature=1.0, max_new_tokens=max_new_tokens,
                                                 seed=0)), repeats)
    cut = [not c.finished for c in out[-1][0]]
    steps = max_new_tokens if any(cut) else max(len(be.encode([c], check_length=False)[0]) for c in out[-1][0])
    cfg = be.model.config.get_text_config()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4  # K and V, float32
    weight_bytes = 4 * (n_params(be.model) + n_params(be.model, lora=True))
    decode_bytes = sum(weight_bytes + k * kv_per_token * (plen + i) for i in range(steps))
    ideal = plen / prefill_rate + decode_bytes / m["read_bytes_per_s"]
    # what the matmuls alone reach at a decode step's shape: the model's own weights, k rows each
    mats = [p for n, p in be.model.named_parameters() if p.dim() == 2 and "lora_" not in n]
    rows = {w.shape[1]: torch.randn(k, w.shape[1]) for w in mats}
    with torch.inference_mode():
        t_linear = median_time(lambda: [torch.nn.functional.linear(rows[w.shape[1]], w) for w in mats], repeats)
    linear_rate = sum(w.numel() * 4 for w in mats) / t_linear
    # the same matrices on the oneDNN-packed weights that sampling decodes with on a CPU (packed.py)
    packed = [(torch.ops.mkldnn._reorder_linear_weight(w.detach(), k), w.shape[1]) for w in mats]
    with torch.inference_mode():
        t_packed = median_time(lambda: [torch.ops.mkldnn._linear_pointwise(rows[i], p, None, "none", [], "")
                                        for p, i in packed], repeats)
    return {"P8_sampling_over_bound": t / ideal,
            "P8_detail": {"k": k, "prompt_tokens": plen, "decode_steps": steps, "cut_at_budget": sum(cut),
                          "sample_s": t, "bound_s": ideal, "prefill_bound_s": plen / prefill_rate,
                          "decode_bound_s": decode_bytes / m["read_bytes_per_s"],
                          "packed_decode": be.packed_decode,
                          "decode_linear_bytes_per_s": linear_rate,
                          "decode_s_at_linear_rate": decode_bytes / linear_rate,
                          "decode_packed_bytes_per_s": sum(w.numel() * 4 for w in mats) / t_packed}}


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def dpo_memory(reference: str) -> dict:
    """One DPO step on four mini pairs in this (fresh) process: RSS before it and the process peak."""
    from selfplay.dpo import DPOSettings, dpo_step

    be = backend()
    pairs = mini_pairs(be, 4)
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
        out = subprocess.run([sys.executable, "-m", "bench.run", "--dpo-memory", ref, "--policy", POLICY],
                             capture_output=True, text=True, check=True, cwd=REPO)
        res[ref] = json.loads(out.stdout.strip().splitlines()[-1])
    inc = {k: v["peak_kb"] - v["before_kb"] for k, v in res.items()}
    return {
        "P4_adapter_off_over_precomputed_peak_rss": res["initial"]["peak_kb"] / res["previous"]["peak_kb"],
        "P4_batch4_peak_rss_gb": max(v["peak_kb"] for v in res.values()) * 1024 / 1e9,
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
            # at a 48-token budget nearly every answer is cut, and cut answers are left out of pairs,
            # so the iteration would have no DPO phase to time; the bench times phases, not pairing
            "pair_truncated=true",
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


GOALS = {"P1_judge_over_prefill_tokens_per_s": (">=", 0.8), "P2_k8_reuse_over_token_ideal": ("<=", 1.2),
         "P3_logprob_over_rationale_judge_time": ("<=", 0.3),
         "P4_adapter_off_over_precomputed_peak_rss": ("<=", 1.1), "P4_batch4_peak_rss_gb": ("<=", 8.0),
         "P5_iteration_over_phases": ("<=", 1.3), "P7_dpo_over_flop_bound": ("<=", 2.5),
         "P8_sampling_over_bound": ("<=", 2.0), "P9_probe_shared_prompt_over_plain": ("<=", 0.6)}


def main(argv: list[str] | None = None) -> int:
    global POLICY
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="results file (default bench/results.json; with --only, none)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="smaller budgets (a smoke run)")
    ap.add_argument("--policy", default=POLICY, help="policy config name (a tiny one for a smoke run)")
    ap.add_argument("--only", choices=["P8", "P9"], help="machine bounds, the prefill rate and this ratio alone")
    ap.add_argument("--dpo-memory", choices=["initial", "previous"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.out is None and not args.only:
        args.out = str(REPO / "bench" / "results.json")
    POLICY = args.policy
    if args.dpo_memory:  # P4's child process
        print(json.dumps(dpo_memory(args.dpo_memory)))
        return 0
    torch.manual_seed(0)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    results: dict = {"commit": commit, "machine": {"cpus": torch.get_num_threads(), "python": platform.python_version(),
                                                    "torch": torch.__version__}, "policy": POLICY}
    out = Path(args.out) if args.out else None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)

    def measured(part: dict) -> None:  # written as it comes, so a failing part keeps the others
        results.update(part)
        results["goals"] = {k: {"goal": f"{op} {v}", "value": results[k],
                                "met": (results[k] >= v) if op == ">=" else (results[k] <= v)}
                            for k, (op, v) in GOALS.items() if k in results}
        if out:
            out.write_text(json.dumps(results, indent=2) + "\n")

    envs = mini_envs()
    be = backend()
    results["machine"] |= machine(be.model, args.repeats)
    k, tokens = (2, 24) if args.quick else (4, 48)
    if args.only:
        _, _, seqs, t_prefill = judge_prompts_and_prefill(be, envs, args.repeats)
        rate = sum(map(len, seqs)) / t_prefill
        measured(p8(be, results["machine"], rate, args.repeats, k, tokens) if args.only == "P8" else p9(be, envs, rate, args.repeats))
    else:
        measured(p1_p3(be, envs, args.repeats))
        rate = results["P1_detail"]["prefill_tokens_per_s"]
        measured(p2(be, envs, rate, args.repeats))
        measured(p9(be, envs, rate, args.repeats))
        measured(p8(be, results["machine"], rate, args.repeats, k, tokens))
        measured(p7(be, results["machine"], args.repeats))
        del be
        measured(p4())
        measured(p5_scaling(args.quick))
        measured({"peak_rss_mb_bench_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    print(f"{'ratio':48s} {'value':>8s}  goal")
    for key, value in results.items():
        if key[0] in "PS" and isinstance(value, float):
            goal = results["goals"].get(key, {}).get("goal", "")
            print(f"{key:48s} {value:8.3f}  {goal}")
    if out:
        print(f"wrote {out}")
    else:
        print(json.dumps({k: v for k, v in results.items() if k != "goals"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
