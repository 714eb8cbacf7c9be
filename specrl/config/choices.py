"""Words that `specrl train` and `specrl simulate` share (torch-free: the simulator reads them)."""
PIPELINE_MODES = ("sync", "async")  # async: the rollout overlaps training
# `ray.placement`, `simulate --placement`: rollout and training on the same GPUs, weights synced in place; or
# separate GPU pools, weights sent over the network
PLACEMENTS = ("colocated", "split")
# algorithm.is_correction: the rollouts whose tokens get the truncated importance ratio (trainer/precision.py)
IS_CORRECTIONS = ("stale", "mismatch", "always")
