"""Words that `specrl train` and `specrl simulate` share (torch-free: the simulator reads them).

`PIPELINE_MODES`: "sync" (rollout, then train, then weight sync) or "async" (rollout overlaps training).
`PLACEMENTS` (`ray.placement`, `simulate --placement`): "colocated" (rollout and training on the same GPUs,
weights synced in place) or "split" (separate GPU pools, weights sent over the network)."""
PIPELINE_MODES = ("sync", "async")
PLACEMENTS = ("colocated", "split")
