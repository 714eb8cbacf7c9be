"""Does training the online drafter on a share of the trajectories (rollout.drafter.sample_fraction) slow
its learning per update? A fresh EAGLE-3 head learns the embedded policy from 5 captured 8x8 rollout
batches (cycled, 15 updates, lr 1e-3) at each fraction; its first-draft KL and expected accepted mass are
measured on a sixth, held-out batch after 5, 10 and 15 updates. Prints one JSON line per fraction.

    python experiments/online_drafter_sample_fraction.py [--fractions 1,0.25,0.125]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install


def captured_batches(policy, count: int) -> list:
    """`count` captured 8x8 rollout batches at the default EAGLE-3 layers of the 6-layer embedded policy."""
    from online_drafter_cold_curve import captured  # experiments/ is on sys.path when run as a script
    return captured(policy, count, prompts_per_batch=8, layers=(1, 2, 3))


def main() -> None:
    import torch

    from specrl import SpecConfig
    from specrl.drafters.training.online import OnlineDrafterTrainer
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    from specrl.optim import OptimSettings
    from specrl.train.config import DrafterConfig
    ap = argparse.ArgumentParser()
    ap.add_argument("--fractions", default="1.0,0.25,0.125")
    args = ap.parse_args()
    torch.set_num_threads(1)
    policy = load_model(default_policy_path())
    *train, held = captured_batches(policy, 6)
    for fraction in map(float, args.fractions.split(",")):
        online = OnlineDrafterTrainer.from_spec(SpecConfig(method="eagle3", draft_model="scratch"), policy,
                                                DrafterConfig(optim=OptimSettings(lr=1e-3), sample_fraction=fraction))
        assert online.capture_layers == (1, 2, 3), online.capture_layers
        curve = []
        for update in range(1, 16):
            batches = train[(update - 1) % len(train)]  # a share of the rows, drawn anew each update
            online.step(online.subsample(batches))
            if update % 5 == 0:
                with torch.no_grad():
                    denom = sum(b.num_tokens for b in held)
                    kl, mass = (sum(online.loss(mb, None, denom)[i] for mb in held) for i in (1, 2))
                curve.append({"updates": update, "held_out_kl": round(kl, 4), "held_out_accept_mass": round(mass, 4)})
        print(json.dumps({"sample_fraction": fraction, "curve": curve}), flush=True)


if __name__ == "__main__":
    main()
