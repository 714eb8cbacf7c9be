"""Shared pieces of offline drafter training (eagle3, draft_model, mtp): self-distillation data from the
policy's own generations (to built-in or JSONL-file prompts), length-bucketed batches, the losses, the fit and
its settings. Every method's trainer is `train(policy_path, out_dir, data, args) -> dict`, `data` from
`collect_sequences`.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence

from ...batching import length_buckets
from ...errors import MissingFileError, require, require_min
from ...optim import OptimSettings, build_optimizer, clock_step, descend
from ...trainer.data import PromptEncoder, read_prompts

Pair = tuple[list[int], list[int]]  # (prompt_ids, response_ids)


@dataclass
class DrafterTrainArgs:
    steps: int = 400
    batch_tokens: int = 4096  # padded tokens per optimiser step
    optim: OptimSettings = field(  # its schedule spans `steps`
        default_factory=lambda: OptimSettings(lr=2e-3, betas=(0.9, 0.95), warmup_steps=20, min_lr_ratio=0.05))
    seed: int = 0
    time_budget_s: float = 480.0  # training wall-clock cap; the LR schedule follows steps or time, whichever is further
    bf16_autocast: bool | None = None  # matmuls in bf16 on the CPU, master weights fp32; None: where it is fast
    save_dtype: str = "bfloat16"  # dtype of the shipped weights
    log_every: int = 20
    teacher_topk: int = 32  # stored teacher tokens a position, beside the tail mass (topk_cross_entropy); 0: all
    cache_dir: str | None = None  # `train-drafter --cache DIR` (cache.py): the fit's state is saved there
    resume: bool = False  # continue the fit saved in cache_dir
    save_every: int = 50  # steps between saves of the fit's state (and one at the end)

    MOVED = {key: f".optim.{key}" for key in ("lr", "min_lr_ratio", "warmup_steps", "weight_decay", "grad_clip")}

    def __post_init__(self):
        if self.bf16_autocast is None:
            from ...threads import cpu_has_fast_bf16
            self.bf16_autocast = cpu_has_fast_bf16()
        self.validate()  # the trainers take one built in Python too

    def validate(self) -> None:
        require_min(self, 1, "steps", "batch_tokens")
        require(self.teacher_topk >= 0, "teacher_topk", self.teacher_topk, ">= 1, or 0 for the whole vocabulary")
        require(not self.resume or bool(self.cache_dir), "resume", self.resume, "false without a cache directory",
                "resume continues the training state saved in a cache: pass cache=DIR (the interrupted run's)")
        require(self.time_budget_s > 0, "time_budget_s", self.time_budget_s, "> 0 seconds")
        self.optim.validate()


def collect_sequences(policy, prompts: list, n: int = 1, max_tokens: int = 256, temperature: float = 1.0,
                      seed: int = 0, max_num_seqs: int = 64, max_model_len: int | None = None,
                      kv_cache_memory: int | str | None = None, memory_utilization: float | None = None) -> list[Pair]:
    """The policy's own generations (SD off): one (prompt_ids, response_ids) per sample, empty ones dropped.
    `policy` is a checkpoint path or a CausalLM; `prompts` strings or token-id lists; `max_model_len` caps
    prompt + response; the KV budget knobs are LLM's (specrl.engine.memory)."""
    from ...engine import LLM, SamplingParams
    from ...engine.sampler import per_prompt
    from ...engine.memory import DEFAULT_MEMORY_UTILIZATION

    llm = LLM(policy, max_num_seqs=max_num_seqs, max_model_len=max_model_len, kv_cache_memory=kv_cache_memory,
              memory_utilization=memory_utilization or DEFAULT_MEMORY_UTILIZATION)
    params = per_prompt(SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=seed), len(prompts))
    outs = llm.generate(prompts, params)
    return [(list(o.prompt_token_ids), list(c.token_ids)) for o in outs for c in o.outputs if c.token_ids]


def default_prompts(num: int, seed: int = 0) -> list[str]:
    """Training-split prompts of the embedded arithmetic task (never the test split)."""
    from ...tasks import make_problems

    return [p.prompt for p in make_problems(num, seed=seed, split="train")]


