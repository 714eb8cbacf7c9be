"""Policy trainer: GRPO update on a batch of rollouts, with micro-batches and gradient accumulation.

The trainer recomputes the logprobs of the sampled tokens with its own model; their gap to the engine's
logprobs (`logprob_diff`) audits that rollouts were sampled from exactly this policy. `forward_hook` sees what
that forward computed for each micro-batch (online drafter training installs one to learn from it);
`logits_hook` sees the policy's logits of the rows it asks for (the sampler audit, specrl.audit, installs one).
"""
from __future__ import annotations

import copy
import math
from collections import defaultdict
from functools import partial
from typing import Callable, ContextManager, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..config import ConfigError
from ..engine.memory import parse_bytes
from ..heap import TRIM_MIN_FREE, trim
from ..model import CausalLM, ModelOutput
from ..model.layers import skip_cudnn_attention
from ..optim import build_optimizer, clip_grad, warmup_cosine_scheduler
from ..rl import (POLICY_LOSSES, aggregate, aggregate_denom, entropy_from_logits, kl_penalty, token_logprobs,
                  truncated_importance_ratio)
from .batch import Packed, TrainBatch, collate, micro_batch_groups, pack  # noqa: F401 - collate: the input
from ..config.run import AlgorithmConfig, OptimConfig


class NonFiniteLossError(RuntimeError):
    """The loss or gradient norm was NaN/inf; the update was not applied."""


class ForwardInfo(NamedTuple):
    """What the update's forward computed for one micro-batch (not detached: a hook that keeps any, detaches)."""
    output: ModelOutput  # .hidden: [b, T, D] per layer the hook asked for, ascending; .last_hidden [b, T, D]
    input_ids: Tensor  # [b, T] the micro-batch's inputs, right-padded
    mask: Tensor  # [b, T] float, 1 where the next token is a response token
    rows: Tensor  # [b] its rows of the step's batch
    logits: Callable[[Tensor], Tensor]  # final hidden [k, T, D] of chosen rows -> policy logits [k, T, V], no grad


class ForwardHook(Protocol):
    """`PolicyTrainer.forward_hook`: called once per micro-batch of every update, after its forward."""
    hidden_layers: tuple[int, ...]  # decoder layers whose outputs the forward also returns, ascending

    def __call__(self, info: ForwardInfo) -> None: ...


class LogitsHook(Protocol):
    """`PolicyTrainer.logits_hook`: sees the logits of `rows` under the weights the step starts from, each token
    once: from the update's own forward where it runs them, else from a forward without gradients first."""
    rows: Tensor  # [N] bool, the step's rows it asks for

    def __call__(self, logits: Tensor, targets: Tensor, rows: Tensor, positions: Tensor) -> None:
        """logits [n, V] detached, targets [n], and each token's row [n] and position [n] in the padded batch."""

    def timed(self) -> ContextManager:
        """Wraps a forward the trainer runs for the hook alone, so that the hook can count its cost."""


def activation_bytes_per_token(cfg, checkpointing: bool = False) -> int:
    """A rough fp32 estimate of what one token keeps for the backward: per decoder layer ~8 hidden-sized tensors
    (norms, q/k/v/o, residual) and 4 MLP-sized ones (gate, up, act, product), plus the final hidden state. With
    activation checkpointing a layer keeps only its input, and one layer is live again while it is recomputed.
    The vocabulary-sized rows are `micro_batch_token_cap`'s."""
    layer = 8 * cfg.hidden_size + 4 * cfg.intermediate_size
    layers = cfg.num_layers * cfg.hidden_size + layer if checkpointing else cfg.num_layers * layer
    return 4 * (layers + cfg.hidden_size)


HEAD_CHUNK_ELEMENTS = 2 ** 23  # logits a chunk of the lm-head computes at once (32 MiB in fp32)
# optim.activation_memory=null: what ACTIVATION_TOTAL leaves beside the training state, at least ACTIVATION_FLOOR;
# past LARGE_STATE the heap is also trimmed before every micro-batch (PolicyTrainer.trims_heap)
ACTIVATION_TOTAL, ACTIVATION_FLOOR, LARGE_STATE = 2 * 2 ** 30, 2 ** 29, 2 ** 30


