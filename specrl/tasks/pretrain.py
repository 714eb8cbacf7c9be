"""The reproducible recipe of the embedded base policy (`specrl pretrain`, specrl/cli/pretrain.py).

Supervised next-token training (loss on response tokens) of a small Qwen3-style decoder on worked
function-chasing solutions, in stages (`STAGES`), each with a fresh AdamW, warmup and cosine decay; then the
model is grown, function-preserving, into the shipped shape (grow.py). A stage stops at its `steps` (or
earlier at `stop_after`) or at its share of `time_budget_s`. The figures of the recipe: docs/results.md.
"""
from __future__ import annotations

import itertools
import json
import math
import random
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from ..batching import length_buckets
from ..errors import require, require_min
from ..model import CausalLM, ModelConfig, load_model, save_model
from ..optim import OptimSettings, build_optimizer, clock_step, descend
from .arith import ArithSpec, Problem, arith_reward, is_counted, make_problems, task_spec
from .grow import grow, grown_config
from .tokenizer import SpecialIds, build_tokenizer, save_tokenizer, special_ids

Row = tuple[list[int], int]  # a problem's token ids and its prompt length


def stage_optim(lr: float, warmup_steps: int = 30, min_lr_ratio: float = 0.05) -> OptimSettings:
    """A stage's AdamW: linear warmup, then cosine decay to lr * min_lr_ratio over the stage's steps."""
    return OptimSettings(lr=lr, betas=(0.9, 0.95), warmup_steps=warmup_steps, min_lr_ratio=min_lr_ratio)


@dataclass(frozen=True)
class Stage:
    """One supervised stage of the recipe: the chains it trains on and its optimizer (a fresh AdamW)."""
    name: str
    steps: int                      # length of the learning-rate schedule (warmup, then cosine)
    optim: OptimSettings
    stop_after: int | None = None   # end at this step of the schedule (an early checkpoint of the longer run)
    hops_median: float = 7.0        # hop counts of the training chains (ArithSpec)
    hops_sigma: float = 0.7
    max_hops: int = 20
    counted_share: float = 0.0      # share of worked solutions in the counted style

    MOVED = {**{key: f".optim.{key}" for key in ("lr", "warmup_steps", "min_lr_ratio")},
             "ops_median": ".hops_median", "ops_sigma": ".hops_sigma", "max_ops": ".max_hops"}

    def __post_init__(self) -> None:
        self.validate()  # STAGES is built in Python

    def validate(self) -> None:
        require(self.steps >= 0, f"stages.{self.name}.steps", self.steps, ">= 0")
        require(self.stop_after is None or self.stop_after >= 0, f"stages.{self.name}.stop_after", self.stop_after,
                ">= 0", f"or null to train all {self.steps} steps")
        self.optim.validate()
        self.spec()  # hop-count and style knobs are checked by the task itself

    @property
    def end(self) -> int:
        return self.steps if self.stop_after is None else min(self.steps, self.stop_after)

    def spec(self) -> ArithSpec:
        return ArithSpec(hops_median=self.hops_median, hops_sigma=self.hops_sigma, max_hops=self.max_hops,
                         counted_share=self.counted_share)


# The recipe of the shipped policy. Each skill appears as a late phase change of a small model, so the
# stages teach one thing each: lookups and short plain chains (stopped early: the 1-hop stop and long
# plain chains are never learned), then long chains in both styles, then a short stage that makes the
# plain style the habit, as instruction tuning leaves a model with habits that RL later changes.
STAGES: tuple[Stage, ...] = (
    Stage("lookups", steps=2400, stop_after=1200, optim=stage_optim(3e-3)),
    Stage("chains", steps=2000, optim=stage_optim(1e-3, warmup_steps=20), hops_median=20.0, hops_sigma=1.0,
          max_hops=130, counted_share=0.5),
    Stage("habit", steps=200, optim=stage_optim(3e-4, warmup_steps=10, min_lr_ratio=1.0), hops_median=20.0,
          hops_sigma=1.0, max_hops=130, counted_share=0.2),
)


