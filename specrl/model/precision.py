"""`dtype: auto`: the precision this hardware runs the model's own matrix products fastest in.

A CPU's bf16 speed is not known from its flags: with AMX or AVX512-BF16 oneDNN multiplies bf16 several times faster
than fp32 at 64 rows and more, yet at one row (decode at batch 1) bf16 may lose, and on an AVX2-only CPU it loses
everywhere. So auto times the model's linears and lm_head at the row counts the run will use (decode at batch 1
and at the run's batch, the verify shape), in fp32 and in bf16, and picks bf16 only where it is clearly faster
over one forward at each row count. The figures are cached per CPU, torch version, thread count and shape set in
a small JSON file (SPECRL_CACHE_DIR, else ~/.cache/specrl). SPECRL_AUTO_DTYPE=float32 (or bfloat16) makes auto
a fixed choice without a probe (the test suite's setting: results that do not depend on the machine). A probe
taken while the machine was busy (load average above its CPUs + 1) answers for its own run but is not cached, and
a cached one taken so (or before the load was recorded) is measured again: a starved probe's figures can be off
by 100x. On a CUDA device auto picks bf16 where the device supports it, without a probe. Sampling, logprobs,
losses and optimizer state stay fp32 whatever is chosen.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .. import io
from .config import ModelConfig
from .packed import PackedLinear, can_pack

log = logging.getLogger(__name__)

FIXED_ENV = "SPECRL_AUTO_DTYPE"
CACHE_FILE = "precision.json"
MARGIN = 1.2  # bf16 is chosen when fp32 takes at least this much longer over the probed shapes
NAMES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
         "float16": torch.float16, "fp16": torch.float16, "half": torch.float16}
CHOICES = ("auto", "float32", "bfloat16", "float16")  # what an error lists (float16 on a GPU only)


class Gemm(NamedTuple):
    m: int  # rows (tokens in the forward)
    k: int  # in features
    n: int  # out features
    count: int  # calls per forward (the layers)


Timer = Callable[[Gemm, torch.dtype, torch.device], float]  # seconds per call


@dataclass
class Precision:
    """The dtype a run uses, why, and (when probed) the probe's milliseconds per forward by row count."""
    dtype: torch.dtype
    requested: str
    reason: str  # "forced", "cuda", "probe", "cached probe", "probe on a busy machine, not cached", ...
    fp32_ms: dict[int, float] = field(default_factory=dict)
    bf16_ms: dict[int, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    @property
    def bf16_speedup(self) -> float | None:
        """fp32 / bf16 time over the probed row counts; None without a probe."""
        if not self.fp32_ms:
            return None
        return sum(self.fp32_ms.values()) / sum(self.bf16_ms.values())

    def describe(self) -> str:
        if not self.fp32_ms:
            return f"dtype={self.requested}: {self.name} ({self.reason})"
        rows = ", ".join(f"{m} rows {self.fp32_ms[m]:.3g} / {self.bf16_ms[m]:.3g}" for m in sorted(self.fp32_ms))
        return (f"dtype={self.requested}: {self.name} ({self.reason}; the model's GEMMs, ms per forward fp32 / "
                f"bf16: {rows}; bf16 {self.bf16_speedup:.2f}x overall, chosen at >= {MARGIN}x)")

    def to_json(self) -> dict:
        return {"dtype": self.name, "requested": self.requested, "reason": self.reason,
                "fp32_ms": {str(m): v for m, v in self.fp32_ms.items()},
                "bf16_ms": {str(m): v for m, v in self.bf16_ms.items()}, "bf16_speedup": self.bf16_speedup,
                "margin": MARGIN}


def parse_dtype(dtype, device) -> torch.dtype | None:
    """`dtype` (a name or a torch dtype) as a torch dtype, None for "auto"; unknown names and float16 on a CPU fail
    with the fix."""
    if isinstance(dtype, torch.dtype):
        dt = dtype
    elif dtype == "auto":
        return None
    elif dtype in NAMES:
        dt = NAMES[dtype]
    else:
        raise ValueError(f"dtype={dtype!r} is unknown: use one of {list(CHOICES)} (auto measures which is faster "
                         "here)")
    if dt == torch.float16 and torch.device(device).type == "cpu":
        raise ValueError(f"dtype={dtype!r} is not supported on the CPU (no fp16 matrix units; its logprobs would "
                         "drift): use dtype=auto, bfloat16 or float32")
    return dt


def model_gemms(cfg: ModelConfig, rows: list[int]) -> list[Gemm]:
    """The linears of one forward of `cfg`'s model (attention, MLP, lm_head) at each row count."""
    h, L, hd = cfg.hidden_size, cfg.num_layers, cfg.head_dim
    out = []
    for m in sorted(set(rows)):
        out += [Gemm(m, h, cfg.num_heads * hd, L), Gemm(m, h, cfg.num_kv_heads * hd, 2 * L),  # q; k and v
                Gemm(m, cfg.num_heads * hd, h, L),  # o
                Gemm(m, h, cfg.intermediate_size, 2 * L), Gemm(m, cfg.intermediate_size, h, L),  # gate, up; down
                Gemm(m, h, cfg.vocab_size, 1)]  # lm_head
    return out


def engine_rows(max_num_seqs: int, draft_tokens: int) -> list[int]:
    """Decode at batch 1 and at the engine's batch, and (with SD) the verify forward of the full batch."""
    rows = {1, max_num_seqs}
    if draft_tokens:
        rows.add(max_num_seqs * (draft_tokens + 1))
    return sorted(rows)


PROBE_ROUNDS = 3  # each shape timed this many times per dtype, the dtypes alternating; the best is kept


def time_gemm(g: Gemm, dtype: torch.dtype, device: torch.device) -> float:
    """Seconds per linear call of shape `g`, one short run after a warm-up, through the kernel the engine runs:
    `F.linear`, or the pre-packed one for bf16 on a CPU (specrl.model.packed)."""
    x = torch.randn(g.m, g.k, device=device).to(dtype)  # [m, k]
    w = torch.randn(g.n, g.k, device=device).to(dtype)  # [n, k]
    call = (lambda: F.linear(x, w))
    if can_pack(w):
        linear = nn.Linear(g.k, g.n, bias=False, device="meta")
        linear.weight = nn.Parameter(w, requires_grad=False)  # [n, k]: the weight above, no init of its own
        packed = PackedLinear(linear)
        call = (lambda: packed(x))
    with torch.no_grad():
        call()  # warm-up: oneDNN builds its kernel for the shape on the first call (and packs the weight)
        reps = max(1, min(200, int(2e7 / (2 * g.m * g.k * g.n))))  # ~1 ms each at 20 GFLOP/s
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / reps


def probe(gemms: list[Gemm], device, timer: Timer = time_gemm) -> tuple[dict[int, float], dict[int, float]]:
    """ms per forward in fp32 and in bf16 at each row count: each shape timed `PROBE_ROUNDS` times per dtype, the
    dtypes alternating, the best kept (another job on the machine only slows a run down, and alike for both)."""
    device = torch.device(device)
    ms = {torch.float32: {}, torch.bfloat16: {}}
    for g in gemms:
        best = {dt: float("inf") for dt in ms}
        for _ in range(PROBE_ROUNDS):
            for dt in ms:
                best[dt] = min(best[dt], timer(g, dt, device))
        for dt, per_rows in ms.items():
            per_rows[g.m] = per_rows.get(g.m, 0.0) + 1e3 * g.count * best[dt]
    return ms[torch.float32], ms[torch.bfloat16]


def machine_load() -> float:
    """The 1-minute load average (0 where the OS does not give one)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def busy(load: float | None) -> bool:
    """Whether a probe taken at `load` (None: not recorded) may have been starved of the CPU."""
    return load is None or load > (os.cpu_count() or 1) + 1


def cache_path() -> Path:
    return io.cache_dir() / CACHE_FILE


def cache_key(gemms: list[Gemm], device) -> str:
    """What the figures depend on: the CPU (model and bf16 flags), torch, the thread count and the shapes."""
    return json.dumps({"cpu": cpu_name(), "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "kernels": "bf16 packed" if can_pack(torch.zeros(1, dtype=torch.bfloat16)) else "plain",
                       "device": str(device), "gemms": [list(g) for g in gemms]}, sort_keys=True)


def cpu_name() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in info.splitlines()[:40] if ":" in line)}
    flags = set(fields.get("flags", "").split())
    name = " ".join(fields.get(k, "") for k in ("model name", "cpu family", "model"))
    return f"{name} {' '.join(sorted(flags & {'amx_bf16', 'avx512_bf16', 'avx512f', 'avx2'}))}".strip()


def read_cache(path: Path) -> dict:
    """The cached probes; a corrupt file is reported and measured again (never a failed run)."""
    return io.read_cache(path, _well_formed, "precision probe", "{key: {fp32_ms: {rows: ms}, bf16_ms: {rows: ms}}}")


def _well_formed(entry) -> bool:
    return isinstance(entry, dict) and all(
        isinstance(entry.get(k), dict) and entry[k] and all(isinstance(v, (int, float)) and v > 0 and m.isdigit()
                                                            for m, v in entry[k].items())
        for k in ("fp32_ms", "bf16_ms"))


def write_cache(path: Path, cache: dict) -> None:
    io.write_cache(path, cache, "precision probe")


def choose_dtype(requested, device, cfg: ModelConfig, rows: list[int], timer: Timer | None = None) -> Precision:
    """The dtype to run `cfg`'s model in: `requested` when forced, else (auto) bf16 on a CUDA device that has it,
    and on a CPU the probe's answer for the model's GEMMs at `rows` (timed by `timer`, default `time_gemm`)."""
    choice = _choose(requested, device, cfg, rows, timer or time_gemm)
    log.info(choice.describe())
    return choice


def _choose(requested, device, cfg: ModelConfig, rows: list[int], timer: Timer) -> Precision:
    dt = parse_dtype(requested, device)
    name = requested if isinstance(requested, str) else str(requested).removeprefix("torch.")
    if dt is not None:
        return Precision(dt, name, "forced")
    if os.environ.get(FIXED_ENV):
        fixed = parse_dtype(os.environ[FIXED_ENV], device)
        if fixed is None:
            raise ValueError(f"{FIXED_ENV}=auto: set it to float32 or bfloat16, or unset it to measure")
        return Precision(fixed, name, f"{FIXED_ENV}={os.environ[FIXED_ENV]}")
    device = torch.device(device)
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported()
        return Precision(torch.bfloat16 if bf16 else torch.float32, name, "cuda" if bf16 else "cuda without bf16")
    if device.type != "cpu":
        return Precision(torch.float32, name, "no probe on this device")
    gemms = model_gemms(cfg, rows)
    path, key = cache_path(), cache_key(gemms, device)
    cache = read_cache(path)
    hit = cache.get(key)
    if hit is not None and busy(hit.get("load")):
        log.warning("the cached precision probe in %s was taken on a busy machine (load %s on %d CPUs): measuring "
                    "again", path, hit.get("load", "not recorded"), os.cpu_count() or 1)
        hit = None
    if hit is not None:
        fp32, bf16 = ({int(m): float(v) for m, v in hit[k].items()} for k in ("fp32_ms", "bf16_ms"))
        reason = "cached probe"
    else:
        fp32, bf16 = probe(gemms, device, timer)
        reason, load = "probe", machine_load()
        if busy(load):
            reason = "probe on a busy machine, not cached"
            log.warning("dtype=auto probed while the machine was busy (load %.1f on %d CPUs): its answer holds for "
                        "this run only, and the next start measures again", load, os.cpu_count() or 1)
        else:
            cache[key] = {"fp32_ms": fp32, "bf16_ms": bf16, "load": round(load, 2),
                          "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
            write_cache(path, cache)
    faster = sum(fp32.values()) >= MARGIN * sum(bf16.values())
    return Precision(torch.bfloat16 if faster else torch.float32, name, reason, dict(fp32), dict(bf16))
