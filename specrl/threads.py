"""How many torch threads a command should use: the cores that are free now, unless the user says."""
from __future__ import annotations

import os


def free_cpus() -> int:
    """os.cpu_count() minus the 1-minute load average (other jobs' busy cores), at least 1."""
    total = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not available on this platform
        load = 0.0
    return max(1, total - int(round(load)))


def set_threads(n: int | None) -> int:
    if n is not None and n < 1:
        raise ValueError(f"--threads {n}: expected a positive number of CPU threads (or leave it out to use "
                         "the free cores)")
    import torch
    n = n or free_cpus()
    torch.set_num_threads(n)
    return n


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AMX or AVX512-BF16). Without it (AVX2 only) torch
    emulates bf16 matmuls, slower than fp32, so bf16 autocast would cost time instead of saving it."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags
