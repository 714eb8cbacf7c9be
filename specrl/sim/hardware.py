"""Accelerator specs: public datasheet peaks plus a "cpu-local" entry fitted from engine traces.

Numbers are dense (no 2:4 sparsity), per GPU, SXM parts. Sources:
- H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet (2023): 989 TFLOP/s bf16, 1979 fp8,
  3.35 TB/s HBM3, 80 GB, NVLink 4 900 GB/s; ConnectX-7 400 Gb/s NIC per GPU (DGX H100).
- H200 SXM: NVIDIA H200 datasheet (2024): same tensor cores as H100, 4.8 TB/s HBM3e, 141 GB.
- B200 (HGX B200): NVIDIA DGX B200 datasheet: 72 PFLOP/s fp8 training per 8 GPUs -> 4.5 PF fp8,
  2.25 PF bf16 dense; 8 TB/s HBM3e, 180 GB; NVLink 5 1.8 TB/s; 400 Gb/s ConnectX-7 per GPU.
- GB200 (NVL72, per GPU): NVIDIA GB200 NVL72 datasheet: 360 PF bf16 / 720 PF fp8 sparse per 72
  GPUs -> 2.5 PF bf16, 5 PF fp8 dense; 13.4 TB HBM3e / 72 -> 186 GB, 8 TB/s; NVLink 5 1.8 TB/s;
  800 Gb/s ConnectX-8 per GPU.

`eff_bw` / `eff_flops` are the fractions of peak that a tuned inference engine reaches (memory-bound
decode kernels reach ~80% of HBM bandwidth, GEMMs ~60-70% of peak); a fitted entry uses 1.0
because its peaks are already effective numbers.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

GB = 1e9
TB = 1e12


@dataclass(frozen=True)
class Overheads:
    """Per-iteration costs that a roofline misses (scheduling, sampling, kernel launches)."""

    iter_s: float = 1.0e-3  # fixed per engine step (GPU default: CUDA-graph decode, vLLM-like)
    per_seq_s: float = 5.0e-6  # per active sequence (bookkeeping, sampling)
    per_token_s: float = 0.0  # per token fed to the target forward
    per_kv_token_s: float = 0.0  # per cached token attended (un-overlapped KV reads, e.g. CPU)
    prefill_token_s: float = 0.0  # extra per prompt token prefilled
    spec_iter_s: float = 3.0e-4  # extra per SD step: rejection sampling, KV bookkeeping
    spec_per_seq_s: float = 0.0  # extra per sequence of an SD step (drafter bookkeeping of accepted tokens)
    draft_iter_s: float = 0.0  # per SD step, drafter's fixed cost (n-gram lookup, launches)
    draft_per_seq_s: float = 0.0  # per active sequence and draft step (n-gram / suffix matching)
    sync_fixed_s: float = 0.3  # per weight sync: gather, NCCL group setup, engine cache reset
    train_step_s: float = 0.0  # per RL step of training beyond 6 N tokens / (peak MFU): optimizer, launch


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    peak_flops: float  # bf16 dense FLOP/s
    peak_flops_fp8: float
    hbm_bw: float  # bytes/s
    hbm_bytes: float
    nvlink_bw: float  # bytes/s per GPU, one direction
    net_bw: float  # bytes/s per GPU across nodes
    gpus_per_node: int = 8
    eff_bw: float = 0.8
    eff_flops: float = 0.65
    comm_latency_s: float = 8e-6  # per all-reduce (NCCL small-message latency)
    overheads: Overheads = field(default_factory=Overheads)

    @property
    def bw(self) -> float:
        """Achievable memory bandwidth, bytes/s."""
        return self.hbm_bw * self.eff_bw

    @property
    def flops(self) -> float:
        """Achievable bf16 FLOP/s."""
        return self.peak_flops * self.eff_flops


HARDWARE: dict[str, HardwareSpec] = {
    "H100": HardwareSpec("H100", 989e12, 1979e12, 3.35 * TB, 80 * GB, 450 * GB, 50 * GB),
    "H200": HardwareSpec("H200", 989e12, 1979e12, 4.8 * TB, 141 * GB, 450 * GB, 50 * GB),
    "B200": HardwareSpec("B200", 2250e12, 4500e12, 8.0 * TB, 180 * GB, 900 * GB, 50 * GB),
    "GB200": HardwareSpec("GB200", 2500e12, 5000e12, 8.0 * TB, 186 * GB, 900 * GB, 100 * GB,
                          gpus_per_node=72),
}


def get_hardware(name: str, calibration: str | Path | None = None) -> HardwareSpec:
    """Look up a spec by name; "cpu-local" (or a calibration path) loads a fitted entry."""
    if calibration is not None or name == "cpu-local":
        path = Path(calibration or "calibration.json")
        if not path.exists():
            raise FileNotFoundError(
                f"calibration file {str(path)!r} not found; hardware 'cpu-local' needs one. "
                "Create it with `specrl simulate calibrate --traces T.jsonl --out calibration.json`.")
        return load_calibrated(path)
    if name not in HARDWARE:
        raise ValueError(f"unknown hardware {name!r}; expected one of "
                         f"{sorted(HARDWARE) + ['cpu-local']}. Pass --hardware NAME.")
    return HARDWARE[name]


def hardware_to_dict(hw: HardwareSpec) -> dict:
    return asdict(hw)


def hardware_from_dict(d: dict) -> HardwareSpec:
    d = dict(d)
    d["overheads"] = Overheads(**d.get("overheads", {}))
    return HardwareSpec(**d)


def load_calibrated(path: str | Path) -> HardwareSpec:
    """Read the "hardware" block that `specrl simulate calibrate` wrote."""
    data = json.loads(Path(path).read_text())
    if "hardware" not in data:
        raise ValueError(f"{str(path)!r} has no 'hardware' block; expected the output of "
                         "`specrl simulate calibrate`.")
    return hardware_from_dict(data["hardware"])
