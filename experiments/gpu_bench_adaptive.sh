#!/usr/bin/env bash
# `specrl bench adaptive` as typed on a lent GPU (device tool), for the bench-vs-train account: the RL row at
# the embedded policy, then the default run with SD off (seed 0, device=cuda) to get its step-10 policy, the RL
# row at that policy, then the other batch sizes. Every stage has its own time limit; its JSON lines land in
# $OUT as they are measured.
set -u
OUT=${OUT:-runs/gpu_bench}
source "$(dirname "$0")/gpu_env.sh"
bench() { local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m specrl bench adaptive --png '' "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.err"
  echo "$name rc $? $(wc -l < "$OUT/$name.jsonl") rows $(date -u +%T)"; }
bench typed_rl "${RL_S:-200}" --batch-sizes rl --history "$OUT/rl_choices.jsonl"
timeout "${TRAIN_S:-150}" python3 -m specrl train seed=0 out_dir="$OUT/sync_off_seed0" progress=false \
  rollout.spec.method=null device=cuda > "$OUT/train.log" 2>&1
echo "train rc $? $(date -u +%T)"
bench typed_rl_step10 "${STEP10_S:-200}" --batch-sizes rl --model "$OUT/sync_off_seed0/checkpoints/step_000010/model"
bench typed_rest "${REST_S:-150}" --batch-sizes 64,16,4,1