def training_state_bytes(model: torch.nn.Module) -> int:
    """Weights, their gradients and AdamW's two moments: four copies of the parameters."""
    return 4 * sum(p.numel() * p.element_size() for p in model.parameters())


def activation_budget(setting: int | str | None, state: int) -> int:
    """`optim.activation_memory`, or for null ACTIVATION_TOTAL less a `state`-byte training state, at least
    ACTIVATION_FLOOR: a small policy keeps whole micro-batches, a large one's update stays small (docs/memory.md)."""
    return parse_bytes(setting) if setting is not None else max(ACTIVATION_FLOOR, ACTIVATION_TOTAL - state)


def head_chunk_tokens(vocab_size: int) -> int:
    return max(1, HEAD_CHUNK_ELEMENTS // vocab_size)


def micro_batch_token_cap(cfg, budget: int, checkpointing: bool, mtp_depths: int = 0) -> int:
    """Tokens a micro-batch may hold within `budget` bytes of activations: the decoder's per token, plus ~3 fp32
    vocabulary-sized rows (logits, log-softmax, gradient) for every token of one lm-head chunk (`head_logprobs`),
    or of the whole micro-batch when it fits in one chunk; the MTP loss holds 3 rows per depth for every token."""
    vocab_rows = 4 * 3 * cfg.vocab_size
    per_token = activation_bytes_per_token(cfg, checkpointing) + mtp_depths * vocab_rows
    cap = budget // (per_token + vocab_rows)  # a micro-batch within one chunk: all its logits live at once
    chunk = head_chunk_tokens(cfg.vocab_size)
    if cap > chunk:
        cap = (budget - vocab_rows * chunk) // per_token
    return max(1, cap)


def head_logprobs(lm_head: torch.nn.Linear, hidden: Tensor, targets: Tensor, temperature: float, autocast,
                  with_entropy: bool = True, sink: Callable[[Tensor, Tensor, int], None] | None = None,
                  at: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """(logprobs [b, T] of `targets` under softmax(lm_head(hidden) / temperature), their detached entropies
    [b, T] or None) from the final normed hidden states [b, T, D]. The [b, T, V] logits never exist at once (for
    a large vocabulary they cost more a token than a checkpointed decoder keeps): each chunk of
    `head_chunk_tokens` runs under activation checkpointing, unless one chunk holds the whole micro-batch.
    `sink` gets each chunk's detached logits [n, V], targets [n] and offset in the flattened tokens (in `at` when
    given); the backward's recompute calls it again with the same offset. `at` [k]: the flat positions whose
    logprobs are read (a row's response tokens); the head runs there alone and the other positions get 0 (the
    prompt is most of a chat row's tokens, and a 49,152-token head is a fifth of a 135M model's forward)."""
    b, T, D = hidden.shape
    flat_h, flat_t = hidden.reshape(b * T, D), targets.reshape(b * T)  # [N, D], [N]
    if at is not None:
        flat_h, flat_t = flat_h[at], flat_t[at]  # [k, D], [k]

    def chunk(h: Tensor, t: Tensor, start: int) -> tuple[Tensor, Tensor | None]:
        with autocast():
            logits = lm_head(h)[None]  # [1, n, V]
        if sink is not None:
            sink(logits.detach()[0], t, start)
        logp = token_logprobs(logits, t[None], temperature)[0]  # [n]
        # after the logprobs: the backward's recompute stops once it has them, without redoing this
        entropy = entropy_from_logits(logits.detach()[0] / (temperature or 1.0)) if with_entropy else None
        return logp, entropy  # [n], [n]

    n, step = len(flat_t), head_chunk_tokens(lm_head.out_features)
    plain = n <= step or not torch.is_grad_enabled()
    run = chunk if plain else partial(checkpoint, chunk, use_reentrant=False, preserve_rng_state=False)
    parts = [run(flat_h[i:i + step], flat_t[i:i + step], i) for i in range(0, n, step)] or [chunk(flat_h, flat_t, 0)]
    logp = torch.cat([p[0] for p in parts])  # [n]
    entropy = torch.cat([p[1] for p in parts]) if with_entropy else None  # [n]
    if at is not None:
        logp = logp.new_zeros(b * T).index_put((at,), logp)
        entropy = None if entropy is None else entropy.new_zeros(b * T).index_put((at,), entropy)
    return logp.view(b, T), None if entropy is None else entropy.view(b, T)


class PolicyTrainer:
    def __init__(self, model: CausalLM, algo: AlgorithmConfig, optim: OptimConfig, total_steps: int,
                 temperature: float, norm_len: int):
        self.model, self.algo, self.optim_cfg = model, algo, optim
        self.device = next(model.parameters()).device
        skip_cudnn_attention(self.device)
        self.temperature, self.norm_len = temperature, norm_len
        self.policy_loss = POLICY_LOSSES.get(algo.policy_loss)  # "clipped": PPO/GRPO with DAPO clip-higher
        model.checkpoint_layers = optim.activation_checkpointing
        state = training_state_bytes(model)
        self.token_cap = optim.micro_batch_tokens
        if self.token_cap is None:  # sized from the activation budget
            mtp_depths = model.mtp.depth if model.mtp is not None and algo.mtp_coef > 0 else 0
            budget = activation_budget(optim.activation_memory, state)
            self.token_cap = micro_batch_token_cap(model.config, budget, optim.activation_checkpointing, mtp_depths)
        # trim the heap before every micro-batch of a large model on a CPU (its heap grows, its compute dwarfs the
        # page faults), never for a small one (the trim costs more than it saves: docs/memory.md)
        self.trims_heap = state >= LARGE_STATE and self.device.type == "cpu"
        self.optimizer = build_optimizer(model, optim)
        self.scheduler = warmup_cosine_scheduler(self.optimizer, optim, total_steps * algo.updates_per_step)
        # the frozen reference of the KL penalty: the policy as it was when training started
        self.ref_model = copy.deepcopy(model).eval().requires_grad_(False) if algo.kl_coef > 0 else None
        self.forward_hook: ForwardHook | None = None
        self.logits_hook: LogitsHook | None = None

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "ref_model": self.ref_model.state_dict() if self.ref_model is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.ref_model is not None and state.get("ref_model") is not None:
            self.ref_model.load_state_dict(state["ref_model"])

    def micro_batches(self, idx: Tensor, lengths: Tensor) -> list[Tensor]:
        """Rows sorted by length, in micro-batches of at most micro_batch_size rows and `token_cap` tokens (packed:
        real tokens; padded: rows x the longest row); a row longer than the cap fits in none, a ConfigError."""
        idx = idx[torch.argsort(lengths[idx], stable=True)]
        longest = int(lengths[idx].max()) if len(idx) else 0
        if self.token_cap and longest > self.token_cap:
            fix = f"raise it to at least {longest}"
            if self.optim_cfg.micro_batch_tokens is None:
                fix = (f"set optim.micro_batch_tokens to at least {longest}, or raise optim.activation_memory (the "
                       "cap was sized from it)")
            raise ConfigError(f"optim.micro_batch_tokens: a micro-batch holds at most {self.token_cap} tokens, but a "
                              f"row of the batch has {longest} (prompt + response); {fix}")
        return micro_batch_groups(idx, lengths, self.optim_cfg.micro_batch_size, self.token_cap, self.optim_cfg.packing)

    def autocast(self):
        """bf16 autocast when optim.autocast: weights, gradients and optimizer state stay in the model's dtype."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bool(self.optim_cfg.autocast))

    @torch.no_grad()
    def score(self, model: CausalLM, batch: TrainBatch, rows: Tensor | None = None,
              hook: LogitsHook | None = None) -> Tensor:
        """Logprobs [N, T] of the targets of `rows` (default all; 0 elsewhere) under `model`, micro-batched, without
        gradients; `hook` sees the logits of its rows among them."""
        out = torch.zeros_like(batch.gen_logp)  # [N, T]
        for idx in self.micro_batches(torch.arange(batch.num_rows) if rows is None else rows, batch.lengths):
            mb, packed = self._micro_batch(batch, idx)
            last = self._run(model, mb, packed).last_hidden  # [b, t, D], packed [1, n, D]
            logp, _ = self._logprobs(model, last, mb, packed, with_entropy=False, hook=hook, idx=idx)
            out[idx, :mb.input_ids.shape[1]] = logp.cpu()
        return out

    @torch.inference_mode()
    def show(self, model: CausalLM, batch: TrainBatch, rows: Tensor, hook: LogitsHook) -> None:
        """`hook` sees the logits of its tokens among `rows` under `model`, micro-batched like the update, without
        gradients and without the logprobs `score` makes: the lm-head runs only at the hook's rows' response
        positions (`_show_logits`)."""
        for idx in self.micro_batches(rows, batch.lengths):
            mb, packed = self._micro_batch(batch, idx)
            if bool(hook.rows[idx].any()):
                self._show_logits(model, self._run(model, mb, packed).last_hidden, mb, packed, hook, idx)

    def _show_logits(self, model: CausalLM, last: Tensor, mb: TrainBatch, packed: Packed | None, hook: LogitsHook,
                     idx: Tensor) -> None:
        """The logits of micro-batch `mb` (rows `idx`) that `hook` reads, from its final hidden states `last`
        ([b, T, D], packed [1, n, D]): the lm-head at the response positions of the hook's rows alone, at most
        `head_chunk_tokens` at once, so [tokens, V] never exists at once."""
        valid = torch.ones_like(mb.targets, dtype=torch.bool) if packed is None else packed.valid  # [b, T]
        where = valid.nonzero()  # [n_tokens, 2] (row in the micro-batch, position) per flat offset
        rows = idx.to(where.device)[where[:, 0]]  # [n_tokens]
        keep = hook.rows.to(where.device)[rows] & (mb.mask[where[:, 0], where[:, 1]] > 0)  # [n_tokens]
        at = keep.nonzero()[:, 0]  # [k] flat offsets the hook reads
        flat_h = last.reshape(-1, last.shape[-1])  # [n_tokens, D]
        flat_t = (mb.targets if packed is None else packed.targets).reshape(-1)  # [n_tokens]
        step = head_chunk_tokens(model.lm_head.out_features)
        for i in range(0, len(at), step):
            sel = at[i:i + step]
            with self.autocast():
                logits = model.lm_head(flat_h[sel])  # [h, V]
            hook(logits, flat_t[sel], rows[sel].cpu(), where[sel, 1].cpu())

    def _micro_batch(self, batch: TrainBatch, idx: Tensor) -> tuple[TrainBatch, Packed | None]:
        mb = batch.rows(idx, self.device)  # [b, T] padded: what the loss and the forward hook read
        return mb, pack(mb) if self.optim_cfg.packing else None

    def _run(self, model: CausalLM, mb: TrainBatch, packed: Packed | None, hidden_layers=()) -> ModelOutput:
        ids, segments = (mb.input_ids, None) if packed is None else (packed.input_ids, packed.segments)
        with self.autocast():
            return model(ids, hidden_layers=hidden_layers, compute_logits=False, segments=segments)

    def _logprobs(self, model: CausalLM, last: Tensor, mb: TrainBatch, packed: Packed | None,
                  with_entropy: bool = True, hook: LogitsHook | None = None, idx: Tensor | None = None
                  ) -> tuple[Tensor, Tensor | None]:
        """`head_logprobs` of `_run`'s final hidden states, in the padded layout [b, T] either way; `hook` sees
        the logits of its rows of micro-batch `mb` (rows `idx`)."""
        targets = mb.targets if packed is None else packed.targets  # [b, T] or [1, N]
        need = mb.mask > 0 if packed is None else (mb.mask > 0)[packed.valid]  # [b, T] or [N]: response targets
        at = need.reshape(-1).nonzero()[:, 0]  # [k] flat positions whose logprobs the loss reads
        sink = None if hook is None or not bool(hook.rows[idx].any()) else _hook_sink(hook, idx, mb, packed, at)
        logp, entropy = head_logprobs(model.lm_head, last, targets, self.temperature, self.autocast, with_entropy,
                                      sink=sink, at=at)
        if packed is None:
            return logp, entropy
        return packed.unpack(logp), None if entropy is None else packed.unpack(entropy)  # [b, T]

    @torch.no_grad()
    def _logits(self, last_hidden: Tensor) -> Tensor:
        """The policy's logits [k, T, V] from final hidden states [k, T, D] (`ForwardInfo.logits`)."""
        with self.autocast():
            return self.model.lm_head(last_hidden)

    def step(self, batch: TrainBatch, is_cap: float | None = None) -> dict[str, float]:
        """One RL step: `updates_per_step` optimizer steps over mini-batches of the rollouts. With `is_cap`
        the rollouts are off-policy (sampled by older weights in the async pipeline, or by an engine in another
        precision): each token's loss is scaled by the truncated importance ratio min(pi_old / pi_gen, is_cap)
        (metrics is_ratio, its mean, and is_truncated, the share of tokens at the cap)."""
        hook = self.logits_hook
        if hook is not None and self.algo.updates_per_step == 1:  # step 0: the hook's rows the update skips
            self._show_hook(batch, hook)
        self.model.train()
        # step 1: pi_old. With one update, pi_old is the model before it, so the update's own forward gives it.
        old = self.score(self.model, batch, hook=hook) if self.algo.updates_per_step > 1 else None
        ref = self.score(self.ref_model, batch) if self.ref_model is not None else None
        seen = torch.zeros_like(batch.gen_logp) if old is None else old  # [N, T] trainer logprobs, for logprob_diff
        computed = torch.full((batch.num_rows,), old is not None)  # [N] rows whose trainer logprobs are in `seen`
        sums: dict[str, float] = defaultdict(float)
        for rows in torch.arange(batch.num_rows).chunk(self.algo.updates_per_step):
            self._update(batch, rows, old, ref, seen, computed, sums, is_cap)
        self.model.eval()
        mask = batch.mask * computed[:, None]  # [N, T] logprob_diff covers the rows whose logprobs were computed
        diff = (seen - batch.gen_logp).abs() * mask  # [N, T]
        metrics = {k: v / self.algo.updates_per_step for k, v in sums.items()}
        metrics.update(logprob_diff=float(diff.sum() / mask.sum().clamp(min=1)), logprob_diff_max=float(diff.max()))
        return metrics

    @torch.no_grad()
    def _show_hook(self, batch: TrainBatch, hook: LogitsHook) -> None:
        """The hook's rows that the update's forward skips (zero advantages), by a forward without gradients
        now, before any weight moves."""
        rows = torch.arange(batch.num_rows)
        skipped = rows[hook.rows & ~torch.isin(rows, self.learning_rows(batch, rows))]
        if len(skipped) and self.forward_hook is None:  # else the forward hook's forward shows them (_show_skipped)
            with hook.timed():
                self.show(self.model, batch, skipped, hook)

    def learning_rows(self, batch: TrainBatch, rows: Tensor) -> Tensor:
        """The rows of `rows` whose loss can move the weights. A zero advantage (a GRPO group whose samples all
        scored the same) makes a row's clipped loss and gradient exactly zero, so unless a KL or MTP term reads
        every row, such rows skip the update's forwards; the loss keeps the whole mini-batch's denominator, so
        the gradient is unchanged. One row is kept when none learns, so the optimizer still steps. A forward
        hook still sees the skipped rows (`_show_skipped`)."""
        reads_all = self.ref_model is not None or (self.model.mtp is not None and self.algo.mtp_coef > 0)
        if not self.algo.skip_zero_advantage or reads_all:
            return rows
        learning = rows[batch.advantages[rows] != 0]
        return learning if len(learning) else rows[torch.argmin(batch.lengths[rows])].view(1)

    def _forward(self, mb: TrainBatch, packed: Packed | None, idx: Tensor) -> ModelOutput:
        """The policy's forward over micro-batch `mb` (rows `idx`), shown to the forward hook in the padded layout."""
        hook = self.forward_hook
        out = self._run(self.model, mb, packed, hook.hidden_layers if hook is not None else ())
        if hook is not None:
            view = out if packed is None else ModelOutput(None, tuple(map(packed.unpack, out.hidden)),
                                                          packed.unpack(out.last_hidden))  # the padded layout
            hook(ForwardInfo(view, mb.input_ids, mb.mask, idx, self._logits))
        return out

    @torch.no_grad()
    def _show_skipped(self, batch: TrainBatch, skipped: Tensor) -> None:
        """The forward hook's view of the rows the update skips: the same forward, without gradients, so online
        drafter training still learns from every trajectory, the long failing ones included. The logits hook sees
        the same forward's logits of its rows (one forward for both; the weights have not moved yet)."""
        hook = self.logits_hook if self.algo.updates_per_step == 1 else None
        for idx in self.micro_batches(skipped, batch.lengths):
            mb, packed = self._micro_batch(batch, idx)
            out = self._forward(mb, packed, idx)
            if hook is not None and bool(hook.rows[idx].any()):
                with hook.timed():
                    self._show_logits(self.model, out.last_hidden, mb, packed, hook, idx)

    def _update(self, batch: TrainBatch, rows: Tensor, old: Tensor | None, ref: Tensor | None,
                seen: Tensor, computed: Tensor, sums: dict[str, float], is_cap: float | None = None) -> None:
        mode = self.algo.loss_agg
        denom = aggregate_denom(batch.mask[rows], mode)  # the whole mini-batch's count: accumulation = one batch
        learning = self.learning_rows(batch, rows)
        sums["update_rows"] += len(learning) / len(rows)  # the share of rows the update's forwards ran
        if self.forward_hook is not None and len(learning) < len(rows):
            self._show_skipped(batch, rows[~torch.isin(rows, learning)])
        rows = learning
        n_tok = batch.mask[rows].sum().clamp(min=1)  # the health metrics (entropy, clip_frac) average these rows
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.scheduler.get_last_lr()[0]
        total = 0.0
        for idx in self.micro_batches(rows, batch.lengths):
            if self.trims_heap:
                trim(TRIM_MIN_FREE)  # specrl/heap.py
            mb, packed = self._micro_batch(batch, idx)
            T = mb.input_ids.shape[1]
            out = self._forward(mb, packed, idx)
            # [b, T] (the lm-head in bf16 under autocast; logprobs and entropies in fp32)
            hook = self.logits_hook if self.algo.updates_per_step == 1 else None  # else `old` showed it the rows
            logp, entropy = self._logprobs(self.model, out.last_hidden, mb, packed, hook=hook, idx=idx)
            if old is None:
                seen[idx, :T] = logp.detach().cpu()
                computed[idx] = True
            old_mb = old[idx, :T].to(self.device) if old is not None else logp.detach()  # [b, T]
            weights = None
            if is_cap is not None:
                weights = truncated_importance_ratio(old_mb, mb.gen_logp, is_cap) * mb.mask  # [b, T]
                sums["is_ratio"] += float(weights.sum() / n_tok)
                sums["is_truncated"] += float(((weights >= is_cap) * mb.mask).sum() / n_tok)  # tokens at the cap
            pl = self.policy_loss(logp, old_mb, mb.advantages, self.algo.clip_low, self.algo.clip_high, weights)
            loss = aggregate(pl.loss, mb.mask, mode, self.norm_len, denom)
            if ref is not None:
                kl = kl_penalty(self.algo.kl_estimator, logp, ref[idx, :T].to(self.device))  # [b, T]
                loss = loss + self.algo.kl_coef * aggregate(kl, mb.mask, mode, self.norm_len, denom)
                sums["kl"] += float((kl.detach() * mb.mask).sum() / n_tok)
            if self.model.mtp is not None and self.algo.mtp_coef > 0:
                with self.autocast():
                    last = out.last_hidden if packed is None else packed.unpack(out.last_hidden)  # [b, T, D]
                    mtp = mtp_loss(self.model, last, mb) * (mb.mask.sum() / n_tok)
                loss = loss + self.algo.mtp_coef * mtp
                sums["mtp_loss"] += float(mtp.detach())
            loss.backward()
            total += float(loss.detach())
            sums["entropy"] += float((entropy * mb.mask).sum() / n_tok)
            sums["clip_frac"] += float((pl.clipped.float() * mb.mask).sum() / n_tok)
        grad_norm = clip_grad(self.model, self.optim_cfg.grad_clip)
        if not (math.isfinite(total) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(f"loss={total} grad_norm={grad_norm} is not finite; the update was skipped")
        self.optimizer.step()
        self.scheduler.step()
        sums["loss"] += total
        sums["grad_norm"] += grad_norm
        sums["lr"] += lr
        sums.setdefault("kl", 0.0)


def _hook_sink(hook: LogitsHook, idx: Tensor, mb: TrainBatch, packed: Packed | None, at: Tensor
               ) -> Callable[[Tensor, Tensor, int], None]:
    """head_logprobs' sink for micro-batch `mb` (rows `idx`), whose head runs at flat positions `at`: the hook
    sees the tokens of its rows, once."""
    # [b, T] the positions of the flat layout, in row-major order (all of them when padded), then those in `at`
    valid = torch.ones_like(mb.targets, dtype=torch.bool) if packed is None else packed.valid
    where = valid.nonzero()[at.to(valid.device)].cpu()  # [k, 2] (row in the micro-batch, position) per offset
    shown: set[int] = set()  # chunks already shown: a checkpointed chunk's backward recomputes its logits

    def sink(logits: Tensor, targets: Tensor, start: int) -> None:
        if start in shown:
            return
        shown.add(start)
        at = where[start:start + len(targets)]  # [n, 2]
        rows = idx[at[:, 0]]  # [n]
        keep = hook.rows[rows]  # [n] bool
        if bool(keep.any()):
            sel = keep.nonzero()[:, 0].to(logits.device)  # [k]
            hook(logits[sel], targets[sel], rows[keep], at[keep, 1])
    return sink


def mtp_loss(model: CausalLM, last_hidden: Tensor, mb: TrainBatch) -> Tensor:
    """Cross-entropy of the MTP modules on the rollout tokens, averaged over depths and response tokens. The trunk,
    embeddings and lm_head they read are detached, so this loss never changes the policy the RL objective trains."""
    head = model.lm_head.weight.detach()
    depth_logits = model.mtp.unroll(last_hidden.detach(), mb.input_ids, lambda ids: model.embed(ids).detach(),
                                    lambda h: F.linear(h, head), model.mtp.depth)
    losses = []
    for d, logits in enumerate(depth_logits, start=1):  # logits [b, T-d, V] predict targets[:, d:]
        ce = F.cross_entropy(logits.flatten(0, 1), mb.targets[:, d:].flatten(), reduction="none")  # [b*(T-d)]
        mask = mb.mask[:, d:].flatten()  # [b*(T-d)]
        losses.append((ce * mask).sum() / mask.sum().clamp(min=1))
    return torch.stack(losses).mean() if losses else last_hidden.new_zeros(())