def load_prompts(path: str | Path, model_dir: str | Path, limit: int | None = None) -> list[list[int]]:
    """A JSONL file's first `limit` prompts (all when None) for `specrl train-drafter --data FILE`, encoded as
    `specrl train` encodes them (train.data.PromptEncoder: a `prompt` string becomes a user turn of the
    checkpoint's chat template when it has one), so the drafter learns on the text the policy sees in rollouts;
    a row with neither `prompt` nor `messages` is an error naming its line."""
    encoder = PromptEncoder(model_dir)
    rows = read_prompts(path, flag="--data file")
    if not rows:
        raise ValueError(f"--data file {str(path)!r} has no rows")
    return [encoder.encode(r) for r in rows[:limit]]


class TokenBatch(NamedTuple):
    ids: torch.Tensor  # [B, T] right-padded
    positions: torch.Tensor  # [B, T]
    loss_mask: torch.Tensor  # [B, T] bool: position s predicts token s+1, a response token


def pad_batch(pairs: list[Pair]) -> TokenBatch:
    ids = pad_sequence([torch.tensor(p + r) for p, r in pairs], batch_first=True)  # [B, T]
    mask = torch.zeros(ids.shape, dtype=torch.bool)  # [B, T]
    for b, (p, r) in enumerate(pairs):
        mask[b, len(p) - 1:len(p) + len(r) - 1] = True
    return TokenBatch(ids, torch.arange(ids.shape[1]).expand(ids.shape), mask)


def index_batches(lengths: list[int], batch_tokens: int, seed: int):
    """Endless stream of length-bucketed index lists of at most `batch_tokens` padded tokens (at least one
    sequence each); a fresh shuffle every epoch, a pure function of the seed."""
    if not lengths:
        raise ValueError("no training sequences: collect_sequences returned nothing (all responses empty?)")
    rng = random.Random(seed)
    while True:
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
        batches = length_buckets(order, lengths, batch_tokens)
        rng.shuffle(batches)
        yield from batches


def token_batches(data: list[Pair], batch_tokens: int, seed: int) -> Iterator[TokenBatch]:
    """`index_batches` over `data`, padded."""
    for idx in index_batches([len(p) + len(r) for p, r in data], batch_tokens, seed):
        yield pad_batch([data[i] for i in idx])


