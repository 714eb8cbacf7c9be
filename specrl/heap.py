"""Freed memory goes back to the OS: glibc's malloc_trim at the points where a process has just freed a lot.

glibc serves a large allocation with its own mmap, unmapped when freed, but raises that threshold (up to
32 MiB) each time such a block is freed, so later tensors of a few MiB come from the heap, whose freed space
stays resident. A training step allocates and frees hundreds of MiB of activations and logits of shifting
sizes; the heap then keeps their high-water mark on top of the weights and optimizer state.
`malloc_trim(0)` hands every free page of the heap back (madvise), at the cost of one walk over it.
On a CPU the trainer calls `trim()` after each micro-batch's backward and after the optimizer step, the
engine when a generate() ends. Measured on SmolLM2-135M's tuned 2-step `specrl train` (docs/real_models.md).

(A fixed 128 KiB mmap threshold, glibc's MALLOC_MMAP_THRESHOLD_, gives the same effect everywhere but
made that run's update 1.66x slower: every activation became a fresh mapping, faulted in page by page.)
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import lru_cache


@lru_cache(maxsize=1)
def _malloc_trim():
    if os.environ.get("SPECRL_MALLOC_TRIM", "1") == "0":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl)
        return None


def trim() -> bool:
    """Gives the heap's free pages back to the OS (glibc); False where there is no malloc_trim or
    SPECRL_MALLOC_TRIM=0 turned it off."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