@dataclass
class PretrainConfig:
    seed: int = 0
    stages: tuple[Stage, ...] = STAGES
    time_budget_s: float = 3600.0     # training wall-clock cap over all stages; evaluation comes on top
    batch_tokens: int = 4096          # padded tokens per optimiser step
    bf16_autocast: bool = False       # pays off only for wide layers on a CPU with bf16 matmul units
    num_threads: int = 1              # runs are not bit-reproducible across thread counts
    # the model trained: Qwen3-style, 2 layers, 0.4M parameters, small enough for thousands of CPU steps
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 384
    max_position_embeddings: int = 2048
    eval_problems: int = 200
    eval_seed: int = 0
    eval_task: str = "chain"          # the named task (arith.TASKS) the record's held-out accuracy is on
    eval_max_new_tokens: int = 1100   # the longest counted solution (130 hops) is 1045 tokens with EOS
    init_from: str | None = None      # continue from a checkpoint instead of a fresh init (then stages resume it)
    # then grown (function-preserving, see grow.py) into the shipped shape; grow=False ships it as trained
    grow: bool = True
    grow_hidden_size: int = 384
    grow_intermediate_size: int = 1280
    grow_num_layers: int = 6
    grow_num_heads: int = 12
    grow_num_kv_heads: int = 6
    grow_noise_std: float = 1e-3      # on the new weights, so that training can move them

    MOVED = {key: f"stages.NAME.optim.{key}" for key in ("weight_decay", "grad_clip")}
    REMOVED = {"stage": "write stages.NAME.FIELD=VALUE, e.g. stages.chains.steps=1000"}

    def __post_init__(self) -> None:
        self.validate()  # the tests and the CLI build one in Python

    def validate(self) -> None:
        require(bool(self.stages), "stages", self.stages, "at least one Stage", "e.g. pretrain.STAGES")
        require_min(self, 1, "batch_tokens", "num_layers", "hidden_size", "num_threads")
        require(self.time_budget_s > 0, "time_budget_s", self.time_budget_s, "> 0 seconds")
        task_spec(self.eval_task)


def init_model(cfg: PretrainConfig, vocab_size: int, ids: SpecialIds, std: float = 0.02) -> CausalLM:
    """A fresh Qwen3-style policy with GPT-2 style init: N(0, std) matrices, residual output projections scaled by
    1/sqrt(2 L) (the default nn.Embedding init, unit variance, with tied embeddings makes initial logits huge)."""
    model = CausalLM(ModelConfig(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_layers=cfg.num_layers, num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
        arch="qwen3", max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=True,
        bos_token_id=ids.bos, eos_token_id=[ids.eos], pad_token_id=ids.pad))
    residual_std = std / math.sqrt(2 * model.config.num_layers)
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            torch.nn.init.normal_(p, 0.0, residual_std if name.endswith(("o_proj.weight", "down_proj.weight")) else std)
    return model


def accuracy_by_ops(problems, completions) -> dict[str, float]:
    """Held-out accuracy per bucket of the number of operations."""
    buckets = {"1": (1, 1), "2-3": (2, 3), "4-7": (4, 7), "8-15": (8, 15), "16-31": (16, 31), "32-63": (32, 63),
               "64+": (64, 1 << 30)}
    rewards = [(p.num_ops, arith_reward(c, p.answer, p.prompt)) for p, c in zip(problems, completions)]
    hits = {name: [r for n, r in rewards if lo <= n <= hi] for name, (lo, hi) in buckets.items()}
    return {name: round(sum(h) / len(h), 3) for name, h in hits.items() if h}


class Batch(NamedTuple):
    input_ids: torch.Tensor   # [B, T] right-padded with <pad>, positions 0..T-1 per row
    targets: torch.Tensor     # [B, T] next token, -100 where no loss is taken


def encode_problem(tok: Tokenizer, ids: SpecialIds, p: Problem) -> Row:
    """Token ids of `<bos> prompt response <eos>` and the length of `<bos> prompt`."""
    prompt = tok.encode(p.prompt).ids  # the post-processor prepends <bos>
    response = tok.encode(p.response, add_special_tokens=False).ids
    return prompt + response + [ids.eos], len(prompt)


