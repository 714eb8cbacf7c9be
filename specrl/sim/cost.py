"""Cost model: roofline time of one engine iteration, training, weight sync. Pure, vectorised."""
from __future__ import annotations

import numpy as np

from specrl.sim.hardware import HardwareSpec
from specrl.sim.models import ModelSpec

DTYPE_BYTES = 2  # bf16 weights and KV cache


def weight_bytes(model: ModelSpec, tokens_in: np.ndarray, dtype_bytes: int = DTYPE_BYTES):
    """Weight bytes one forward reads [J]: a MoE reads only the experts its tokens route to."""
    tokens_in = np.asarray(tokens_in, dtype=np.float64)  # [J]
    touched = 1.0
    if model.is_moe:  # expected fraction of experts hit by tokens_in independent top-k routings
        touched = 1.0 - (1.0 - model.experts_per_tok / model.num_experts) ** tokens_in  # [J]
    return dtype_bytes * (model.dense_params + model.expert_params * touched)  # [J]


def forward_bytes(model, tokens_in, ctx_sum, dtype_bytes: int = DTYPE_BYTES):
    """Weights plus KV cache read by one forward [J]; ctx_sum = sum of context lengths of the batch."""
    kv = np.asarray(ctx_sum, dtype=np.float64) * model.kv_bytes_per_token(dtype_bytes)  # [J]
    return weight_bytes(model, tokens_in, dtype_bytes) + kv  # [J]


def forward_flops(model, tokens_in, attn_pairs):
    """Matmul FLOPs plus attention FLOPs; attn_pairs = sum over query tokens of keys attended."""
    tokens_in = np.asarray(tokens_in, dtype=np.float64)  # [J]
    attn = 4.0 * model.layers * model.heads * model.head_dim * np.asarray(attn_pairs, np.float64)
    return 2.0 * model.matmul_params * tokens_in + attn  # [J]


def roofline_s(hw: HardwareSpec, model, tp, tokens_in, ctx_sum, attn_pairs):
    """max(bytes / bandwidth, flops / peak) per GPU of a TP group [J], no overheads."""
    t_mem = forward_bytes(model, tokens_in, ctx_sum) / (tp * hw.bw)  # [J]
    t_cmp = forward_flops(model, tokens_in, attn_pairs) / (tp * hw.flops)  # [J]
    return np.maximum(t_mem, t_cmp)  # [J]


def tp_comm_s(hw: HardwareSpec, model, tp, tokens_in):
    """Two all-reduces of the activations per layer (ring: 2 (tp-1)/tp of the bytes)."""
    if tp == 1:
        return np.zeros_like(np.asarray(tokens_in, dtype=np.float64))
    link = hw.nvlink_bw if tp <= hw.gpus_per_node else hw.net_bw
    msg = np.asarray(tokens_in, np.float64) * model.hidden * DTYPE_BYTES  # [J]
    return 2 * model.layers * (hw.comm_latency_s + 2 * (tp - 1) / tp * msg / link)  # [J]


def overhead_s(ov, active, tokens_in, ctx_sum, prefill_tokens, spec):
    """The fitted, linear part of an iteration's time [J] (columns of calibrate.fit_target)."""
    return (ov.iter_s + ov.per_seq_s * np.asarray(active) + ov.per_token_s * np.asarray(tokens_in)
            + ov.per_kv_token_s * np.asarray(ctx_sum) + ov.prefill_token_s * np.asarray(prefill_tokens)
            + (ov.spec_iter_s + ov.spec_per_seq_s * np.asarray(active)) * np.asarray(spec))  # [J]


def target_step_s(hw, model, tp, active, tokens_in, ctx_sum, attn_pairs, prefill_tokens=0.0,
                  spec=0.0):
    """Target forward of one engine iteration plus the fitted overheads [J]."""
    fixed = overhead_s(hw.overheads, active, tokens_in, ctx_sum, prefill_tokens, spec)
    return roofline_s(hw, model, tp, tokens_in, ctx_sum, attn_pairs) + \
        tp_comm_s(hw, model, tp, tokens_in) + fixed  # [J]


def draft_step_s(hw, model, tp, active, ctx_sum, k: int, draft_frac: float):
    """Drafter time per SD iteration [J]: k sequential drafter forwards, each draft_frac of a target
    decode forward, plus the drafter's fixed and per-sequence cost (n-gram matching is all fixed)."""
    ov = hw.overheads
    active = np.asarray(active, dtype=np.float64)  # [J]
    fwd = roofline_s(hw, model, tp, active, ctx_sum, ctx_sum) + tp_comm_s(hw, model, tp, active)
    return k * draft_frac * fwd + ov.draft_iter_s + ov.draft_per_seq_s * active  # [J]


def train_s(hw: HardwareSpec, model: ModelSpec, tokens: float, gpus: int, mfu: float) -> float:
    """Policy update: 6 * N_active * tokens / (gpus * peak * MFU), plus the fixed per-step cost."""
    return 6.0 * model.active_params * tokens / (gpus * hw.peak_flops * mfu) + hw.overheads.train_step_s


def drafter_train_s(hw, params: float, tokens: float, gpus: int, mfu: float) -> float:
    return 6.0 * params * tokens / (gpus * hw.peak_flops * mfu)


def weight_sync_s(hw: HardwareSpec, model: ModelSpec, tp: int, colocated: bool) -> float:
    """Each rollout GPU receives its 1/tp shard: over NVLink/IPC when colocated, else the network."""
    shard = model.total_params * DTYPE_BYTES / tp
    return hw.overheads.sync_fixed_s + shard / (hw.nvlink_bw if colocated else hw.net_bw)


def eagle_draft_frac(model: ModelSpec) -> float:
    """EAGLE-3/MTP head = one dense decoder layer + the shared lm_head, relative to the target's
    bytes per decode step (memory-bound, so bytes decide)."""
    mlp = 3 * model.hidden * (model.intermediate or model.moe_intermediate * model.experts_per_tok)
    head = model.attn_params + mlp + 3 * model.hidden * model.hidden + model.vocab * model.hidden
    return head / float(model.dense_params + model.expert_params * (1 if not model.is_moe else 0.5))


def kv_capacity_seqs(hw: HardwareSpec, model: ModelSpec, tp: int, ctx_per_seq: float) -> int:
    """Sequences whose KV fits beside the weights in a TP group (90% of HBM usable)."""
    free = 0.9 * hw.hbm_bytes * tp - model.total_params * DTYPE_BYTES
    if free <= 0:
        raise ValueError(f"{model.name} ({model.total_params / 1e9:.0f}B params) does not fit on "
                         f"tp={tp} x {hw.name}; raise --tp.")
    return max(1, int(free // (model.kv_bytes_per_token() * ctx_per_seq)))
