#!/bin/bash
# `specrl train` on the vLLM backend with an online EAGLE-3 drafter, SmolLM2-135M-Instruct on the `steps` task,
# 8 steps of one prompt x 8 samples; the head is fitted first (`specrl train-drafter`, see real_models.md).
#   bash vllm.sh sync|async [ROOT=runs/rl4] [MODEL=/work/models/smollm2]
# A run that was stopped continues from its last checkpoint when the same command runs again.
mode=$1; root=${2:-runs/rl4}; M=${3:-/work/models/smollm2}
common="model=$M pipeline.backend=vllm rollout.spec.method=eagle3 rollout.spec.draft_model=$root/drafter rollout.drafter.online=true rollout.prompts_per_step=1 data.eval_size=8 schedule.max_steps=8 schedule.save_every=2 schedule.eval_every=8 optim.micro_batch_size=4 rollout.trace=true progress=false"
if [ -f $root/vllm_$mode/config.yaml ]; then
  specrl train resume=$root/vllm_$mode >> $root/vllm_$mode.log 2>&1
else
  specrl train --config configs/smollm2_steps.yaml --out $root/vllm_$mode $common pipeline.mode=$mode >> $root/vllm_$mode.log 2>&1
fi
echo "exit $?" >> $root/vllm_$mode.log
