"""The in-process rollout backend: an `LLM` behind the seam, with its own copy of the policy (which an
optimizer step can never change under a running generation), or the trainer's own model where
`run._shares_policy` allows it (a sync run never generates while it trains, so nothing is copied at a sync).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import torch

from ..drafters.weights import check_fits, drafter_module, drafter_version, load_drafter_weights
from ..engine import LLM, RequestOutput, SamplingParams
from ..model import CausalLM
from ..config.run import TrainConfig
from .seam import NamedTensors


class LocalBackend:
    """Weights that arrive while a generate() runs (from another thread, or from long-tail work) wait in a
    slot; the generating thread applies them between two engine steps. Drafter weights: no restart, no
    re-prefill. Policy weights with `inflight=True`: the running sequences continue on the new weights
    (their cache is recomputed, LLM.update_weights), so a long sequence does not hold the old policy; with
    `inflight=False` they wait for the end of the generate() call, so every sequence has one version."""

    def __init__(self, llm: LLM, inflight: bool = False):
        self.llm, self.inflight = llm, inflight
        self._cancelled = self._generating = False
        self._lock = threading.Lock()
        self._pending_drafter = self._pending_weights = None  # (weights, version) waiting for an engine step
        self._newest = 0  # the newest version applied or waiting: an older one arriving late is ignored
        self._idle: tuple[Callable[[], None], int] | None = None  # (work, run it at most this many running)
        self._idle_done = True  # the idle work of the running generate() already ran
        self._served = 0  # the drafter version the last generate() started with

    @property
    def weights_version(self) -> int:
        """The version of the weights the engine holds now (a newer one may be waiting for a step)."""
        return self.llm.weights_version

    @weights_version.setter
    def weights_version(self, version: int) -> None:
        self.llm.weights_version = self._newest = version

    @property
    def drafter_version(self) -> int:
        return drafter_version(self.llm.drafter)

    @property
    def refits_drafter(self) -> bool:
        """Whether the engine runs a model drafter (eagle3, draft_model, mtp, or auto's) an online one replaces."""
        try:
            drafter_module(self.llm.drafter)
        except TypeError:
            return False
        return True

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        self.llm.should_stop = lambda: self._cancelled
        self.llm.between_steps = self._between_steps
        with self._lock:
            self._generating = True
        self._idle_done = False
        self._served = self.drafter_version
        try:
            return self.llm.generate(prompts, params)
        finally:
            self.llm.should_stop = self.llm.between_steps = None
            with self._lock:  # what is still waiting lands before another generate() or update can start
                self._generating = False
                self._apply(*self._take(weights=True))

    def set_idle_work(self, work: Callable[[], None] | None, max_running: int = 8) -> None:
        self._idle = None if work is None else (work, max_running)

    def _between_steps(self, unfinished: int) -> None:
        idle = self._idle
        if idle is not None and unfinished <= idle[1] and not self._idle_done:
            self._idle_done = True
            idle[0]()
        if self._pending_drafter is None and (self._pending_weights is None or not self.inflight):
            return  # the common case, every engine step: no lock taken
        with self._lock:
            pending = self._take(weights=self.inflight)
        self._apply(*pending)  # the generating thread: no other thread touches the engine meanwhile

    def _take(self, weights: bool) -> tuple:
        """(drafter, policy) weights waiting, or None each; call with the lock held."""
        drafter, self._pending_drafter = self._pending_drafter, None
        policy = self._pending_weights if weights else None
        if weights:
            self._pending_weights = None
        return drafter, policy

    def _apply(self, drafter: tuple[dict, int] | None, policy: tuple[dict, int] | None) -> None:
        if drafter is not None:  # checked by update_drafter when it arrived
            load_drafter_weights(self.llm.drafter, drafter[0].items(), drafter[1], checked=True)
        if policy is not None:  # between two engine steps, LLM recomputes the running sequences' cache
            self.llm.update_weights(policy[0], policy[1])

    @torch.no_grad()
    def update_weights(self, weights: NamedTensors, version: int) -> None:
        """Applied now when no generate() runs; else kept (a copy) until the next engine step (`inflight`)
        or the end of the call. A version older than one already applied or waiting is ignored: two
        senders (a broadcast and an actor restart) may race, and weights never go back."""
        with self._lock:  # held while applying, so no generate() starts on half-copied weights
            if version < self._newest:
                return
            self._newest = version
            if self._generating:  # a copy: the sender may change its tensors after this
                self._pending_weights = ({k: v.detach().clone() for k, v in weights}, version)
            else:
                self._pending_weights = None
                self._apply(None, (dict(weights), version))

    def update_drafter(self, weights: NamedTensors, version: int) -> None:
        """Checked now; applied now when idle, else between the running generate()'s next two engine steps."""
        named = {k: v.detach() for k, v in weights}
        check_fits(drafter_module(self.llm.drafter).state_dict(), named)
        with self._lock:
            if self._generating:  # kept until the next engine step: a copy, the sender may change its tensors
                self._pending_drafter = ({k: v.clone() for k, v in named.items()}, version)
            else:
                self._apply((named, version), None)

    def disable_speculation(self) -> None:
        """rollout.audit=fallback: no more drafts. The engine reads the switch once per step, so a step
        already running finishes as it started; the drafters and the strategy stay (their state, for checkpoints)."""
        self.llm.engine.speculate = False

    def stats(self) -> dict:
        """The engine's counters, with `drafter_served`: the drafter version the last generate() started with
        (a newer one may land between its engine steps: async, long_tail)."""
        return {**self.llm.stats, "drafter_served": self._served}

    def reset_stats(self) -> None:
        self.llm.reset_stats()

    def set_trace_tags(self, tags: dict) -> None:
        self.llm.engine.tracer.tags = dict(tags)

    def cancel(self) -> None:
        self._cancelled = True

    def drafter_state(self) -> dict | None:
        return self.llm.drafter_state()

    def load_drafter_state(self, state: dict) -> None:
        self.llm.load_drafter_state(state)

    def close(self) -> None:
        self.llm.engine.tracer.close()


def local_backend(model_dir: str | Path, cfg: TrainConfig, trace_path: Path | None = None,
                  policy: CausalLM | None = None) -> LocalBackend:
    """An engine over the checkpoint in `model_dir`, as `cfg.rollout` asks; over `policy` itself when given."""
    ro = cfg.rollout
    # rollout.dtype: the engine's own copy may be smaller than the trainer's (a bf16 engine for an fp32 policy)
    llm = LLM(policy if policy is not None else str(model_dir), device=cfg.device, dtype=ro.dtype or cfg.dtype,
              spec=ro.spec, max_num_seqs=ro.max_num_seqs, max_model_len=ro.max_model_len,
              kv_cache_memory=ro.kv_cache_memory, memory_utilization=ro.memory_utilization, seed=cfg.seed,
              trace_path=str(trace_path) if trace_path else None)
    return LocalBackend(llm, inflight=cfg.pipeline.inflight_updates)
