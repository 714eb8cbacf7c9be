"""`rollout.drafter`: online training of the rollout engine's model drafter while the policy trains.

    specrl train rollout.spec.method=eagle3 rollout.drafter.online=true                 # from the shipped head
    specrl train rollout.spec.method=eagle3 rollout.spec.draft_model=scratch rollout.drafter.online=true

Schedules (where the drafter update runs; measured in the README, Results):
    after_step      after the policy update, on the data its forward captured (cost added to the step)
    long_tail       during the next rollout's long tail, between engine steps, once at most
                    `tail_max_running` sequences run (TLT's idle capacity); sync pipeline, in-process engine
    beside_trainer  async pipeline: on the trainer's side after each policy update, while the rollout
                    worker keeps generating
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import require

SCHEDULES = ("after_step", "long_tail", "beside_trainer")


@dataclass
class DrafterConfig:
    online: bool = False
    schedule: str = "after_step"
    tail_max_running: int = 8  # long_tail: train once this few sequences are still running
    lr: float = 3e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    kl_coef: float = 1.0  # forward KL(p || q) to the policy's distribution
    accept_coef: float = 0.0  # 1 - expected accepted mass sum_x min(p, q)
    reward_weighting: bool = False  # ReSpec: trajectories weighted by w(r), normalised and clipped
    reward_w_max: float = 2.0
    # AdamW steps per RL step; the kept trajectories are split among them (each update its own share)
    updates_per_step: int = 1
    ttt_steps: int = 3  # EAGLE-3 training-time-test unroll
    unroll_decay: float = 0.8  # weight decay^j of unroll step j (EAGLE-3 TTT steps, MTP depths)
    mtp_depths: int = 2  # MTP depths trained (depths past the stack reuse its last module)
    # share of each micro-batch's trajectories kept for the drafter, drawn when the policy's forward
    # captures them (the rest is never stored): the n samples of a prompt are near duplicates at a
    # low-entropy policy; 0.125 learns about as fast per update as 1.0
    # (benchmarks/online_drafter_sample_fraction.py) at 3.4% instead of 23% of an 8x8 RL step
    sample_fraction: float = 0.125
    # health alarm: acceptance below half of its recent average, or an engine drafter older than allowed
    alarm_window: int = 5
    alarm_max_lag: int = 1

    def validate(self) -> None:
        require(self.schedule in SCHEDULES, "schedule", self.schedule, f"one of {list(SCHEDULES)}")
        require(self.tail_max_running >= 1, "tail_max_running", self.tail_max_running, ">= 1")
        require(self.lr > 0, "lr", self.lr, "> 0")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        require(self.grad_clip > 0, "grad_clip", self.grad_clip, "> 0")
        require(self.reward_w_max >= 1, "reward_w_max", self.reward_w_max, ">= 1")
        require(0 < self.unroll_decay <= 1, "unroll_decay", self.unroll_decay, "in (0, 1]")
        require(self.kl_coef >= 0 and self.accept_coef >= 0 and self.kl_coef + self.accept_coef > 0, "kl_coef",
                self.kl_coef, ">= 0, with accept_coef >= 0 and not both 0")
        for key in ("updates_per_step", "ttt_steps", "mtp_depths", "alarm_window"):
            require(getattr(self, key) >= 1, key, getattr(self, key), ">= 1")
        require(0 < self.sample_fraction <= 1, "sample_fraction", self.sample_fraction, "in (0, 1]")
        require(self.alarm_max_lag >= 0, "alarm_max_lag", self.alarm_max_lag, ">= 0")
