"""`LLM`: the vLLM-shaped front of the rollout engine. Glue between scheduler, runner and drafter."""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Callable

import torch

from ..errors import UserError
from ..heap import TRIM_MIN_FREE, trim
from ..model import CausalLM, check_tokenizer_matches, load_model, load_text_tokenizer
from ..model.chat import is_conversation
from ..model.layers import skip_cudnn_attention
from ..model.packed import pack_linears
from ..model.precision import Precision, choose_dtype, engine_rows, parse_dtype
from ..model.tokenizer import TextTokenizer
from .adaptive import profile
from .drafting import Drafter, Stateful
from .engine import Engine
from .memory import DEFAULT_MEMORY_UTILIZATION, SPARE, check_dtype, memory_budget, plan_kv_cache, release_caches
from .methods import SpecConfig, is_adaptive
from .pool import Strategy, build_engine_drafting
from .runner import ModelRunner
from .sampler import SamplingParams, mix_seed
from .sequence import CompletionOutput, RequestOutput, Scheduler, Sequence, Status, StopStrings
from .stats import Choices, EngineStats, Tracer

log = logging.getLogger(__name__)


class GenerationCancelled(RuntimeError):
    """`LLM.should_stop` returned True between two engine steps; the generate() call returns nothing."""


class LLM:
    def __init__(self, model: str | Path | CausalLM, device: str = "cpu", dtype: str = "auto",
                 spec: SpecConfig | None = None, max_num_seqs: int = 64, max_model_len: int | None = None,
                 tokenizer: str | Path | None = None, trace_path: str | None = None, seed: int = 0,
                 drafter: Drafter | None = None, kv_cache_memory: int | str | None = None,
                 memory_utilization: float = DEFAULT_MEMORY_UTILIZATION, strategy: Strategy | None = None):
        """`drafter` plugs in a custom Drafter (specrl.engine.drafting) or a DrafterPool instead of `spec.method`'s,
        `strategy` a custom schedule over them. `dtype` applies when `model` is a path: "auto" measures whether
        bf16 or fp32 runs the model's GEMMs faster at this engine's shapes (specrl.model.precision), "float32" or
        "bfloat16" forces one; a CausalLM keeps its own (and its plain linears: a model loaded here in bf16 on a
        CPU runs pre-packed ones, specrl.model.packed). The KV cache is sized from
        `kv_cache_memory` bytes (or "4GiB"), else `memory_utilization` x the free memory (specrl.engine.memory);
        with no `max_model_len` the budget sets it, capped by the model's limit."""
        self.spec = spec if spec is not None else SpecConfig()
        if isinstance(model, CausalLM):
            self.model = model.eval()
            self.precision = Precision(next(model.parameters()).dtype, "the model's own", "given")
        else:
            forced = parse_dtype(dtype, device)
            self.model = load_model(model, device=device, dtype=check_dtype(device, forced or torch.float32))
            rows = engine_rows(max_num_seqs, self.spec.num_speculative_tokens if self.spec.enabled else 0)
            self.precision = choose_dtype(dtype, device, self.model.config, rows)
            self.model.to(check_dtype(device, self.precision.dtype))
            pack_linears(self.model)  # bf16 on a CPU: weights pre-packed for oneDNN, the same outputs bit for bit
        cfg = self.model.config
        src = tokenizer or self.model.source_path
        self.text_tokenizer = load_text_tokenizer(src) if src else None
        self.tokenizer = self.text_tokenizer.backend if self.text_tokenizer is not None else None
        if self.tokenizer is not None:
            check_tokenizer_matches(self.tokenizer, cfg.vocab_size, str(src))
        p = next(self.model.parameters())
        skip_cudnn_attention(p.device)
        budget, fix = memory_budget(p.device, kv_cache_memory, memory_utilization)
        self.kv_plan = plan_kv_cache(cfg, p.dtype, max_num_seqs, max_model_len, budget, SPARE, fix)
        log.info(self.kv_plan.describe())
        self.max_model_len = self.kv_plan.max_model_len
        self.max_num_seqs = self.kv_plan.num_slots
        pool, built = build_engine_drafting(self.spec, drafter, self.model, self.max_num_seqs, self.max_model_len)
        strategy = strategy if strategy is not None and pool is not None else built
        runner = ModelRunner(self.model, self.max_num_seqs, self.max_model_len,
                             pool.hidden_layers if pool is not None else ())
        self.engine = Engine(runner, pool, strategy, Tracer(trace_path, self.spec.method, cfg.num_params))
        # checked between engine steps: True cancels the running generate() (e.g. from another thread)
        self.should_stop: Callable[[], bool] | None = None
        # called between engine steps with the number of unfinished sequences (hot swaps, long-tail work)
        self.between_steps: Callable[[int], None] | None = None
        self._rng = random.Random(seed)
        self._next_seq_id = 0
        self._scheduler: Scheduler | None = None  # the running generate()'s, for updates in flight

    @property
    def drafter(self):
        """The drafter: the one `spec.method` names (or the plugged-in one), or for "auto" the DrafterPool
        it chooses from (its `inner` is the model drafter); None with SD off."""
        pool = self.engine.pool
        if pool is None:
            return None
        return pool if len(pool.drafters) > 1 or is_adaptive(self.spec.method) else next(iter(pool.drafters.values()))

    @property
    def weights_version(self) -> int:
        return self.engine.weights_version

    @weights_version.setter
    def weights_version(self, v: int) -> None:
        self.engine.weights_version = v

    @property
    def stats(self) -> dict:
        return self.engine.stats.as_dict()

    def reset_stats(self) -> None:
        self.engine.stats = EngineStats()

    def record_choices(self, history: bool = False) -> Choices:
        """Starts counting which drafter the strategy chooses for how many rows (off by default: it costs every
        step), and with `history` every step's choice; returns the record, which fills as generate() runs
        (`Choices.reset` counts afresh). Replaces any earlier record."""
        choices = Choices()
        choices.history = [] if history else None
        self.engine.choices = choices
        return choices

    def save_cost_profile(self, out: str | Path, meta: dict | None = None) -> None:
        """Writes what the adaptive engine ("auto") has learnt (cost fits, acceptance counts, rate checks) as the
        profile that `rollout.spec.auto.cost_profile` reads (engine/adaptive/profile.py), with `meta` recorded
        beside its fingerprint (e.g. {"path": the policy's checkpoint})."""
        if not is_adaptive(self.spec.method):
            raise UserError(f"save_cost_profile: this engine's method is {self.spec.method!r}, which learns no cost "
                            "profile; build the LLM with SpecConfig(method='auto')")
        profile.save(self.engine.strategy, out, self.model, **(meta or {}))

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int | None = None) -> None:
        """Weight sync from the trainer (the HF checkpoint's parameter names), tagged `version`. From
        `between_steps` it is an update in flight: the running sequences' KV cache is recomputed, so every later
        token comes from the new policy exactly (`CompletionOutput.weight_versions` says which version sampled
        which token). Never call it from another thread during generate()."""
        self.engine.update_weights(state_dict, version, self._scheduler.running if self._scheduler is not None else [])

    def drafter_state(self) -> dict | None:
        """What a checkpoint keeps of the drafting: the drafter's state, with a pool of drafters ("auto") that of
        the strategy over it too (Engine.drafting_state); None when nothing keeps any."""
        if self.drafter is not None and self.drafter is self.engine.pool:
            return self.engine.drafting_state()
        return self.drafter.state_dict() if isinstance(self.drafter, Stateful) else None

    def load_drafter_state(self, state: dict) -> None:
        """Loads what `drafter_state` returned (an exact resume)."""
        if self.drafter is not None and self.drafter is self.engine.pool:
            self.engine.load_drafting_state(state)
        elif isinstance(self.drafter, Stateful):
            self.drafter.load_state_dict(state)
        else:
            raise ValueError(f"the checkpoint holds drafter state but the engine's drafter ({self.spec.method!r}) "
                             "keeps none: resume with the run's own rollout.spec")

    def generate(self, prompts: list, params: SamplingParams | list[SamplingParams] | None = None,
                 progress: bool = False) -> list[RequestOutput]:
        token_prompts = self._encode(prompts)
        params_list = self._params_list(params, len(token_prompts))
        self._check_fits(token_prompts, params_list)
        seqs = self._make_sequences(token_prompts, params_list)
        self._run(seqs, progress)
        return self._outputs(prompts, token_prompts, seqs)

    def _encode(self, prompts: list) -> list[list[int]]:
        if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
            raise ValueError("prompts is empty: pass a non-empty list of strings or of token-id lists")
        _refuse_chat_messages(prompts, None)
        out = []
        for i, p in enumerate(prompts):
            _refuse_chat_messages(p, i)
            if isinstance(p, str):
                if self.tokenizer is None:
                    raise ValueError(f"prompt {i} is a string but the model has no tokenizer.json; pass token "
                                     "ids or LLM(..., tokenizer=DIR)")
                ids = self.tokenizer.encode(p).ids
            else:
                ids = [int(t) for t in p]
            if not ids:
                raise ValueError(f"prompt {i} is empty: every prompt needs at least one token")
            if len(ids) >= self.max_model_len:
                raise ValueError(f"prompt {i} has {len(ids)} tokens but the context limit is {self.max_model_len} "
                                 f"(prompt + at least 1 new token): shorten the prompt, or raise max_model_len "
                                 f"(and kv_cache_memory / memory_utilization if the budget set it)")
            bad = [t for t in ids if not 0 <= t < self.model.config.vocab_size]
            if bad:
                raise ValueError(f"prompt {i} has token ids {bad[:5]} outside the vocabulary "
                                 f"[0, {self.model.config.vocab_size})")
            out.append(ids)
        return out

    def _check_fits(self, prompts: list[list[int]], params_list: list[SamplingParams]) -> None:
        """A budget-cut context would silently end responses early: refuse instead (see KVPlan.hard_limit)."""
        if self.kv_plan.hard_limit:
            return
        for i, (ids, sp) in enumerate(zip(prompts, params_list)):
            need = len(ids) + sp.max_tokens
            if need > self.max_model_len:
                raise ValueError(
                    f"request {i} needs {need} positions (prompt {len(ids)} + max_tokens {sp.max_tokens}) but the "
                    f"KV budget ({self.kv_plan.budget} bytes for {self.max_num_seqs} slots) gives max_model_len="
                    f"{self.max_model_len} < the model's {self.model.config.max_position_embeddings}: raise "
                    f"kv_cache_memory or memory_utilization, lower max_num_seqs, or pass max_model_len={need} "
                    f"(fewer slots; responses then stop at that length)")

    @staticmethod
    def _params_list(params, n: int) -> list[SamplingParams]:
        if params is None or isinstance(params, SamplingParams):
            return [params if params is not None else SamplingParams()] * n
        if len(params) != n:
            raise ValueError(f"got {len(params)} SamplingParams for {n} prompts: pass one, or one per prompt")
        return list(params)

    def _make_sequences(self, prompts: list[list[int]], params_list: list[SamplingParams]) -> list[Sequence]:
        seqs = []
        eos = set(self.model.config.eos_token_id)
        if self.text_tokenizer is not None:  # tokenizer_config.json's eos_token and generation_config's ids
            eos |= set(self.text_tokenizer.eos_token_ids)
        for r, (prompt, sp) in enumerate(zip(prompts, params_list)):
            base = sp.seed if sp.seed is not None else self._rng.getrandbits(62)
            stop = frozenset(sp.stop_token_ids or ()) | (frozenset() if sp.ignore_eos else frozenset(eos))
            for j in range(sp.n):
                seqs.append(Sequence(self._next_seq_id, r, j, prompt, sp, mix_seed(base, j), self.max_model_len,
                                     stop_ids=stop, stop_strings=self._stop_strings(sp)))
                self._next_seq_id += 1
        return seqs

    def _run(self, seqs: list[Sequence], progress: bool) -> None:
        scheduler = Scheduler(self.max_num_seqs)
        scheduler.add(seqs)
        bar = _progress(progress, len(seqs))
        self._scheduler = scheduler
        try:
            while not scheduler.done:
                if self.should_stop is not None and self.should_stop():
                    raise GenerationCancelled("generate() was cancelled by LLM.should_stop")
                if self.between_steps is not None:
                    self.between_steps(len(scheduler.running) + len(scheduler.waiting))
                self.engine.step(scheduler)
                if bar is not None:
                    bar[0].update(bar[1], completed=sum(s.status is Status.FINISHED for s in seqs))
        finally:
            self._scheduler = None
            if bar is not None:
                bar[0].stop()
            self.engine.tracer.close()
            self.free_kv_pages()

    def free_kv_pages(self) -> None:
        """Gives the target's and the model drafters' KV pages back to the OS between generate() calls, so a
        trainer step in the same process does not sit on the last rollout's cache."""
        if self.engine.runner.device.type != "cpu":
            return
        pool = self.engine.pool
        release_caches(self.engine.runner.cache + (pool.caches() if pool is not None else []))
        trim(TRIM_MIN_FREE)  # and the step temporaries' freed heap pages, when there are many (specrl/heap.py)

    def _outputs(self, prompts, token_prompts, seqs) -> list[RequestOutput]:
        by_request: dict[int, list[CompletionOutput]] = {}
        for s in seqs:
            by_request.setdefault(s.request_id, []).append(
                CompletionOutput(s.sample_index, list(s.output), list(s.logprobs), s.finish_reason.value,
                                 self._text(s), list(s.top_logprobs) if s.params.logprobs is not None else None,
                                 s.stop_reason, list(s.versions)))
        return [RequestOutput(r, p if isinstance(p, str) else None, token_prompts[r], by_request[r])
                for r, p in enumerate(prompts)]

    def _text(self, s: Sequence) -> str | None:
        if self.text_tokenizer is None:
            return None
        if s.stop_strings is not None and s.stop_strings.hit is not None:
            return s.stop_strings.output_text(s.params.include_stop_str_in_output)
        return self.text_tokenizer.decode(s.output, skip_special_tokens=s.params.skip_special_tokens)

    def _stop_strings(self, sp: SamplingParams) -> StopStrings | None:
        if not sp.stop:
            return None
        if self.text_tokenizer is None:
            raise ValueError(f"stop={sp.stop!r} needs a tokenizer to decode text, but the model has no "
                             "tokenizer.json: pass LLM(..., tokenizer=DIR) or use stop_token_ids")
        return StopStrings(self.text_tokenizer, sp.stop, sp.skip_special_tokens)

    def get_tokenizer(self) -> TextTokenizer:
        """The checkpoint's tokenizer (encode, decode, apply_chat_template, special tokens), as in vLLM."""
        if self.text_tokenizer is None:
            raise ValueError("the model has no tokenizer.json: pass LLM(..., tokenizer=DIR)")
        return self.text_tokenizer

    def chat(self, messages: list[dict] | list[list[dict]], sampling_params: SamplingParams | list | None = None,
             add_generation_prompt: bool = True, progress: bool = False,
             chat_template_kwargs: dict | None = None) -> list[RequestOutput]:
        """One conversation or a list of them, rendered with the checkpoint's chat template, then generated.
        `chat_template_kwargs` reach the template as variables (e.g. {"enable_thinking": False}), as in vLLM."""
        tok = self.get_tokenizer()
        convs = [messages] if is_conversation(messages) else list(messages)
        if not convs:
            raise ValueError("messages is empty: pass one conversation (a list of message dicts) or a list of them")
        texts = [tok.apply_chat_template(c, add_generation_prompt=add_generation_prompt, tokenize=False,
                                         **(chat_template_kwargs or {})) for c in convs]
        # the template writes the special tokens (bos included), so none are added when encoding
        ids = [tok.encode(t, add_special_tokens=False) for t in texts]
        outs = self.generate(ids, sampling_params, progress=progress)
        for out, text in zip(outs, texts):
            out.prompt = text
        return outs


def _refuse_chat_messages(p, i: int | None) -> None:
    if isinstance(p, dict) or is_conversation(p):
        where = "prompts" if i is None else f"prompt {i}"
        raise ValueError(f"{where} is chat messages ({{'role', 'content'}} dicts); generate() takes text or "
                         "token ids: use LLM.chat(messages, sampling_params) to apply the chat template")


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    from rich.progress import Progress
    bar = Progress(transient=True)
    bar.start()
    return bar, bar.add_task("generating", total=total)
