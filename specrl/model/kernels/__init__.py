"""Decode and verify attention over a position-indexed KV cache: our C++ kernel on a CPU, SDPA elsewhere.

    if takes(q, k_cache, v_cache):  # else specrl.model.attention.sdpa_attention
        out = run(q, k_cache, v_cache, slots, positions, scale)
    # q [B, H, T, D] (T = 1 decode, k + 1 verify); k_cache, v_cache [S, Hkv, L, D] one layer's cache; slots [B];
    # positions [B, T]: query (b, t) attends to positions 0..positions[b, t] of slot slots[b] -> [B, H, T, D]

The kernel (decode_attention.cpp, built at first use by `build.load_kernel`) takes CPU tensors in float32 or
bfloat16 with head size 32, 64, 128 or 256, outside autograd; `specrl.model.attention.decode_attention` sends
anything else to the seam's SDPA path, as it does on a machine where the kernel does not build. SPECRL_ATTENTION=sdpa
forces the SDPA path, =kernel the kernel (an error where it cannot run); `kernel_status()` says which path this
machine takes.
"""
from __future__ import annotations

import os

import torch

from specrl.errors import ConfigError

from . import build

ENV = "SPECRL_ATTENTION"
CHOICES = ("sdpa", "kernel")
HEAD_SIZES = (32, 64, 128, 256)
KERNEL_DTYPES = (torch.float32, torch.bfloat16)

_state: dict[str, str | None] = {}  # "reason": None once the kernel loaded, else why not (asked once a process)

__all__ = ["run", "kernel_status", "forced_path", "takes"]


def forced_path() -> str | None:
    """SPECRL_ATTENTION's choice, None when unset; an unknown value is a ConfigError naming the choices."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    if value not in CHOICES:
        raise ConfigError(f"{ENV}={value!r} is invalid: expected one of {', '.join(CHOICES)} "
                          "(unset: the kernel where it builds, else sdpa)")
    return value


def kernel_reason() -> str | None:
    """None when the kernel is loaded (building it on first call), else the one-line reason it is not."""
    if "reason" not in _state:
        _state["reason"] = build.load_kernel()
    return _state["reason"]


def kernel_status() -> str:
    """"kernel" | "sdpa: <reason>": the path decode_attention takes on this machine for CPU float32/bfloat16."""
    if forced_path() == "sdpa":
        return f"sdpa: forced by {ENV}=sdpa"
    reason = kernel_reason()
    return "kernel" if reason is None else f"sdpa: {reason}"


def unsupported(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> str | None:
    """Why the kernel cannot take these inputs, or None when it can."""
    if q.device.type != "cpu" or k_cache.device.type != "cpu":
        return f"device {q.device.type} is not the CPU"
    if q.dtype not in KERNEL_DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        return f"dtypes {q.dtype}/{k_cache.dtype}/{v_cache.dtype} are not one of float32, bfloat16 throughout"
    if q.shape[-1] not in HEAD_SIZES:
        return f"head size {q.shape[-1]} is not one of {', '.join(map(str, HEAD_SIZES))}"
    if torch.is_grad_enabled() and (q.requires_grad or k_cache.requires_grad or v_cache.requires_grad):
        return "inputs that need gradients"
    return None


def takes(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether `attention.decode_attention` runs the kernel on these inputs; SPECRL_ATTENTION=kernel where it
    cannot is a ConfigError naming the reason."""
    forced = forced_path()
    if forced == "sdpa":
        return False
    why = unsupported(q, k_cache, v_cache) or kernel_reason()
    if why is not None and forced == "kernel":
        raise ConfigError(f"{ENV}=kernel, but the kernel cannot run here: {why}; unset {ENV} (or set it to "
                          "sdpa) to take the SDPA path")
    return why is None


def run(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
        positions: torch.Tensor, scale: float) -> torch.Tensor:
    """The kernel itself, on inputs it `takes`: q [B, H, T, D] over one layer's cache [S, Hkv, L, D] at slots [B],
    each query up to its own position (positions [B, T]) -> [B, H, T, D] in q's dtype. Each row reads only its
    own length."""
    return torch.ops.specrl_kernels.decode_attention(q, k_cache, v_cache, slots, positions, float(scale))
