"""The in-process rollout backend: an `LLM` with its own copy of the policy, behind the seam.

The engine holds a separate model so that an optimizer step can never change weights under a running
generation; each new policy version is copied in place into it (MTP modules trained with the policy travel
with it, since they are part of its state dict).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import torch

from ..engine import LLM, RequestOutput, SamplingParams
from ..engine.drafting import has_state
from ..spec.weights import check_fits, drafter_module, drafter_version, load_drafter_weights
from ..train.config import TrainConfig
from .seam import NamedTensors, register_backend


class LocalBackend:
    """Drafter weights that arrive while a generate() runs (from another thread, or from long-tail work)
    are swapped in between two engine steps: no restart, no re-prefill of the policy."""

    def __init__(self, llm: LLM):
        self.llm = llm
        self.weights_version = 0
        self._cancelled = False
        self._lock = threading.Lock()
        self._generating = False
        self._pending_drafter: tuple[dict, int] | None = None
        self._idle: tuple[Callable[[], None], int] | None = None  # (work, run it at most this many running)
        self._idle_done = True  # the idle work of the running generate() already ran

    @property
    def drafter_version(self) -> int:
        return drafter_version(self.llm.drafter)

    def generate(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[RequestOutput]:
        self.llm.should_stop = lambda: self._cancelled
        self.llm.between_steps = self._between_steps
        with self._lock:
            self._generating = True
        self._idle_done = False
        try:
            return self.llm.generate(prompts, params)
        finally:
            with self._lock:
                self._generating = False
            self.llm.should_stop = self.llm.between_steps = None
            self._swap_pending()

    def set_idle_work(self, work: Callable[[], None] | None, max_running: int = 8) -> None:
        """In-process only: `work()` runs once per generate(), between engine steps, as soon as at most
        `max_running` sequences are left unfinished (the long tail, TLT's idle capacity)."""
        self._idle = None if work is None else (work, max_running)

    def _between_steps(self, unfinished: int) -> None:
        idle = self._idle
        if idle is not None and unfinished <= idle[1] and not self._idle_done:
            self._idle_done = True
            idle[0]()
        self._swap_pending()

    def _swap_pending(self) -> None:
        if self._pending_drafter is None:  # the common case, every engine step: no lock taken
            return
        with self._lock:
            pending, self._pending_drafter = self._pending_drafter, None
        if pending is not None:
            load_drafter_weights(self.llm.drafter, pending[0].items(), pending[1])

    @torch.no_grad()
    def update_weights(self, weights: NamedTensors, version: int) -> None:
        self.llm.update_weights(dict(weights))
        self.weights_version = version

    def update_drafter(self, weights: NamedTensors, version: int) -> None:
        """Checked now (a misfit is refused and the old drafter keeps serving); applied now when idle, else
        between the running generate()'s next two engine steps."""
        named = {k: v.detach().clone() for k, v in weights}
        check_fits(drafter_module(self.llm.drafter).state_dict(), named)
        with self._lock:
            self._pending_drafter = (named, version)
            generating = self._generating
        if not generating:
            self._swap_pending()

    def stats(self) -> dict:
        return dict(self.llm.stats)

    def reset_stats(self) -> None:
        self.llm.reset_stats()

    def set_trace_tags(self, tags: dict) -> None:
        self.llm.tracer.tags = dict(tags)

    def cancel(self) -> None:
        self._cancelled = True

    def drafter_state(self) -> dict | None:
        return self.llm.drafter.state_dict() if has_state(self.llm.drafter) else None

    def load_drafter_state(self, state: dict) -> None:
        if not has_state(self.llm.drafter):
            raise ValueError(f"the checkpoint holds drafter state but the engine's drafter "
                             f"({self.llm.spec.method!r}) keeps none: resume with the run's own rollout.spec")
        self.llm.drafter.load_state_dict(state)

    def close(self) -> None:
        self.llm.tracer.close()


@register_backend("local")
def local_backend(model_dir: str | Path, cfg: TrainConfig, trace_path: Path | None = None) -> LocalBackend:
    """An engine over the checkpoint in `model_dir` (the run's starting weights), as `cfg.rollout` asks."""
    ro = cfg.rollout
    # rollout.dtype: the engine's own copy may be smaller than the trainer's (a bf16 engine for an fp32 policy)
    llm = LLM(str(model_dir), device=cfg.device, dtype=ro.dtype or cfg.dtype, spec=ro.spec, max_num_seqs=ro.max_num_seqs,
              max_model_len=ro.max_model_len, kv_cache_memory=ro.kv_cache_memory,
              memory_utilization=ro.memory_utilization, seed=cfg.seed, trace_path=str(trace_path) if trace_path else None)
    return LocalBackend(llm)
