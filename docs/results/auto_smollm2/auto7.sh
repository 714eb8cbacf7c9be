#!/bin/bash
# usage: bash docs/results/auto_smollm2/auto7.sh MODEL_DIR OUT_DIR  (the rows of docs/results/real_models.md, `auto` on SmolLM2)
# auto against SD off on SmolLM2's RL rollout (bench spec --config), with and without an EAGLE-3 head
cd "$(dirname "$0")/../../.."
M=${1:-models/smollm2}; O=${2:-runs/auto7}; H=$O/drafter; mkdir -p $O
log() { echo "$(date -u +%T) $(cat /proc/loadavg) $*" >> $O/progress.log; }
log start
[ -f $H/train_metrics.json ] || specrl train-drafter --method eagle3 --model $M --out $H --data data/steps_train.jsonl \
  --prompts 128 --samples 1 --temperature 0.5 --max-tokens 512 --draft-vocab-size 8192 --ttt-steps 4 \
  --batch-tokens 2048 --steps 1000 --time-budget 600 --threads 2 cache=$O/drafter_cache > $O/drafter.log 2>&1
log head done
python docs/results/auto_smollm2/build_time.py $M bfloat16 $H >> $O/build_time.jsonl 2>> $O/build_time.err
log build time done
for r in 1 2; do
  specrl bench spec --config configs/smollm2_steps.yaml --batch-sizes rl --methods eagle3,auto --repeats 2 \
    model=$M rollout.spec.draft_model=$H 2>>$O/bench.err | sed "s/^{/{\"round\": $r, \"workload\": \"4x8\", \"head\": true, /" >> $O/rows.jsonl
  log round $r head
  [ $r = 1 ] && specrl bench spec --config configs/smollm2_steps.yaml --batch-sizes rl --methods suffix,auto --repeats 2 \
    model=$M 2>>$O/bench.err | sed "s/^{/{\"round\": $r, \"workload\": \"4x8\", \"head\": false, /" >> $O/rows.jsonl
  log round $r nohead
done
specrl bench spec --config configs/smollm2_steps.yaml --batch-sizes rl --methods eagle3,auto --repeats 4 \
  model=$M rollout.spec.draft_model=$H rollout.prompts_per_step=1 2>>$O/bench.err | sed "s/^{/{\"round\": 1, \"workload\": \"1x8\", \"head\": true, /" >> $O/rows.jsonl
log 1x8 head
log done
