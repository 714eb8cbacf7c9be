"""Rollout across data-parallel replicas: assign sequences, simulate the replicas that matter."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specrl.sim.des import Engine, ReplicaTrace, SDSetting, simulate_replica

TOP_REPLICAS = 8  # heaviest replicas simulated exactly (they set the step's rollout time)
SAMPLE_REPLICAS = 16  # random replicas simulated for cluster averages


@dataclass(frozen=True)
class RolloutResult:
    time_s: float  # slowest replica
    mean_replica_s: float  # average replica busy time
    idle_frac: float  # batch-slot capacity left unused during rollout (tail + waiting replicas)
    tail_frac: float  # share of rollout wall time spent on the last 10% of tokens
    mean_batch: float  # time-weighted active sequences per replica
    spec_frac: float  # share of iterations that ran SD
    iterations: int  # iterations of the slowest replica


def pick_replicas(groups: list[np.ndarray], rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """All replicas when few; else the heaviest by longest sequence and by total tokens (which bound
    the max) plus a uniform sample (which estimates the averages)."""
    r = len(groups)
    if r <= TOP_REPLICAS * 2 + SAMPLE_REPLICAS:
        return list(range(r)), list(range(r))
    longest = np.argsort([-g.max() for g in groups])[:TOP_REPLICAS]
    heaviest = np.argsort([-g.sum() for g in groups])[:TOP_REPLICAS]
    sample = rng.choice(r, SAMPLE_REPLICAS, replace=False)
    return sorted(set(longest) | set(heaviest) | set(sample)), sorted(sample.tolist())


def simulate_rollout(engine: Engine, lengths: np.ndarray, prompt_len: int, replicas: int,
                     slots: int, sd: SDSetting | None, seed: int, steps: int = 1,
                     prompt_share: float = 1.0) -> RolloutResult:
    """Generate `lengths` [N] on `replicas` engines; `steps` > 1 queues several steps' sequences
    back to back (async streaming) and reports time per step. `prompt_share`: sequences per prefilled
    prompt (see des.simulate_replica)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(lengths.size)
    used = min(replicas, lengths.size)  # more replicas than sequences: the rest sit idle
    groups = np.array_split(lengths[order], used)  # round-robin-like DP assignment
    chosen, sample = pick_replicas(groups, rng)
    traces: dict[int, ReplicaTrace] = {}
    for i in chosen:  # identical per-replica seeds make SD on/off runs share all randomness
        traces[i] = simulate_replica(engine, groups[i], prompt_len, slots, sd,
                                     np.random.default_rng([seed, i]), prompt_share)
    time_s = max(tr.time_s for tr in traces.values())
    samp = [traces[i] for i in sample]
    busy = sum(tr.busy_slot_s for tr in samp)
    iters = sum(tr.t.size for tr in samp)
    return RolloutResult(
        time_s=time_s / steps,
        mean_replica_s=float(np.mean([tr.time_s for tr in samp])) / steps,
        idle_frac=1.0 - busy * used / replicas / (len(samp) * time_s * min(slots, groups[0].size)),
        tail_frac=_tail_frac(samp, time_s),
        mean_batch=busy / max(sum(tr.time_s for tr in samp), 1e-12),
        spec_frac=sum(int(tr.spec.sum()) for tr in samp) / max(iters, 1),
        iterations=max(tr.t.size for tr in traces.values()))


def _tail_frac(traces: list[ReplicaTrace], time_s: float, share: float = 0.9) -> float:
    """1 - (time at which the sampled replicas together emitted `share` of their tokens) / time."""
    ends = [np.cumsum(tr.t) for tr in traces]  # per replica [J]
    done = [np.concatenate([[0.0], np.cumsum(tr.emitted)]) for tr in traces]  # [J+1]
    target = share * sum(d[-1] for d in done)
    lo, hi = 0.0, time_s
    for _ in range(40):  # bisection on wall time: tokens emitted by `mid` is monotone
        mid = (lo + hi) / 2
        emitted = sum(d[np.searchsorted(e, mid, side="right")] for e, d in zip(ends, done))
        lo, hi = (mid, hi) if emitted < target else (lo, mid)
    return float(1.0 - hi / time_s)
