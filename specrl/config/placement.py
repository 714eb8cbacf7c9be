"""Where rollout and training run relative to each other: the words `ray.placement` (specrl train) and
`specrl simulate --placement` share. "colocated": on the same GPUs/node, weights synced in place;
"split": separate GPU pools/nodes, weights sent over the network."""
PLACEMENTS = ("colocated", "split")
