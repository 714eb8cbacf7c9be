"""VllmBackend: a `vllm.LLM` behind the seam (the RolloutBackend protocol, as pipeline/local.py's).

generate() steps vLLM's engine itself, so cancel() takes effect between two engine steps and a dead engine
process stops the run cleanly (RunStopped). vLLM's synchronous client waits forever for the output of an
engine process that was killed, so a watcher thread (`watch_engine`) wakes it. vLLM's engine is not
thread-safe, so weights that arrive while a generate() runs wait until it returns: every sequence of a call
is sampled by one policy version and drafted by one drafter version (an online drafter published mid-call by
the async driver is queued and reloaded at the generation boundary, never refused), and `stats()` names the
drafter version that served the call (`drafter_served`).
"""
from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from ...engine.llm import GenerationCancelled
from ...errors import ConfigError, raise_if_terminating
from ..seam import NamedTensors, RunStopped
from .refit import RefitDir, checkpoint_layout, fitted
from .sampling import to_specrl, to_vllm

SPEC_COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}  # vLLM's metric -> the stats key
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def watch_engine(client, closing: threading.Event) -> list:
    """Wakes a reader blocked on `client`'s outputs with EngineDeadError when an engine process exits before
    `closing` is set, and stops the processes that engine started (its workers outlive it) -> the engine's
    processes, for close() to reap. A client without engine processes of its own (vLLM's in-process one)
    needs no watcher."""
    from multiprocessing.connection import wait

    from vllm.v1.engine.exceptions import EngineDeadError

    from .procs import engine_processes, reap  # psutil: installed with vLLM, not with the core
    procs = engine_processes(client)
    if not procs:
        return procs
    sentinels = [p.sentinel for p in client.resources.engine_manager.processes]

    def watch() -> None:
        wait(sentinels)  # returns when the first one exits
        if not closing.is_set():
            client.outputs_queue.put_nowait(EngineDeadError(suppress_context=True))
            reap(procs)
    threading.Thread(target=watch, daemon=True, name="specrl-vllm-engine-watch").start()
    return procs


