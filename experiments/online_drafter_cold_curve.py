"""How fast a scratch EAGLE-3 head learns the embedded policy, per drafter setting, without RL noise.

Samples 34 rollout batches of 4 prompts x n=8 (an RL step's worth each) from the shipped policy, captures
them with the policy trainer's forward (as online training does), then for each setting trains a fresh head
on batches 1..30 in order (one `OnlineDrafterTrainer.step` per batch, as an RL step would; `window` > 1 also
replays the previous batches, `epochs` > 1 repeats the step) and reports the held-out first-draft KL and
accepted mass on batches 31-34 after steps 10, 20 and 30, next to the shipped (offline-trained) head's.
Settings are JSON objects of `rollout.drafter` keys plus `layers`, `window`, `epochs`, `decay` (linear LR
decay to 5% over the 30 steps); {"from": DIR} only scores the EAGLE-3 head saved in DIR (e.g. one that
`specrl train-drafter` trained offline on as many tokens). One thread; CPU seconds of the drafter updates.

    python experiments/online_drafter_cold_curve.py '{"lr": 1e-3, "sample_fraction": 1.0}' \\
        '{"lr": 1e-3, "sample_fraction": 1.0, "updates_per_step": 4}'
"""
from __future__ import annotations

import argparse
import copy
import json
import time


def captured(policy, batches: int, prompts_per_batch: int = 4, layers: tuple[int, ...] | None = None) -> list:
    """`batches` rollout batches of prompts_per_batch x n=8 from `policy`, each captured by a policy trainer
    step at `layers` (default: every layer, what any head needs): one list of DrafterBatch per batch."""
    import torch

    from specrl import LLM, SamplingParams
    from specrl.drafters.training.capture import Capture
    from specrl.drafters.training.data import default_prompts
    from specrl.train.config import AlgorithmConfig, OptimConfig
    from specrl.train.trainer import PolicyTrainer, collate
    k = prompts_per_batch
    llm, prompts, out = LLM(policy, max_num_seqs=64), default_prompts(k * batches), []
    for i in range(batches):
        outs = llm.generate(prompts[k * i:k * i + k], SamplingParams(n=8, temperature=1.0, max_tokens=200, seed=i))
        samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs if c.token_ids]
        batch = collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                        torch.zeros(len(samples)), pad_id=0)
        trainer = PolicyTrainer(copy.deepcopy(policy), AlgorithmConfig(), OptimConfig(warmup_steps=0),
                                total_steps=100, temperature=1.0, norm_len=200)
        trainer.forward_hook = capture = Capture(layers or tuple(range(policy.config.num_layers)))
        trainer.step(batch)
        out.append(capture.batches)
    return out


def main() -> None:
    import torch

    from specrl import SpecConfig
    from specrl.drafters.eagle3.head import Eagle3Config, init_head
    from specrl.drafters.training.online import OnlineDrafterTrainer
    from specrl.model import load_model
    from specrl.optim import OptimSettings
    from specrl.tasks import default_policy_path
    from specrl.train.config import DrafterConfig

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("settings", nargs="+", help="JSON objects, one per setting")
    args = ap.parse_args()
    torch.set_num_threads(1)
    policy = load_model(default_policy_path())
    data = captured(policy, 34)
    train, held = data[:30], [mb for b in data[30:] for mb in b]

    def evaluate(online) -> list[float]:
        with torch.no_grad():
            denom = sum(b.num_tokens for b in held)
            return [round(sum(online.loss(mb, None, denom)[i] for mb in held), 3) for i in (1, 2)]

    shipped = OnlineDrafterTrainer.from_spec(SpecConfig(method="eagle3"), policy, DrafterConfig())
    print(json.dumps({"run": "shipped_head", "held_out_kl_mass": evaluate(shipped)}), flush=True)
    for text in args.settings:
        kw = json.loads(text)
        setting = dict(kw)
        if "from" in kw:
            head = OnlineDrafterTrainer.from_spec(SpecConfig(method="eagle3", draft_model=kw["from"]), policy,
                                                  DrafterConfig())
            print(json.dumps({"run": setting, "held_out_kl_mass": evaluate(head)}), flush=True)
            continue
        layers, inter = kw.pop("layers", None), kw.pop("intermediate_size", None)
        window, epochs, decay = kw.pop("window", 1), kw.pop("epochs", 1), kw.pop("decay", False)
        if "lr" in kw:  # the drafter's optimizer settings are DrafterConfig.optim
            kw["optim"] = OptimSettings(lr=kw.pop("lr"))
        cfg = DrafterConfig(**kw)
        if layers or inter:
            head = init_head(Eagle3Config.for_target(policy.config, tuple(layers) if layers else None, inter))
            online = OnlineDrafterTrainer(head, policy, cfg)
        else:
            online = OnlineDrafterTrainer.from_spec(SpecConfig(method="eagle3", draft_model="scratch"), policy, cfg)
        curve, t0 = [], time.process_time()
        for step in range(1, len(train) + 1):
            if decay:
                for group in online.optimizer.param_groups:
                    group["lr"] = cfg.optim.lr * max(0.05, 1 - (step - 1) / len(train))
            buffer = [mb for b in train[max(0, step - window):step] for mb in b]
            for _ in range(epochs):  # the rows the capture would keep, drawn per step
                online.step(online.subsample(buffer))
            if step % 10 == 0:
                curve.append((step, *evaluate(online)))
        print(json.dumps({"run": setting, "step_kl_mass": curve, "cpu_s": round(time.process_time() - t0, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
