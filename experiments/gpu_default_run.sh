#!/usr/bin/env bash
# The GPU checks in one script, for the device tool (one NVIDIA GPU, torch but no pip registry):
#   1. the GPU tests (tests/engine/test_cuda.py: exactness of every SD method on CUDA kernels);
#   2. the default run as the 2x2 (sync/async x SD off/auto, seed 0) on the GPU, cells alone one after another.
# pytest travels in .venv/gpu_pkgs (pip install --target .venv/gpu_pkgs pytest), appended to sys.path so the
# machine's own packages win. Every stage has its own time limit; results land in $OUT as they finish.
set -u
OUT=${OUT:-runs/gpu}
source "$(dirname "$0")/gpu_env.sh"
timeout "${TEST_S:-150}" python3 -c "
import sys; sys.path.append('.venv/gpu_pkgs'); import pytest
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/engine/test_cuda.py']))" > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc $?"; tail -5 "$OUT/gpu_tests.log"
timeout "${RUNS_S:-380}" python3 benchmarks/sync_async_2x2.py --out "$OUT/2x2" --seeds 0 --no-sim \
  --cells "${CELLS:-sync:off,sync:auto,async:auto,async:off}" device=cuda > "$OUT/2x2.log" 2>&1
echo "2x2 rc $?"; tail -12 "$OUT/2x2.log"
for f in "$OUT"/2x2/*/metrics.jsonl; do [ -f "$f" ] && echo "$f $(wc -l < "$f") steps"; done
