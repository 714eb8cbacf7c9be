"""Offline EAGLE-3 head training: self-distillation with training-time test (TTT).

Unroll step j at sequence index t sits at position t+j: it reads token x_{t+1+j} and, as hidden input, the
fused target features (j = 0) or its own pre-norm output of step j-1 (j > 0), exactly as `propose` does.
Its attention sees the real prefix (step-0 entries of indices <= t) and its own chain's earlier drafts. Its
logits are matched to the policy's distribution at t+1+j (stored as top k plus tail mass:
training.data.topk_cross_entropy) on response positions, step j weighted `unroll_decay`^j.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence

from ...model import load_model, resolve_dtype
from ...errors import require
from ...trainer.trainer import head_chunk_tokens
from ..training.cache import data_digest, save, teacher_path
from ..training.data import (DrafterTrainArgs, Pair, TokenBatch, TopK, fit, index_batches, pad_batch,
                             topk_cross_entropy, topk_probs)
from .export import draft_vocab, token_counts, with_draft_vocab
from .head import Eagle3Config, Eagle3Head, init_head, save_head


@dataclass
class Eagle3Options:
    ttt_steps: int = 7
    unroll_decay: float = 0.8  # weight of unroll step j is unroll_decay^j
    layers: tuple[int, ...] | None = None  # target layers to fuse; None: default_layers(L)
    intermediate_size: int | None = None  # head MLP width; None: the policy's
    # None: draft over the target's vocabulary with its lm_head. N: the N tokens most frequent in the training
    # responses, with the head's own [N, D] lm_head (started from the target's rows) and EAGLE-3's d2t map
    draft_vocab_size: int | None = None

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        require(self.ttt_steps >= 1, "ttt_steps", self.ttt_steps, ">= 1")
        require(0 < self.unroll_decay <= 1, "unroll_decay", self.unroll_decay, "in (0, 1]")
        require(self.draft_vocab_size is None or self.draft_vocab_size >= 1, "draft_vocab_size",
                self.draft_vocab_size, ">= 1, or None for the target's whole vocabulary")


def shift_left(x: torch.Tensor, n: int) -> torch.Tensor:
    """x[:, t] <- x[:, t+n], zero-filled past the end (n >= 1). x: [B, T, ...]."""
    return torch.cat([x[:, n:], torch.zeros_like(x[:, :n])], dim=1)


def ttt_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
                  query_index: torch.Tensor | None = None) -> torch.Tensor:
    """q: [B, H, W, d] at sequence indices `query_index` [B, W] (None: every index, W = T); keys/values[0]:
    step-0 entries [B, Hkv, T, d], read causally (indices <= the query's); keys/values[i>0]: the chain's
    step-i entries [B, Hkv, W, d], read only in the query's own column (the diagonal). -> [B, H, W, d]."""
    B, H, W, d = q.shape
    T = keys[0].shape[2]
    rep = H // keys[0].shape[1]
    ks = [k.repeat_interleave(rep, dim=1) for k in keys]  # [B, H, T | W, d] each
    vs = [v.repeat_interleave(rep, dim=1) for v in values]
    scale = d ** -0.5
    if query_index is None:
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # [T, T]
    else:
        causal = (torch.arange(T, device=q.device) <= query_index[..., None])[:, None]  # [B, 1, W, T]
    s0 = (q @ ks[0].transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))  # [B, H, W, T]
    diag = [(q * k).sum(-1, keepdim=True) * scale for k in ks[1:]]  # [B, H, W, 1] each
    p = torch.softmax(torch.cat([s0, *diag], dim=-1).float(), dim=-1).to(q.dtype)  # [B, H, W, T+j]
    out = p[..., :T] @ vs[0]  # [B, H, W, d]
    for i, v in enumerate(vs[1:]):
        out = out + p[..., T + i:T + i + 1] * v
    return out


def take(x: torch.Tensor, index: torch.Tensor | None, dim: int = 1) -> torch.Tensor:
    """x [B, ..., T (at dim), ...] at per-row indices index [B, W] -> the same with W at dim (None: x)."""
    if index is None:
        return x
    shape = [index.shape[0]] + [1] * (x.dim() - 1)
    shape[dim] = index.shape[1]
    return x.gather(dim, index.view(shape).expand(*x.shape[:dim], index.shape[1], *x.shape[dim + 1:]))