def soft_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over masked positions of -sum_v p(v) log q(v). logits, target_probs: [B, T, V]; mask: [B, T]."""
    ce = -(target_probs * torch.log_softmax(logits.float(), dim=-1)).sum(-1)  # [B, T]
    return (ce * mask).sum() / mask.sum().clamp(min=1)


class TopK(NamedTuple):
    """A teacher distribution cut to its k most likely tokens; the rest of the mass is 1 - probs.sum(-1)."""
    probs: torch.Tensor  # [..., k] not renormalised, most likely first
    ids: torch.Tensor  # [..., k] token ids


def topk_probs(logits: torch.Tensor, k: int) -> TopK:
    """softmax(logits) cut to its top k (k = 0 or >= V: all V tokens). logits: [..., V] -> [..., k] each."""
    V = logits.shape[-1]
    probs, ids = torch.softmax(logits.float(), dim=-1).topk(V if k == 0 else min(k, V), dim=-1)  # [..., k]
    return TopK(probs, ids)


def topk_cross_entropy(logits: torch.Tensor, target: TopK, mask: torch.Tensor) -> torch.Tensor:
    """Mean over masked positions of the cross-entropy between teacher and student coarsened to k + 1 outcomes
    (the teacher's top k tokens and one bucket for the rest): -sum_{v in top k} p(v) log q(v) - r log q(rest),
    r = 1 - sum_{top k} p. Keeping the bucket (rather than renormalising p over the k tokens) leaves the student
    no reason to drop the tail's mass, which keeps q from overshooting p and losing acceptance min(1, p/q).
    Equal to soft_cross_entropy when the k tokens are the whole vocabulary. logits: [B, T, V]; target: [B, T, k]
    each; mask: [B, T]."""
    logq = torch.log_softmax(logits.float(), dim=-1)  # [B, T, V]
    ids = target.ids.long()
    p = target.probs.float()  # [B, T, k]
    valid = ids >= 0  # an id of -1: a teacher token outside a reduced draft vocabulary (its mass joins the rest)
    all_valid = bool(valid.all())
    if not all_valid:
        p, ids = p * valid, ids.clamp(min=0)
    ce = -(p * logq.gather(-1, ids)).sum(-1)  # [B, T]
    if ids.shape[-1] < logq.shape[-1] or not all_valid:  # a non-empty rest bucket
        rest_p = (1 - p.sum(-1)).clamp(min=0)  # [B, T]
        if all_valid:  # the rest is every token but the k
            rest = logq.scatter(-1, ids, float("-inf"))
        else:  # a clamped -1 id must not mask token 0
            taken = torch.zeros_like(logq, dtype=torch.uint8).scatter_reduce(-1, ids, valid.to(torch.uint8), "amax")
            rest = logq.masked_fill(taken.bool(), float("-inf"))
        ce = ce - rest_p * torch.logsumexp(rest, dim=-1)
    return (ce * mask).sum() / mask.sum().clamp(min=1)


def fit(module: torch.nn.Module, loss_fn: Callable, batches: Iterator, args: DrafterTrainArgs,
        on_log: Callable[[int, dict], None] | None = None, identity: dict | None = None) -> dict:
    """AdamW on `module` (the only trained part), warmup + cosine over steps or the time budget, whichever is
    further along. `loss_fn(batch)` returns the loss, or (loss, info) where `info` is logged and returned.
    With `args.cache_dir` the state is saved there (tagged with `identity`, e.g. the method and vocabulary)
    and `args.resume` continues it: the batch stream is a pure function of the seed, so it is replayed."""
    from .progress import eta_s, step_progress
    module.train()
    opt = build_optimizer(module, args.optim)
    run = {"step": 0, "elapsed_s": 0.0, "first": None, "ema": math.nan, "info": None}
    if args.resume:
        run = load_train_state(args.cache_dir, module, opt, identity or {})
        for _ in range(run["step"]):
            next(batches)
    step, first, ema, info = run["step"], run["first"], run["ema"], run["info"]
    start = time.monotonic() - run["elapsed_s"]
    with step_progress(args.steps, args.time_budget_s) as update:
        while step < args.steps and time.monotonic() - start < args.time_budget_s:
            at = clock_step(step, args.steps, time.monotonic() - start, args.time_budget_s)
            for g in opt.param_groups:
                g["lr"] = args.optim.lr_at(at, args.steps)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16_autocast):
                out = loss_fn(next(batches))
            loss, info = out if isinstance(out, tuple) else (out, info)
            descend(opt, module, loss, args.optim.grad_clip)
            step += 1
            first = loss.item() if first is None else first
            ema = loss.item() if math.isnan(ema) else 0.9 * ema + 0.1 * loss.item()
            elapsed = time.monotonic() - start
            update(step, elapsed)
            run = {"step": step, "elapsed_s": elapsed, "first": first, "ema": ema, "info": info}
            if args.cache_dir and step % args.save_every == 0:
                save_train_state(args.cache_dir, module, opt, identity or {}, run)
            if on_log and (step % args.log_every == 0 or step == 1):
                on_log(step, {"loss": round(ema, 4), "info": info, "elapsed_s": round(elapsed, 1),
                              "eta_s": round(eta_s(step, args.steps, elapsed, args.time_budget_s))})
    if args.cache_dir:  # the end, wherever the steps or the time budget stopped it
        save_train_state(args.cache_dir, module, opt, identity or {}, run)
    module.eval()
    return {"steps_done": step, "train_s": round(time.monotonic() - start, 1), "first_loss": first,
            "final_loss": ema, "info": info}


def save_train_state(cache_dir: str, module: torch.nn.Module, opt, identity: dict, run: dict) -> None:
    from .cache import save
    save(Path(cache_dir) / "train_state.pt", {"identity": identity, "run": run, "module": module.state_dict(),
                                              "optimizer": opt.state_dict()})


def load_train_state(cache_dir: str, module: torch.nn.Module, opt, identity: dict) -> dict:
    """Loads the saved fit into `module` and `opt` -> its counters; refuses a state of another method or
    vocabulary (`identity`) before touching the module."""
    path = Path(cache_dir) / "train_state.pt"
    if not path.is_file():
        raise MissingFileError(f"nothing to resume: {str(path)!r} does not exist (the run saves it every save_every "
                        "steps with --cache DIR); drop --resume to start the fit")
    state = torch.load(path)
    saved = state["identity"]
    diff = {k: (saved.get(k), v) for k, v in identity.items() if saved.get(k) != v}
    if diff:
        shown = ", ".join(f"{k} {a!r} there, {b!r} now" for k, (a, b) in sorted(diff.items()))
        raise ValueError(f"cannot resume from {str(path)!r}: it trained another drafter ({shown}); rerun with its "
                        "--method and --draft-vocab-size, or without --resume to start over (overwriting it)")
    module.load_state_dict(state["module"])
    opt.load_state_dict(state["optimizer"])
    return state["run"]
