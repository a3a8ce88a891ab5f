#!/usr/bin/env bash
# Judge quality on the fixed stress answers with SmolLM2-135M-Instruct on CPU, all five rewards, on
# the 20 shared release records and on data/mini, one job at a time. Each job adds its summary to
# experiments/judge_eval/summary.json; per-answer rows land in outputs/judge_eval/<data>/<reward>/.
# Stage-1 artifacts are capped at 96 tokens so the whole sweep finishes on a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=experiments/judge_eval/summary.json
for data in "data=release data.path=../shared/impossible_rubrics" "data=mini"; do
  for reward in anchored generic commit_first rubric blind_solve; do
    extra=""
    case $reward in commit_first|rubric|blind_solve) extra="reward.max_new_tokens=96" ;; esac
    python -m audit.judge_eval +policy=smollm2-135m reward=$reward $data $extra merge_into=$OUT
  done
done