def collate(seqs: list[Row], pad_id: int) -> Batch:
    """Right-pad to the longest row; targets are the next tokens of the response (and EOS)."""
    T = max(len(s) for s, _ in seqs)
    input_ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)  # [B, T]
    targets = torch.full((len(seqs), T), -100, dtype=torch.long)  # [B, T]
    for i, (s, prompt_len) in enumerate(seqs):
        input_ids[i, : len(s)] = torch.tensor(s)
        targets[i, prompt_len - 1 : len(s) - 1] = torch.tensor(s[prompt_len:])  # position t predicts token t+1
    return Batch(input_ids, targets)


def train_batches(tok: Tokenizer, ids: SpecialIds, seed: int, batch_tokens: int, spec: ArithSpec | None = None,
                  pool_size: int = 4096) -> Iterator[Batch]:
    """Endless stream of supervised batches, a pure function of the seed. Each pool of problems is sorted by
    length and cut into batches of at most `batch_tokens` padded tokens, so that short and long problems rarely
    share a batch and little compute goes to padding; then the batches are shuffled."""
    rng = random.Random(seed)
    for pool in itertools.count():
        problems = make_problems(pool_size, seed=seed * 100_003 + pool, split="train", spec=spec)
        rows = [encode_problem(tok, ids, p) for p in problems]
        lengths = [len(seq) for seq, _ in rows]
        batches = length_buckets(sorted(range(len(rows)), key=lengths.__getitem__), lengths, batch_tokens)
        rng.shuffle(batches)
        yield from (collate([rows[i] for i in batch], ids.pad) for batch in batches)


def train_stage(model, stage: Stage, index: int, cfg: PretrainConfig, tok, ids, budget_s: float,
                on_step: Callable[[str, int, dict], None] | None) -> dict:
    """Next-token training on one stage's worked solutions, with a fresh AdamW. The cosine follows the step count or the
    stage's share of the clock, whichever is further along, so a run cut short by the clock still ends annealed."""
    opt = build_optimizer(model, stage.optim)
    start, step, loss_ema = time.monotonic(), 0, float("nan")
    # stage 0 keeps the seed of the single-stage recipe it grew from: its batches are the same
    batches = train_batches(tok, ids, cfg.seed + 1000 * index, cfg.batch_tokens, spec=stage.spec())
    model.train()
    while step < stage.end:
        elapsed = time.monotonic() - start
        if elapsed >= budget_s:
            break
        lr = stage.optim.lr_at(clock_step(step, stage.steps, elapsed, budget_s), stage.steps)
        for group in opt.param_groups:
            group["lr"] = lr
        b = next(batches)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16_autocast):
            logits = model(b.input_ids).logits  # [B, T, V]
        loss = F.cross_entropy(logits.float().flatten(0, 1), b.targets.flatten(), ignore_index=-100)
        descend(opt, model, loss, stage.optim.grad_clip)
        step += 1
        loss_ema = loss.item() if math.isnan(loss_ema) else 0.95 * loss_ema + 0.05 * loss.item()
        if on_step:
            on_step(stage.name, step, {"loss": loss_ema, "lr": lr, "elapsed_s": time.monotonic() - start})
    return {"stage": stage.name, "steps_done": step, "train_s": round(time.monotonic() - start, 1),
            "final_loss": round(loss_ema, 4) if step else None}


