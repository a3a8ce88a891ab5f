#!/usr/bin/env bash
# Judge quality on the fixed stress answers with SmolLM2-135M-Instruct on CPU: all five rewards in
# both prompt regimes (reward.instruction=neutral, the paper's, and the opt-in honesty_aware), on the
# 20 shared release records and on data/mini, one job at a time. Each job adds its summary to
# experiments/judge_eval/summary.json under <data>/<reward>/<instruction>; per-answer rows land in
# outputs/judge_eval/<data>/<reward>/<instruction>/. Stage-1 artifacts are capped at 96 tokens so the
# sweep fits a 2-core CPU, and on data/mini only its audit split runs (18 of 36 environments, 85 of
# 171 stress answers; MINI_SPLIT=all for every one). Measured: 1-3 minutes a job on data/mini,
# 2-4 on the release, the LLM oracle 1 and 3 minutes more in the first job of each.
# Rerunning resumes: a key already in summary.json is skipped (the key does not name the split, so
# changing MINI_SPLIT needs a fresh file); FRESH=1 deletes summary.json first.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=experiments/judge_eval/summary.json
if [ "${FRESH:-0}" = 1 ]; then rm -f "$OUT"; fi
PY=${PYTHON:-python}
for data in "data=mini split=${MINI_SPLIT:-audit}" "data=release data.path=../shared/impossible_rubrics"; do
  for reward in anchored generic commit_first rubric blind_solve; do
    for instruction in neutral honesty_aware; do  # paired, so a sweep cut short still compares regimes
      extra=""
      case $reward in commit_first|rubric|blind_solve) extra="reward.max_new_tokens=96" ;; esac
      echo "== $(date -u +%T) $data reward=$reward instruction=$instruction"
      $PY -m audit.judge_eval +policy=smollm2-135m reward=$reward reward.instruction=$instruction $data $extra \
        merge_into=$OUT
    done
  done
done
