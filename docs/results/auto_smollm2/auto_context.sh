#!/bin/bash
# usage: bash docs/results/auto_smollm2/auto_context.sh MODEL_DIR HEAD_DIR OUT_DIR
# auto (with the target cost's context term) against SD off on SmolLM2's RL rollout, 4 prompts x 8 with and
# without the EAGLE-3 head of auto7.sh, alternated over the rounds of ROUNDS (default 1 2 3), then 1 prompt x 8
# with the head, EAGLE-3 beside auto (METHODS_1X8, default eagle3,auto); FIT=0 skips context_fit.py
cd "$(dirname "$0")/../../.."
M=${1:-models/smollm2}; H=${2:-runs/auto7/drafter}; O=${3:-runs/auto_context}; mkdir -p $O
log() { echo "$(date -u +%T) $(cat /proc/loadavg) $*" >> $O/progress.txt; }
row() { sed "s/^{/{\"round\": $1, \"workload\": \"$2\", \"head\": $3, /" >> $O/rows.jsonl; }
log start
[ "${FIT:-1}" = 1 ] && python docs/results/auto_smollm2/context_fit.py $M bfloat16 $H > $O/context_fit.jsonl 2>> $O/bench.err
log context fit done
for r in ${ROUNDS:-1 2 3}; do
  specrl bench spec --config configs/smollm2_steps.yaml --batch-sizes rl --methods auto --repeats 2 \
    model=$M rollout.spec.draft_model=$H 2>>$O/bench.err | row $r 4x8 true
  log round $r head
  specrl bench spec --config configs/smollm2_steps.yaml --batch-sizes rl --methods auto --repeats 2 \
    model=$M 2>>$O/bench.err | row $r 4x8 false
  log round $r nohead
done
specrl bench spec --config configs/smollm2_steps.yaml --batch-sizes rl --methods ${METHODS_1X8:-eagle3,auto} --repeats 4 \
  model=$M rollout.spec.draft_model=$H rollout.prompts_per_step=1 2>>$O/bench.err | row ${ROUND_1X8:-1} 1x8 true
log 1x8 head
log done
