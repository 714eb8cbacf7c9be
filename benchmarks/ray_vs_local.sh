#!/bin/bash
# The runs behind docs/results/ray_vs_local.{png,jsonl} and ray_async_lag.png, one after the other:
#   benchmarks/ray_vs_local.sh OUT_DIR     (env COMMON= overrides the shared keys, ARMS= picks the runs)
# then: python benchmarks/ray_vs_local.py --runs local=OUT/local ray2x1=OUT/ray2x1 fsdp1x2=OUT/fsdp1x2 \
#   --async-run async_ray_inflight=OUT/async_ray_inflight --walls OUT/walls.txt --jsonl docs/results/ray_vs_local.jsonl
# RAY_worker_niceness=0: Ray starts its workers at nice 15, so on a machine shared with other jobs the
# actors would only get the CPU the others leave, and the comparison would measure that.
OUT=${1:?OUT_DIR}; mkdir -p "$OUT"
COMMON=${COMMON:-"schedule.max_steps=12 schedule.eval_every=4 schedule.save_every=12 rollout.prompts_per_step=8 data.eval_size=100"}
ARMS=${ARMS:-"local async_ray_inflight ray2x1 fsdp1x2"}
export RAY_worker_niceness=0
run() {
  local name=$1; shift
  local t0=$(date +%s.%N)
  python -m specrl train $COMMON out_dir="$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall=$(echo "$(date +%s.%N) - $t0" | bc)" >> "$OUT/walls.txt"
}
declare -A ARGS=(
  [local]=""
  [async_ray_inflight]="pipeline.backend=ray pipeline.mode=async pipeline.max_policy_lag=2 pipeline.inflight_updates=true"
  [ray2x1]="pipeline.backend=ray"
  [fsdp1x2]="pipeline.backend=ray ray.trainers=2 ray.rollout_actors=1"
)
for arm in $ARMS; do run "$arm" ${ARGS[$arm]}; done
