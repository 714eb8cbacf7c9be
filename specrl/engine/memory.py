"""How big the engine's KV cache is, slots x max_model_len, from a memory budget (`kv_cache_memory` bytes, else
`memory_utilization` x the memory free once the weights are loaded); and its zeroed storage.

Without `max_model_len` the longest context that gives each of `max_num_seqs` slots a row is used; with one,
fewer slots when the budget cannot hold them all. A model drafter's own cache comes on top. On a CPU the cache
is an anonymous private mapping (`kv_zeros`), so resident memory follows the positions sequences reach; the
budget respects a cgroup's limit and an address-space limit (RLIMIT_AS, `ulimit -v`), which that mapping must
fit in whole although little of it becomes resident. Against paged blocks: docs/memory.md.
"""
from __future__ import annotations

import errno
import math
import mmap
import re
import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError
from ..model import ModelConfig, check_device, resolve_dtype
from ..model.attention import KVCache, LayerKV
from ..model.precision import parse_dtype
from .methods import MAX_SPEC_TOKENS

# positions a KV cache keeps past a sequence's budget: a verify forward writes its drafts and the bonus there
SPARE = MAX_SPEC_TOKENS + 1

DEFAULT_MEMORY_UTILIZATION = 0.5  # of the free memory; the rest stays for activations and other processes
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def parse_bytes(value: int | float | str) -> int:
    """4096, "512MiB", "2GB", "1.5GiB" -> bytes."""
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(f"kv_cache_memory={value!r} is not a size: use bytes (4294967296) or a number with a "
                         f"unit, e.g. 512MiB, 4GiB, 2GB")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


CGROUP_ROOT = Path("/sys/fs/cgroup")
NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a huge page-aligned number


def proc_bytes(path: str, key: str) -> int | None:
    """Field `key` (in kB) of a /proc status file such as /proc/meminfo, in bytes; None where it is absent."""
    p = Path(path)
    lines = p.read_text().splitlines() if p.is_file() else []
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith(key)), None)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text == "max" or not text.isdigit() or int(text) >= NO_LIMIT else int(text)


