"""Words that `specrl train` and `specrl simulate` share, written once here (torch-free: the simulator reads them).

`PIPELINE_MODES`: "sync" (rollout, then train, then weight sync) or "async" (rollout overlaps training).
`PLACEMENTS`: where rollout and training run relative to each other, as `ray.placement` and
`simulate --placement` name it: "colocated" (the same GPUs/node, weights synced in place) or "split" (separate
GPU pools/nodes, weights sent over the network)."""
PIPELINE_MODES = ("sync", "async")
PLACEMENTS = ("colocated", "split")