class VllmBackend:
    def __init__(self, llm, policy_dir: Path, eos: frozenset[int], refit_root: str,
                 work_dir: tempfile.TemporaryDirectory, drafter_tensors=None,
                 sampled_spec_refusal: str | None = None):
        self.llm, self.eos = llm, eos
        self._refusal = sampled_spec_refusal  # set: this engine drafts, and its sampled SD is not exact
        self.layout = checkpoint_layout(policy_dir)
        self.refit = RefitDir(refit_root, policy_dir)
        self.drafter_refit = RefitDir(refit_root, policy_dir)
        self._work_dir = work_dir  # on-the-fly drafter exports; removed on close
        self._drafter_tensors = drafter_tensors  # named weights -> tensors vLLM's drafter loads; None: no weights
        self.weights_version = self.drafter_version = self._calls = 0
        self._cancelled = self._generating = False
        self._dead = False  # the engine process exited: nothing more can run on it
        self._lock = threading.Lock()
        self._pending: tuple[dict, int] | None = None  # policy weights waiting for the generation boundary
        self._pending_drafter: tuple[dict, int] | None = None  # drafter weights waiting for it
        self._served = 0  # the drafter version of the last generate() call
        self._transfer_s = 0.0  # the last policy refit's seconds: the weights the next rollout runs on
        self.reset_stats()
        self._closing = threading.Event()
        self._procs = watch_engine(llm.llm_engine.engine_core, self._closing)
        from .procs import Guard
        self._guard = Guard(self._procs) if self._procs else None  # if this process dies without close()

    def generate(self, prompts: list[list[int]], params) -> list:
        if len(prompts) != len(params):
            raise ValueError(f"got {len(params)} SamplingParams for {len(prompts)} prompts: one per prompt")
        if self._refusal is not None and any(sp.temperature > 0 for sp in params):
            raise ConfigError(self._refusal)  # greedy SD stays exact: its tokens do not read the temperatures
        from vllm.v1.engine.exceptions import EngineDeadError
        with self._lock:
            self._generating = True
            self._served = self.drafter_version
        try:
            self._calls += 1
            ids = [f"{self._calls}-{i}" for i in range(len(prompts))]
            mapped = [to_vllm(sp, self.eos) for sp in params]  # every refusal before any request is queued
            done = self._run(self.llm.llm_engine, ids, prompts, mapped)
            outs = [to_specrl(done[rid], i, sp, self.eos, self.weights_version)
                    for i, (rid, sp) in enumerate(zip(ids, params))]
        except EngineDeadError as e:
            self._dead = True
            raise RunStopped(f"the vLLM engine process died mid-rollout ({e}); resume the run from its last "
                             "checkpoint (specrl train resume=RUN_DIR)") from e
        finally:
            with self._lock:
                self._generating = False
                pending, self._pending = self._pending, None
                drafter, self._pending_drafter = self._pending_drafter, None
            if not self._dead:  # the generation boundary: what arrived during the call lands before the next
                if drafter is not None:
                    self._reload_drafter(*drafter)
                if pending is not None:
                    self._reload(*pending)
        self._own["generated_tokens"] += sum(len(c.token_ids) for r in outs for c in r.outputs)
        return outs

    def _run(self, engine, ids: list[str], prompts, mapped) -> dict:
        """Queues the requests and steps the engine until all are done -> request id: finished output."""
        for n, (rid, prompt, sp) in enumerate(zip(ids, prompts, mapped)):
            try:
                engine.add_request(rid, {"prompt_token_ids": [int(t) for t in prompt]}, sp)
            except Exception:  # e.g. a prompt longer than the context: the queued ones must not run later
                engine.abort_request(ids[:n])
                raise
        done: dict[str, object] = {}
        while engine.has_unfinished_requests():
            raise_if_terminating()  # the queued requests die with the engine at close()
            if self._cancelled:
                engine.abort_request([r for r in ids if r not in done])
                raise GenerationCancelled("generate() was cancelled (VllmBackend.cancel)")
            for out in engine.step():
                if out.finished:
                    done[out.request_id] = out
            self._own["target_forwards"] += 1
        return done

    def update_weights(self, weights: NamedTensors, version: int) -> None:
        """Checked now (a misfit raises RefitError and the engine keeps its weights); reloaded now when no
        generate() runs, else when it returns. An older version than the engine's is ignored."""
        if version < self.weights_version:
            return
        tensors = fitted(weights, self.layout, "policy")
        with self._lock:
            if self._generating:  # a copy: the sender's optimizer may change its tensors before the call ends
                self._pending = ({k: v.clone() for k, v in tensors.items()}, version)
                return
        self._reload(tensors, version)

    def _reload(self, tensors: dict, version: int) -> None:
        t0 = time.perf_counter()
        path = self.refit.write(tensors)
        try:
            self.llm.collective_rpc("reload_policy", kwargs={"weights_path": str(path)})
        except Exception:
            self.refit.discard(path)
            raise
        self.refit.commit(path)
        self.weights_version = version
        self._transfer_s = time.perf_counter() - t0

    @property
    def refits_drafter(self) -> bool:
        """Whether this engine's drafter has weights an online drafter can replace (eagle3, draft_model)."""
        return self._drafter_tensors is not None

    def update_drafter(self, weights: NamedTensors, version: int) -> None:
        """New drafter weights, reloaded in place in vLLM's worker (specrl/pipeline/vllm/worker.py): now when no
        generate() runs, else queued (a copy) until it returns, since vLLM cannot reload between the engine
        steps of a running call from another thread. A misfit is refused before anything is queued; of two
        queued versions the newer wins, and an older version than the engine's is ignored."""
        if self._drafter_tensors is None:
            raise ValueError("this vLLM engine runs no drafter with weights (SD off, ngram or suffix): there is "
                             "nothing to refit; set rollout.spec.method to eagle3 or draft_model")
        tensors = self._drafter_tensors(weights)
        with self._lock:
            if version < self.drafter_version or (self._pending_drafter and version < self._pending_drafter[1]):
                return
            if self._generating:  # a copy: the sender's optimizer may change its tensors before the call ends
                self._pending_drafter = ({k: v.detach().clone() for k, v in tensors.items()}, version)
                return
        self._reload_drafter(tensors, version)

    def _reload_drafter(self, tensors: dict, version: int) -> None:
        path = self.drafter_refit.write(tensors, config={})
        try:
            self.llm.collective_rpc("reload_drafter", kwargs={"weights_path": str(path)})
        except Exception:
            self.drafter_refit.discard(path)
            raise
        self.drafter_refit.commit(path)
        self.drafter_version = version

    def _counters(self) -> dict:
        totals = {k: 0 for k in SPEC_COUNTERS.values()}
        per_pos: list[int] = []
        for m in self.llm.get_metrics():
            if m.name in SPEC_COUNTERS:
                totals[SPEC_COUNTERS[m.name]] += m.value
            if m.name == PER_POS:
                per_pos = [a + b for a, b in zip(per_pos, m.values)] if per_pos else list(m.values)
        return {**totals, "per_pos": per_pos}

    def stats(self) -> dict:
        now = self._counters()
        d = {k: now[k] - self._base[k] for k in SPEC_COUNTERS.values()}
        per_pos = [a - b for a, b in zip(now["per_pos"], self._base["per_pos"] or [0] * len(now["per_pos"]))]
        drafts = max(d["drafts"], 1)
        return {**self._own, **d, "acceptance_length": 1 + d["accepted_tokens"] / drafts,
                "acceptance_rate": d["accepted_tokens"] / max(d["draft_tokens"], 1),
                "acceptance_rate_per_pos": [a / drafts for a in per_pos], "weight_transfer_s": self._transfer_s,
                "drafter_served": self._served}

    def reset_stats(self) -> None:
        self._base = self._counters()
        self._own = {"generated_tokens": 0, "target_forwards": 0}

    def set_trace_tags(self, tags: dict) -> None:
        """No engine trace: vLLM's steps are not specrl's (its metrics are in stats())."""

    def cancel(self) -> None:
        self._cancelled = True

    def drafter_state(self) -> dict | None:
        return None  # vLLM's drafters keep no state across steps that a checkpoint must hold

    def load_drafter_state(self, state: dict) -> None:
        raise ValueError("the checkpoint holds drafter state (a specrl n-gram/suffix drafter's) that vLLM's drafter "
                         "cannot take: resume with pipeline.backend=local, or start a new run")

    def close(self) -> None:
        from .procs import reap, signals_deferred
        with signals_deferred():  # e.g. the SIGTERM that made us close must not cut the close short
            self._closing.set()
            try:
                self.llm.llm_engine.engine_core.shutdown()
            except ProcessLookupError:  # its shutdown kills the worker by pid; after a dead engine it may be gone
                if not self._dead:
                    raise
            finally:
                reap(self._procs)  # what vLLM's shutdown leaves: the workers of an engine core that died
                guard, self._guard = self._guard, None
                if guard is not None:
                    guard.release()
                self.refit.close()
                self.drafter_refit.close()
                self._work_dir.cleanup()
