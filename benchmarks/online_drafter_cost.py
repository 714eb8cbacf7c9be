"""Cost of online drafter training on the embedded policy: the capture's overhead on the policy trainer's
step (same process, interleaved, process CPU time and wall clock), and the drafter step's own cost.

Rollouts: 16 training-split prompts x n=4 from the embedded policy (SD off, temperature 1). For each
method the policy trainer step runs with and without `capture_layers` on copies of the same policy
(alternating, `--repeats` times; the median is kept), then `OnlineDrafterTrainer.step` on the captured
micro-batches. Prints one JSON line per method.

    python benchmarks/online_drafter_cost.py [--repeats 3] [--prompts 16]
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def main() -> None:
    import torch

    from specrl import LLM, SamplingParams, SpecConfig
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    from specrl.train.config import AlgorithmConfig, OptimConfig
    from specrl.train.drafter_data import default_prompts
    from specrl.train.online_drafter import OnlineDrafterConfig, OnlineDrafterTrainer
    from specrl.train.trainer import PolicyTrainer, collate

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(1)
    policy = load_model(default_policy_path())
    outs = LLM(policy, max_num_seqs=64).generate(default_prompts(args.prompts),
                                                 SamplingParams(n=4, temperature=1.0, max_tokens=256, seed=0))
    samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs if c.token_ids]
    batch = collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                    torch.linspace(-1, 1, len(samples)), pad_id=0)

    def trainer(model):
        return PolicyTrainer(model, AlgorithmConfig(), OptimConfig(warmup_steps=0, micro_batch_size=16),
                             total_steps=100, temperature=1.0, norm_len=256)

    for method in ("eagle3", "draft_model", "mtp"):
        online = OnlineDrafterTrainer.from_spec(SpecConfig(method=method, draft_model="scratch"), policy,
                                                OnlineDrafterConfig())
        plain, capt, drafter = [], [], []
        for _ in range(args.repeats):
            a, b = trainer(copy.deepcopy(policy)), trainer(copy.deepcopy(policy))
            b.capture_layers = online.capture_layers
            plain.append(timed(lambda: a.step(batch)))
            capt.append(timed(lambda: b.step(batch)))
            drafter.append(timed(lambda: online.step(b.captured)))
        med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
        print(json.dumps({
            "method": method, "rows": batch.num_rows, "response_tokens": int(batch.mask.sum()),
            "capture_overhead_cpu": round(med(capt, 0) / med(plain, 0), 3),
            "capture_overhead_wall": round(med(capt, 1) / med(plain, 1), 3),
            "policy_step_cpu_s": round(med(plain, 0), 2), "drafter_step_cpu_s": round(med(drafter, 0), 2),
            "drafter_over_policy_step": round(med(drafter, 0) / med(plain, 0), 3)}))


if __name__ == "__main__":
    main()
