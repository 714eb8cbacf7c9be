"""Cost of online drafter training on the embedded policy.

Default part: the capture's overhead on the policy trainer's step (same process, interleaved, process CPU
time and wall clock), and the drafter step's own cost over the policy step and over rollout (EAGLE-3 SD,
shipped head) + policy step, i.e. what `after_step` adds to an RL step, in CPU seconds (which the machine's
other load changes little). One fixed batch for every variant.

Rollouts: 8 training-split prompts x n=8 from the embedded policy (temperature 1), as `specrl train` with
rollout.prompts_per_step=8 samples them. For each
method the policy trainer step runs with and without the drafter's `forward_hook` on copies of the same policy
(alternating, `--repeats` times; the median is kept), then `OnlineDrafterTrainer.step` on the captured
micro-batches. Prints one JSON line per method and sample_fraction.

    python experiments/online_drafter_cost.py [--repeats 3] [--prompts 8] [--methods eagle3] [--fractions 1,0.25]
        [--zero-share 0.43]

`--schedules OUT`: the cost of each `rollout.drafter.schedule` on the RL step. `specrl train` runs of the
embedded task with online EAGLE-3 (shipped head), all started at once (one torch thread each, async 1+1)
so that they share the machine's load: a frozen head in the sync and in the async pipeline, after_step,
long_tail, beside_trainer, and after_step with `sample_fraction=1` (every trajectory). Prints
one JSON line per run (mean step and drafter time over steps 2..N) with its step time over its frozen
baseline (same pipeline mode), and the whole run's CPU seconds over the baseline's (the added work, which
the machine's other load does not change; it includes loading and two short evaluations, so it
understates the drafter's share of a step a little; the runs' trajectories differ once their drafters
do, which moves their work by several percent), and writes OUT/schedules.jsonl. A set of finished runs
in OUT (with its run_cpu_s.json) is reused.

    python experiments/online_drafter_cost.py --schedules runs/sched --steps 6 [key=value ...]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


SCHEDULE_RUNS = {  # name: (overrides, the frozen run it is compared with)
    "frozen": ([], "frozen"),
    "after_step": (["rollout.drafter.online=true", "rollout.drafter.schedule=after_step"], "frozen"),
    "after_step_all_rows": (["rollout.drafter.online=true", "rollout.drafter.schedule=after_step",
                               "rollout.drafter.sample_fraction=1.0"], "frozen"),
    "long_tail": (["rollout.drafter.online=true", "rollout.drafter.schedule=long_tail"], "frozen"),
    "frozen_async": (["pipeline.mode=async"], "frozen_async"),
    "beside_trainer": (["rollout.drafter.online=true", "rollout.drafter.schedule=beside_trainer",
                        "pipeline.mode=async"], "frozen_async"),
}
ASYNC_THREADS = ["pipeline.rollout_threads=1", "pipeline.train_threads=1"]


def schedules(out: Path, steps: int, extra: list[str]) -> None:
    import subprocess

    from specrl.pipeline.run_dir import read_jsonl
    base = ["rollout.spec.method=eagle3", "rollout.prompts_per_step=8", "rollout.n=8", f"schedule.max_steps={steps}",
            "schedule.eval_every=0", "data.eval_size=20", "num_threads=1", "tensorboard=false", "plots=false",
            "progress=false", *extra]
    procs, cpu_file = {}, out / "run_cpu_s.json"
    for name, (args, _) in SCHEDULE_RUNS.items() if not cpu_file.is_file() else ():  # reuse a finished set
        threads = ASYNC_THREADS if "pipeline.mode=async" in args else []
        cmd = [sys.executable, "-m", "specrl", "train", *base, *args, *threads, f"out_dir={out / name}"]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    cpu = json.loads(cpu_file.read_text()) if cpu_file.is_file() else {}
    for name, p in procs.items():
        _, status, usage = os.wait4(p.pid, 0)  # the run's own CPU seconds (all its threads): load-independent
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"run {name} failed (exit {os.waitstatus_to_exitcode(status)}): rerun it alone")
        cpu[name] = usage.ru_utime + usage.ru_stime
    cpu_file.write_text(json.dumps(cpu))
    rows = {name: read_jsonl(out / name / "metrics.jsonl")[1:] for name in SCHEDULE_RUNS}  # step 1: warm-up
    mean = lambda name, key: statistics.fmean(r.get(key, 0.0) for r in rows[name])  # noqa: E731
    with open(out / "schedules.jsonl", "w") as f:
        for name, (_, ref) in SCHEDULE_RUNS.items():
            line = {"run": name, "steps_measured": len(rows[name]), "step_s": round(mean(name, "step_s"), 2),
                    "drafter_train_s": round(mean(name, "drafter_train_s"), 2),
                    "drafter_share_of_step": round(mean(name, "drafter_train_s") / mean(name, "step_s"), 3),
                    "acceptance_length": round(mean(name, "acceptance_length"), 3), "baseline": ref,
                    "step_over_baseline": round(mean(name, "step_s") / mean(ref, "step_s"), 3),
                    "step_over_frozen_sync": round(mean(name, "step_s") / mean("frozen", "step_s"), 3),
                    "run_cpu_s": round(cpu[name], 1), "cpu_over_baseline": round(cpu[name] / cpu[ref], 3)}
            print(json.dumps(line))
            f.write(json.dumps(line) + "\n")


def main() -> None:
    import torch

    from specrl import LLM, SamplingParams, SpecConfig
    from specrl.drafters.training.data import default_prompts
    from specrl.drafters.training.online import OnlineDrafterTrainer
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    from specrl.train.config import AlgorithmConfig, OptimConfig
    from specrl.train.config import DrafterConfig
    from specrl.train.trainer import PolicyTrainer, collate

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--methods", default="eagle3,draft_model,mtp")
    ap.add_argument("--fractions", default="1.0,0.25", help="sample_fraction values of the drafter update")
    ap.add_argument("--schedules", metavar="OUT", help="measure each schedule's cost on the RL step instead")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--zero-share", type=float, default=0.0,
                    help="share of the n-sample groups whose advantages are zero (GRPO groups that scored alike), "
                    "which the update skips; the hook still sees them through a forward without gradients")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    if args.schedules:
        return schedules(Path(args.schedules), args.steps, args.overrides)
    torch.set_num_threads(1)
    policy = load_model(default_policy_path())
    llm = LLM(policy, max_num_seqs=64, spec=SpecConfig(method="eagle3"))  # the rollout: shipped head, frozen
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=200, seed=0)
    rollout = [timed(lambda: llm.generate(default_prompts(args.prompts), params)) for _ in range(args.repeats)]
    outs = llm.generate(default_prompts(args.prompts), params)
    samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs if c.token_ids]
    advantages = torch.linspace(-1, 1, len(samples))
    advantages[:round(args.zero_share * len(samples) / args.n) * args.n] = 0.0  # whole groups scored alike
    batch = collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                    advantages, pad_id=0)

    def trainer(model):
        return PolicyTrainer(model, AlgorithmConfig(), OptimConfig(warmup_steps=0, micro_batch_size=16),
                             total_steps=100, temperature=1.0, norm_len=256)

    for method, fraction in [(m, float(f)) for m in args.methods.split(",") for f in args.fractions.split(",")]:
        online = OnlineDrafterTrainer.from_spec(SpecConfig(method=method, draft_model="scratch"), policy,
                                                DrafterConfig(sample_fraction=fraction))
        plain, capt, drafter = [], [], []
        for _ in range(args.repeats):
            a, b = trainer(copy.deepcopy(policy)), trainer(copy.deepcopy(policy))
            b.forward_hook = capture = online.forward_hook()
            plain.append(timed(lambda: a.step(batch)))
            capt.append(timed(lambda: b.step(batch)))
            drafter.append(timed(lambda: online.step(capture.batches)))
        med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
        print(json.dumps({
            "method": method, "sample_fraction": fraction, "rows": batch.num_rows, "zero_share": args.zero_share,
            "response_tokens": int(batch.mask.sum()),
            "capture_overhead_cpu": round(med(capt, 0) / med(plain, 0), 3),
            "capture_overhead_wall": round(med(capt, 1) / med(plain, 1), 3),
            "policy_step_cpu_s": round(med(plain, 0), 2), "drafter_step_cpu_s": round(med(drafter, 0), 2),
            "drafter_over_policy_step": round(med(drafter, 0) / med(plain, 0), 3),
            "rollout_cpu_s": round(med(rollout, 0), 2),  # after_step adds the drafter step to rollout + update
            "drafter_over_rl_step": round(med(drafter, 0) / (med(rollout, 0) + med(plain, 0)), 3)}))


if __name__ == "__main__":
    main()
