# Sourced by the GPU scripts (device tool): $OUT made, PYTHONPATH set, the machine recorded in $OUT/env.txt.
mkdir -p "$OUT"
export PYTHONPATH=.
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
  python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
