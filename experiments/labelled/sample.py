"""Sample answers of a policy on every data/mini environment, for labelling by reading.

    python experiments/labelled/sample.py --policy smollm2-135m --temperature 1.0 --n 2 --out FILE
    python experiments/labelled/sample.py --policy smollm2-135m-sft --adapter outputs/demo/decisive/seed0/iter_3/adapter ...

Writes one JSON object per answer (appending to FILE): task_id, kind, split, policy, adapter,
temperature, seed, index, max_new_tokens, truncated, text. Labels are added afterwards by people
reading each answer against the environment's certificate (experiments/labelled/README.md); no
verifier is run here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from selfplay.envs import load_envs, load_split
from selfplay.envs.prompt import policy_messages
from selfplay.models import load_backend
from selfplay.models.backend import is_truncated

MINI = Path(__file__).resolve().parents[2] / "data" / "mini"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", required=True)
    ap.add_argument("--adapter", default=None, help="a saved LoRA adapter directory (iter_<t>/adapter)")
    ap.add_argument("--temperature", type=float, required=True)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--tasks", nargs="*", default=None, help="only these task ids")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    envs = load_envs(MINI)
    split = {t: name for name in ("train", "audit") for t in load_split(MINI / "splits" / f"{name}.json").task_ids}
    if args.tasks:
        envs = [e for e in envs if e.task_id in set(args.tasks)]
    backend = load_backend(args.policy, backend="hf", batch_size=8, progress=True)
    if args.adapter:
        backend.load_adapter(args.adapter)
    prompts = [backend.render(policy_messages(e.public)) for e in envs]
    answers = backend.sample(prompts, n=args.n, temperature=args.temperature,
                             max_new_tokens=args.max_new_tokens, seed=args.seed, adapter=bool(args.adapter))
    with open(args.out, "a", encoding="utf-8") as f:
        for env, texts in zip(envs, answers, strict=True):
            for i, text in enumerate(texts):
                f.write(json.dumps({
                    "task_id": env.task_id, "kind": env.kind, "split": split.get(env.task_id),
                    "policy": args.policy, "adapter": args.adapter, "temperature": args.temperature,
                    "seed": args.seed, "index": i, "max_new_tokens": args.max_new_tokens,
                    "truncated": is_truncated(text), "text": str(text).strip(),
                }, ensure_ascii=False) + "\n")
    print(f"{sum(map(len, answers))} answers -> {args.out}")


if __name__ == "__main__":
    main()