def accuracy(model, tok, problems: list[Problem], max_new_tokens: int = 1100, temperature: float = 1.0,
             seed: int = 0) -> tuple[float, list[str]]:
    """Fraction of problems whose completion (one a problem, sampled at `temperature`; 0: greedy) earns reward 1,
    and the completions (text, special tokens dropped). Sampled by default: a greedy small policy loops on long
    chains until max_new_tokens."""
    from ..engine import LLM, SamplingParams
    from ..engine.sampler import per_prompt

    if not problems:
        return 0.0, []
    prompts = [tok.encode(p.prompt).ids for p in problems]
    llm = LLM(model, max_num_seqs=min(64, len(prompts)), max_model_len=max(map(len, prompts)) + max_new_tokens)
    params = per_prompt(SamplingParams(temperature=temperature, max_tokens=max_new_tokens, seed=seed), len(prompts))
    outs = llm.generate(prompts, params)  # each stops at the model config's EOS
    texts = [tok.decode(o.outputs[0].token_ids, skip_special_tokens=True) for o in outs]
    rewards = [arith_reward(c, p.answer, p.prompt) for c, p in zip(texts, problems)]
    return sum(rewards) / len(rewards), texts


def evaluate_policy(model, tok, cfg: PretrainConfig) -> dict:
    """Held-out accuracy (one sample a problem at temperature 1) on the eval task, per hop-count bucket, and
    the share of counted answers."""
    spec = task_spec(cfg.eval_task)
    test = make_problems(cfg.eval_problems, cfg.eval_seed, "test", spec)
    acc, completions = accuracy(model, tok, test, cfg.eval_max_new_tokens)
    lens = np.array([len(p.response) + 1 for p in make_problems(20000, 0, "train", spec)])  # tokens: chars, EOS
    return {"heldout_task": cfg.eval_task, "heldout_accuracy": acc, "heldout_problems": len(test),
            "heldout_accuracy_by_ops": accuracy_by_ops(test, completions),
            "heldout_counted_share": round(sum(map(is_counted, completions)) / max(len(completions), 1), 3),
            "response_length_tokens": {f"p{q}": float(np.percentile(lens, q)) for q in (50, 90, 99)}}


def pretrain(out_dir: str | Path, cfg: PretrainConfig | None = None,
             on_step: Callable[[str, int, dict], None] | None = None) -> dict:
    """Train the base policy stage by stage and write an HF checkpoint (bf16 safetensors, tokenizer,
    recipe.json) to `out_dir`. Returns the recipe record: config, per-stage stats, held-out accuracy."""
    cfg = cfg or PretrainConfig()
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    tok = build_tokenizer()
    ids = special_ids(tok)
    if cfg.init_from:
        model = load_model(cfg.init_from, dtype=torch.float32)
    else:
        model = init_model(cfg, tok.get_vocab_size(), ids)
    # step 1: the stages, each with its share of the time budget
    planned = sum(st.end for st in cfg.stages) or 1
    stages = [train_stage(model, st, i, cfg, tok, ids, cfg.time_budget_s * max(st.end, 1) / planned, on_step)
              for i, st in enumerate(cfg.stages)]
    trained_params = model.config.num_params
    if cfg.grow:
        big = grown_config(model.config, cfg.grow_hidden_size, cfg.grow_intermediate_size, cfg.grow_num_layers,
                           cfg.grow_num_heads, cfg.grow_num_kv_heads)
        model = grow(model.float(), big, cfg.grow_noise_std, cfg.seed)
    # step 2: evaluate the weights exactly as shipped, i.e. after the bf16 round trip
    model = model.to(torch.bfloat16).to(torch.float32).eval()
    t0 = time.monotonic()
    record = {"recipe": asdict(cfg), "stages": stages, "steps_done": sum(st["steps_done"] for st in stages),
              "train_s": round(sum(st["train_s"] for st in stages), 1), **evaluate_policy(model, tok, cfg),
              "eval_s": round(time.monotonic() - t0, 1), "num_params": model.config.num_params,
              "trained_num_params": trained_params, "torch": torch.__version__}
    # step 3: one atomic HF directory: bf16 weights, config, tokenizer files, recipe.json
    with tempfile.TemporaryDirectory() as tok_dir:
        save_tokenizer(tok_dir, tok, model.config.max_position_embeddings)
        save_model(model, out_dir, tokenizer_dir=tok_dir, dtype="bfloat16",
                   extra_files={"recipe.json": json.dumps(record, indent=2) + "\n"})
    return record
