"""Does training the online drafter on a share of the trajectories (rollout.drafter.sample_fraction) slow
its learning per update? A fresh EAGLE-3 head learns the embedded policy from 5 captured 8x8 rollout
batches (cycled, 15 updates, lr 1e-3) at each fraction; its first-draft KL and expected accepted mass are
measured on a sixth, held-out batch after 5, 10 and 15 updates. Prints one JSON line per fraction.

    python benchmarks/online_drafter_sample_fraction.py [--fractions 1,0.25,0.125]
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install


def captured_batches(policy, count: int) -> list:
    import torch

    from specrl import LLM, SamplingParams
    from specrl.train.config import AlgorithmConfig, OptimConfig
    from specrl.train.drafter_data import default_prompts
    from specrl.train.trainer import PolicyTrainer, collate
    llm, prompts, out = LLM(policy, max_num_seqs=64), default_prompts(8 * count), []
    for i in range(count):
        outs = llm.generate(prompts[8 * i:8 * i + 8], SamplingParams(n=8, temperature=1.0, max_tokens=200, seed=i))
        samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs if c.token_ids]
        batch = collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                        torch.zeros(len(samples)), pad_id=0)
        trainer = PolicyTrainer(copy.deepcopy(policy), AlgorithmConfig(), OptimConfig(warmup_steps=0),
                                total_steps=100, temperature=1.0, norm_len=200)
        trainer.capture_layers = (1, 2, 3)  # the default EAGLE-3 layers of the 6-layer embedded policy
        trainer.step(batch)
        out.append(trainer.captured)
    return out


def main() -> None:
    import torch

    from specrl import SpecConfig
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    from specrl.train.drafter_config import DrafterConfig
    from specrl.train.online_drafter import OnlineDrafterTrainer
    ap = argparse.ArgumentParser()
    ap.add_argument("--fractions", default="1.0,0.25,0.125")
    args = ap.parse_args()
    torch.set_num_threads(1)
    policy = load_model(default_policy_path())
    *train, held = captured_batches(policy, 6)
    for fraction in map(float, args.fractions.split(",")):
        online = OnlineDrafterTrainer.from_spec(SpecConfig(method="eagle3", draft_model="scratch"), policy,
                                                DrafterConfig(lr=1e-3, sample_fraction=fraction))
        assert online.capture_layers == (1, 2, 3), online.capture_layers
        curve = []
        for update in range(1, 16):
            batches = train[(update - 1) % len(train)]  # a share of the rows, drawn anew each update
            online.step([mb if (k := online.pick_rows(len(mb.rows))) is None else mb.select(k) for mb in batches])
            if update % 5 == 0:
                with torch.no_grad():
                    denom = sum(b.num_tokens for b in held)
                    kl, mass = (sum(online.loss(mb, None, denom)[i] for mb in held) for i in (1, 2))
                curve.append({"updates": update, "held_out_kl": round(kl, 4), "held_out_accept_mass": round(mass, 4)})
        print(json.dumps({"sample_fraction": fraction, "curve": curve}), flush=True)


if __name__ == "__main__":
    main()