def ttt_unroll(head: Eagle3Head, policy, features: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor,
               steps: int, query_index: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Logits [B, W, Vd] of each unroll step (Vd: the draft vocabulary, V without one); step j at index t
    predicts token t+2+j. features: the three target layers' outputs concatenated [B, T, 3D]; ids, positions:
    [B, T]; query_index [B, W]: the indices whose chains are unrolled (None: all, W = T). Only the step-0
    keys and values cover every index (each chain reads its whole prefix); the rest is done at W indices,
    so unrolling only where a loss is taken costs W/T of the full unroll."""
    h = head.fc(features)  # [B, T, D]
    with torch.no_grad():
        emb = policy.embed(ids)  # [B, T, D]
    q, k, v = head.qkv(h, shift_left(emb, 1), positions)  # [B, H | Hkv, T, hd]: step 0 at every index
    q, h = take(q, query_index, dim=2), take(h, query_index)  # [B, H, W, hd], [B, W, D]
    keys, values, logits = [k], [v], []
    for j in range(steps):
        if j > 0:
            q, k, v = head.qkv(h, take(shift_left(emb, 1 + j), query_index), take(positions, query_index) + j)
            keys.append(k)
            values.append(v)
        h = head.finish(h, ttt_attention(q, keys, values, query_index))  # [B, W, D] pre-norm, fed to the next step
        logits.append(head.draft_logits(h, policy))  # [B, W, Vd] (Vd = V without a draft vocabulary)
    return logits


class Queries(NamedTuple):
    index: torch.Tensor  # [b, W] sequence indices, the picked ones first, in order
    valid: torch.Tensor  # [b, W] float, 0 where a row has fewer than W picked indices (padding)


def queries(picked: torch.Tensor) -> Queries:
    """picked [b, T] bool -> the picked indices of each row, padded to the most any row has."""
    T = picked.shape[1]
    ar = torch.arange(T, device=picked.device)
    order = torch.where(picked, ar, T + ar).argsort(dim=1)  # [b, T] picked first, each group in order
    W = max(int(picked.sum(1).max()), 1)
    index = order[:, :W]  # [b, W]
    return Queries(index, picked.gather(1, index).float())


def loss_queries(mask: torch.Tensor, ttt_steps: int) -> Queries:
    """The indices whose TTT chains are unrolled online: those where some unroll step takes a loss."""
    return queries(sum(shift_left(mask, 1 + j) for j in range(ttt_steps)) > 0)  # [b, T] step j: mask[t+1+j]


class Teacher(NamedTuple):
    """The frozen policy's outputs per training sequence, computed once (bf16 to keep them small)."""
    features: list[torch.Tensor]  # [T_i, 3D]: the fused layers' outputs, concatenated
    probs: list[TopK]  # [T_i, k] each: the policy's next-token distribution at temperature 1, top k + tail


@torch.no_grad()
def precompute_teacher(policy, data: list[Pair], layers: tuple[int, ...], batch_tokens: int,
                       autocast: bool, topk: int = 0) -> Teacher:
    """Features and top-`topk` distributions (0: the whole vocabulary) of every sequence, in bf16/int32."""
    wanted = tuple(sorted(set(layers)))
    features, probs = [None] * len(data), [None] * len(data)
    lengths = [len(p) + len(r) for p, r in data]
    order = sorted(range(len(data)), key=lengths.__getitem__)
    while order:
        T = lengths[order[-1]]  # longest first: sets the padded width
        idx = [order.pop() for _ in range(min(len(order), max(1, batch_tokens // T)))]
        batch = pad_batch([data[i] for i in idx])
        with torch.autocast(next(policy.parameters()).device.type, dtype=torch.bfloat16, enabled=autocast):
            out = policy(batch.ids, batch.positions, hidden_layers=wanted, compute_logits=False)
            top = chunked_topk(policy.lm_head, out.last_hidden, topk)  # [B, T, k] each
        feats = torch.cat([out.hidden[wanted.index(i)] for i in layers], dim=-1).bfloat16()  # [B, T, 3D]
        for b, i in enumerate(idx):
            features[i] = feats[b, :lengths[i]].clone()
            probs[i] = TopK(top.probs[b, :lengths[i]].bfloat16(), top.ids[b, :lengths[i]].int())
    return Teacher(features, probs)


def cached_teacher(policy, data: list[Pair], layers: tuple[int, ...], args: DrafterTrainArgs) -> Teacher:
    """`precompute_teacher`, read from / written to `args.cache_dir` when set; a cached file made over other
    sequences (another digest of `data`) is recomputed."""
    if not args.cache_dir:
        return precompute_teacher(policy, data, layers, args.batch_tokens, args.bf16_autocast, args.teacher_topk)
    path, digest = teacher_path(args.cache_dir, layers, args.teacher_topk, args.bf16_autocast), data_digest(data)
    if path.is_file():
        saved = torch.load(path)
        if saved["data"] == digest:
            return Teacher(saved["features"], [TopK(p, i) for p, i in saved["probs"]])
    teacher = precompute_teacher(policy, data, layers, args.batch_tokens, args.bf16_autocast, args.teacher_topk)
    save(path, {"data": digest, "features": teacher.features, "probs": [tuple(t) for t in teacher.probs]})
    return teacher


def chunked_topk(lm_head: torch.nn.Linear, hidden: torch.Tensor, k: int) -> TopK:
    """`topk_probs(lm_head(hidden), k)` for hidden [B, T, D], `head_chunk_tokens` tokens at a time: with
    k > 0 the [B, T, V] logits never exist at once (k = 0 asks for whole rows, which are then the result)."""
    B, T, D = hidden.shape
    flat, step = hidden.reshape(B * T, D), head_chunk_tokens(lm_head.out_features)
    parts = [topk_probs(lm_head(flat[i:i + step]), k) for i in range(0, B * T, step)]  # from [n, V] logits each
    return TopK(torch.cat([p.probs for p in parts]).view(B, T, -1), torch.cat([p.ids for p in parts]).view(B, T, -1))


def ttt_loss(head: Eagle3Head, policy, batch: TokenBatch, features: torch.Tensor, target: TopK,
             opts: Eagle3Options) -> tuple[torch.Tensor, list[float]]:
    """Weighted TTT loss and each step's top-1 agreement with the policy (a proxy for greedy acceptance).
    features: [B, T, 3D]; target: the policy's top-k distribution, [B, T, k] each."""
    total, agree = 0.0, []
    for j, logits in enumerate(ttt_unroll(head, policy, features, batch.ids, batch.positions, opts.ttt_steps)):
        p = TopK(*(shift_left(t, 1 + j) for t in target))  # [B, T, k] each
        mask = shift_left(batch.loss_mask, 1 + j)  # [B, T]
        total = total + opts.unroll_decay ** j * topk_cross_entropy(logits, p, mask)
        with torch.no_grad():
            hit = (logits.argmax(-1) == p.ids[..., 0]) & mask  # top-k is sorted: entry 0 is the argmax
            agree.append(float(hit.sum() / mask.sum().clamp(min=1)))
    return total, agree


def train_head(head: Eagle3Head, policy, data: list[Pair], args: DrafterTrainArgs, opts: Eagle3Options,
               on_log=None) -> dict:
    """Trains the head only (the policy is frozen) with the shared drafter loop."""
    policy.requires_grad_(False)
    teacher = cached_teacher(policy, data, head.config.target_hidden_layers, args)
    full_to_draft = head.draft_id_of  # teacher tokens outside a draft vocabulary go to the rest bucket (id -1)

    def loss_fn(idx):
        batch = pad_batch([data[i] for i in idx])
        features = pad_sequence([teacher.features[i] for i in idx], batch_first=True)  # [B, T, 3D]
        target = TopK(*(pad_sequence(list(t), batch_first=True)
                        for t in zip(*(teacher.probs[i] for i in idx))))  # [B, T, k] each
        if full_to_draft is not None:
            target = TopK(target.probs, full_to_draft[target.ids.long()])
        loss, agree = ttt_loss(head, policy, batch, features.to(torch.get_default_dtype()), target, opts)
        return loss, [round(a, 3) for a in agree]

    batches = index_batches([len(p) + len(r) for p, r in data], args.batch_tokens, args.seed)
    cfg = head.config
    identity = {"method": "eagle3", "vocab_size": cfg.vocab_size, "draft_vocab_size": cfg.draft_vocab_size or
                cfg.vocab_size, "target_hidden_layers": list(cfg.target_hidden_layers)}
    metrics = fit(head, loss_fn, batches, args, on_log, identity)
    metrics["top1_agree_by_step"] = metrics.pop("info") or []
    return metrics


def train(policy_path, out_dir, data: list[Pair], args: DrafterTrainArgs, opts: Eagle3Options | None = None,
          on_log=None) -> dict:
    """Trains an EAGLE-3 head for the policy at `policy_path` on `data` and saves it to `out_dir`."""
    opts = opts or Eagle3Options()
    torch.manual_seed(args.seed)
    policy = load_model(policy_path)
    cfg = Eagle3Config.for_target(policy.config, opts.layers, opts.intermediate_size)
    head = init_head(cfg, seed=args.seed)
    vocab = {"draft_vocab_size": cfg.vocab_size}
    if opts.draft_vocab_size is not None and opts.draft_vocab_size < cfg.vocab_size:
        counts = token_counts([r for _, r in data], cfg.vocab_size)
        head = with_draft_vocab(head, policy.lm_head.weight.detach(), draft_vocab(counts, opts.draft_vocab_size))
        vocab = {"draft_vocab_size": opts.draft_vocab_size,  # and the share of the responses' tokens it can draft
                 "draft_vocab_coverage": round(float(counts[head.target_ids].sum() / counts.sum().clamp(min=1)), 4)}
    metrics = train_head(head, policy, data, args, opts, on_log)
    save_head(head, out_dir, dtype=resolve_dtype(args.save_dtype))
    return {"method": "eagle3", "out_dir": str(out_dir), "target_hidden_layers": list(cfg.target_hidden_layers),
            **vocab, "num_params": sum(p.numel() for p in head.parameters()), "sequences": len(data), **metrics}