def cgroup_free(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """Bytes the process's memory cgroup has left (memory.max - memory.current on cgroup v2,
    memory.limit_in_bytes - memory.usage_in_bytes on v1); None without a limit."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # v2: one unified hierarchy
            files = root / rel / "memory.max", root / rel / "memory.current"
        elif "memory" in controllers.split(","):
            files = root / "memory" / rel / "memory.limit_in_bytes", root / "memory" / rel / "memory.usage_in_bytes"
        else:
            continue
        limit, used = _read_int(files[0]), _read_int(files[1])
        if limit is not None and used is not None:
            return max(limit - used, 0)
    return None


def address_space_free() -> int | None:
    """Bytes of address space left under RLIMIT_AS (its soft limit minus VmSize); None without a limit."""
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return None
    return max(limit - (proc_bytes("/proc/self/status", "VmSize:") or 0), 0)


def free_memory(device: str | torch.device) -> int:
    """Bytes free on `device` now: the CUDA driver's, or on a CPU MemAvailable or the cgroup's, whichever is less."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    free = [b for b in (proc_bytes("/proc/meminfo", "MemAvailable:"), cgroup_free()) if b is not None]
    if not free:
        raise RuntimeError("cannot read free memory (no /proc/meminfo MemAvailable on this system): pass "
                           "kv_cache_memory=BYTES to size the KV cache")
    return min(free)


def kv_bytes_per_token(cfg: ModelConfig, dtype) -> int:
    """Keys and values of one position in every layer."""
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * resolve_dtype(dtype).itemsize


@dataclass(frozen=True)
class KVPlan:
    num_slots: int
    max_model_len: int
    bytes: int  # what the target's cache takes (slots x (max_model_len + spare) x bytes per token)
    dtype: torch.dtype
    budget: int
    # False when the budget cut max_model_len below both the model's limit and the user's: a request that
    # would then stop early at the context limit is an error instead (memory must never change results)
    hard_limit: bool

    def describe(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return (f"KV cache: {self.num_slots} slots x max_model_len {self.max_model_len}, "
                f"{self.bytes / 2 ** 20:.1f} MiB {dtype} (budget {self.budget / 2 ** 20:.1f} MiB)")


DEFAULT_FIX = "raise kv_cache_memory (or memory_utilization)"


class AddressSpaceError(UserError, MemoryError):
    """The KV cache's mapping does not fit in the address space the process may still take."""


def plan_kv_cache(cfg: ModelConfig, dtype, max_num_seqs: int, max_model_len: int | None, budget: int,
                  spare: int, knobs: str = DEFAULT_FIX) -> KVPlan:
    """Slots and context length that fit `budget` bytes. Each slot holds `spare` extra positions (room for
    the drafts a verify forward writes past a sequence's end). `knobs` says how to raise the budget."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs={max_num_seqs}: expected >= 1 concurrent sequences")
    per_token = kv_bytes_per_token(cfg, dtype)
    limit = cfg.max_position_embeddings
    if max_model_len is not None:
        if max_model_len < 2:
            raise ValueError(f"max_model_len={max_model_len}: expected >= 2 (a prompt token and a new one)")
        length = min(max_model_len, limit)
        slots = min(max_num_seqs, budget // ((length + spare) * per_token))
        if slots < 1:
            need = (length + spare) * per_token
            raise ValueError(f"the KV budget of {budget} bytes cannot hold one sequence of max_model_len={length} "
                             f"({need} bytes at {per_token} bytes per position): {knobs} to >= {need}, "
                             f"or lower max_model_len")
        hard = True
    else:
        slots = max_num_seqs
        length = min(limit, budget // (slots * per_token) - spare)
        if length < 2:
            need = slots * (2 + spare) * per_token
            raise ValueError(f"the KV budget of {budget} bytes is too small for max_num_seqs={slots} sequences "
                             f"({per_token} bytes per position, {2 + spare} positions at least): {knobs} to "
                             f">= {need}, or lower max_num_seqs")
        hard = length == limit
    return KVPlan(slots, length, slots * (length + spare) * per_token, resolve_dtype(dtype), budget, hard)


def memory_budget(device, kv_cache_memory: int | str | None, memory_utilization: float) -> tuple[int, str]:
    """The KV cache's byte budget and how to raise it: `kv_cache_memory`, else a fraction of the free memory (and,
    on a CPU under an address-space limit, of the address space left: the lazy cache reserves all of it)."""
    if kv_cache_memory is not None:
        budget = parse_bytes(kv_cache_memory)
        if budget <= 0:
            raise ValueError(f"kv_cache_memory={kv_cache_memory!r}: expected a positive size, e.g. 4GiB")
        return budget, "raise kv_cache_memory"
    if not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization={memory_utilization}: expected a fraction in (0, 1] of the free "
                         f"memory, e.g. {DEFAULT_MEMORY_UTILIZATION}; or pass kv_cache_memory=BYTES")
    free = int(free_memory(device) * memory_utilization)
    space = address_space_free() if torch.device(device).type == "cpu" else None
    if space is not None and int(space * memory_utilization) < free:
        return int(space * memory_utilization), (f"raise the address-space limit (ulimit -v: {space} bytes left, "
                                                 f"memory_utilization={memory_utilization} of it)")
    return free, DEFAULT_FIX


def check_dtype(device, dtype) -> torch.dtype:
    """`dtype` (a name or a torch dtype; not "auto", which specrl.model.precision resolves) as a torch dtype, after
    a tiny probe that the device runs the engine's ops in it."""
    dt = parse_dtype(dtype, device)
    if dt is None:
        raise ValueError("dtype='auto' must be resolved first (specrl.model.precision.choose_dtype)")
    if not dt.is_floating_point:
        raise ValueError(f"dtype={dtype!r} is not a floating-point dtype: use float32, bfloat16 or float16")
    device = check_device(device)  # no CUDA here: a clear error before any probe touches it
    if device.type == "cuda" and dt == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ValueError(f"dtype=bfloat16 is not supported by {torch.cuda.get_device_name(device)}: "
                         "use dtype=float16 or float32")
    try:
        x = torch.ones(1, 1, 2, 8, device=device, dtype=dt)  # [B, H, T, D]
        torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
        torch.nn.functional.linear(x, x[0, 0])
    except RuntimeError as e:
        raise ValueError(f"dtype={dtype!r} does not run on device {str(device)!r} ({e}): use float32") from e
    return dt


def kv_zeros(shape: tuple[int, ...], device, dtype) -> torch.Tensor:
    """A zero tensor for a KV cache. On a CPU it lives in a fresh anonymous mapping, so a page becomes
    resident only when written (reads of untouched pages see the kernel's shared zero page; a sandbox kernel,
    as on CI, may commit a page on a read), and `release_kv` can give its pages back."""
    device, dtype = torch.device(device), resolve_dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if device.type != "cpu" or nbytes == 0:
        return torch.zeros(shape, device=device, dtype=dtype)
    try:
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as e:
        if e.errno != errno.ENOMEM:
            raise
        space = address_space_free()
        left = f"; {space} bytes are left under the address-space limit (ulimit -v)" if space is not None else ""
        raise AddressSpaceError(f"cannot reserve {nbytes} bytes of address space for a KV cache{left}: lower "
                                "kv_cache_memory (or memory_utilization), max_model_len or max_num_seqs") from e
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # a 2 MiB huge page would make one written position cost 2 MiB
        region.madvise(mmap.MADV_NOHUGEPAGE)
    tensor = torch.frombuffer(region, dtype=torch.uint8).view(dtype).view(shape)
    tensor._kv_region = region  # for release_kv
    return tensor


def kv_cache(layers: int, num_slots: int, kv_heads: int, max_len: int, head_dim: int, device, dtype,
             spare: int = 0, lazy: bool = True) -> KVCache:
    """K and V per layer, each `kv_shape` (`spare`: rows a drafter keeps for itself); `lazy`: in `kv_zeros`'s
    mapping, whose pages become resident when written, else in ordinary memory (huge pages allowed)."""
    shape = kv_shape(num_slots, kv_heads, max_len, head_dim, spare)
    zeros = kv_zeros if lazy else (lambda shape, device, dtype: torch.zeros(shape, device=device, dtype=dtype))
    return KVCache(LayerKV(zeros(shape, device, dtype), zeros(shape, device, dtype)) for _ in range(layers))


def kv_shape(num_slots: int, kv_heads: int, max_len: int, head_dim: int, spare: int = 0) -> tuple[int, ...]:
    """The target's KV cache and every model drafter's: [num_slots, kv_heads, max_len + SPARE + spare, head_dim]."""
    return num_slots, kv_heads, max_len + SPARE + spare, head_dim


def release_kv(tensor: torch.Tensor) -> bool:
    """Gives a CPU `kv_zeros` tensor's written pages back to the OS (it reads as zeros again); False otherwise."""
    region = getattr(tensor, "_kv_region", None)
    if region is None or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    region.madvise(mmap.MADV_DONTNEED)
    return True


def release_caches(cache: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """`release_kv` on every layer's K and V of a position-indexed cache (the target's or a drafter's)."""
    for k, v in cache:
        release_kv(k)
        release_kv(v)
