"""Memory the online drafter's capture holds after a policy step, at a real model's vocabulary size.

The policy trainer's forward hands the drafter each micro-batch's logits [b, T, V] and hidden states;
`rollout.drafter.sample_fraction` rows of each are kept when captured (OnlineDrafterTrainer.pick_rows), so
the rest is freed with the micro-batch. This builds a random 2-layer policy with SmolLM2-135M's width and
49,152-token vocabulary (the vocabulary is what makes the logits large), runs one `PolicyTrainer.step` on a
batch of --rows x --tokens with capture at each fraction, each in its own process, and prints the bytes the
captured batches hold and the process's peak RSS.

    python experiments/online_drafter_capture_memory.py --rows 64 --tokens 256 --fractions 1.0,0.125
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys


def one(fraction: float, rows: int, tokens: int, micro: int) -> dict:
    import resource

    import torch

    from specrl import SpecConfig
    from specrl.drafters.training.online import OnlineDrafterTrainer
    from specrl.model import CausalLM, ModelConfig
    from specrl.train.config import AlgorithmConfig, OptimConfig
    from specrl.train.config import DrafterConfig
    from specrl.train.trainer import PolicyTrainer, collate

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = ModelConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=2, num_heads=9,
                      num_kv_heads=3, arch="llama", max_position_embeddings=tokens + 64)
    policy = CausalLM(cfg)
    online = OnlineDrafterTrainer.from_spec(SpecConfig(method="eagle3", draft_model="scratch"), policy,
                                            DrafterConfig(sample_fraction=fraction))
    prompt, resp = 32, tokens - 32
    batch = collate([torch.randint(3, cfg.vocab_size, (prompt,)).tolist() for _ in range(rows)],
                    [torch.randint(3, cfg.vocab_size, (resp,)).tolist() for _ in range(rows)],
                    [[-1.0] * resp for _ in range(rows)], torch.linspace(-1, 1, rows), pad_id=0)
    trainer = PolicyTrainer(policy, AlgorithmConfig(), OptimConfig(warmup_steps=0, micro_batch_size=micro,
                                                                   micro_batch_tokens=0),
                            total_steps=10, temperature=1.0, norm_len=resp)
    trainer.forward_hook = capture = online.forward_hook()
    trainer.step(batch)
    held = sum(t.numel() * t.element_size() for mb in capture.batches
               for t in (mb.input_ids, mb.mask, mb.logits, *mb.hidden.values()))
    return {"sample_fraction": fraction, "rows": rows, "tokens": tokens, "micro_batch_rows": micro,
            "captured_rows": sum(len(mb.rows) for mb in capture.batches), "captured_mb": round(held / 2**20, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--micro", type=int, default=8, help="rows per micro-batch")
    ap.add_argument("--fractions", default="1.0,0.125")
    ap.add_argument("--one", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.rows, args.tokens, args.micro)))
        return
    for f in args.fractions.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", f, "--rows", str(args.rows), "--tokens",
                              str(args.tokens), "--micro", str(args.micro)], capture_output=True, text=True, check=True)
        print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
