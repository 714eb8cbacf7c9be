"""RL rollout workload: prompts per step, group size, prompt and response-length distributions."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

LENGTH_KEYS = ("response_lengths", "rollout_lengths", "lengths", "response_lens")


class LengthDist(Protocol):
    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Lognormal:
    median: float
    sigma: float

    def sample(self, size, rng):
        return np.maximum(1, np.round(self.median * np.exp(self.sigma * rng.standard_normal(size))))

    def describe(self):
        return f"lognormal(median={self.median:g}, sigma={self.sigma:g})"


@dataclass(frozen=True)
class Empirical:
    lengths: tuple[int, ...]
    source: str = "list"

    def sample(self, size, rng):
        return rng.choice(np.asarray(self.lengths), size=size, replace=True)

    def describe(self):
        arr = np.asarray(self.lengths)
        return f"empirical({self.source}: n={arr.size}, mean={arr.mean():.0f}, max={arr.max()})"


@dataclass(frozen=True)
class Workload:
    prompts_per_step: int
    n: int  # group size (samples per prompt)
    prompt_len: int
    lengths: LengthDist
    max_tokens: int

    def __post_init__(self):
        if min(self.prompts_per_step, self.n, self.max_tokens) < 1 or self.prompt_len < 0:
            raise ValueError(f"workload needs prompts_per_step, n, max_tokens >= 1 and prompt_len >= 0,"
                             f" got {self.prompts_per_step}, {self.n}, {self.max_tokens}, "
                             f"{self.prompt_len}")

    @property
    def num_seqs(self) -> int:
        return self.prompts_per_step * self.n

    def sample_lengths(self, rng: np.random.Generator) -> np.ndarray:
        """Response lengths of one step [num_seqs]; the cap is where "length" finishes come from."""
        raw = self.lengths.sample(self.num_seqs, rng)  # [N]
        return np.clip(raw, 1, self.max_tokens).astype(np.int64)


def parse_lengths(spec: str) -> LengthDist:
    """"lognormal:MEDIAN,SIGMA", "list:1,2,3" or a trace path (file or specrl run directory)."""
    kind, _, rest = spec.partition(":")
    if kind == "lognormal":
        try:
            median, sigma = (float(x) for x in rest.split(","))
        except ValueError:
            raise ValueError(f"bad lengths spec {spec!r}; expected lognormal:MEDIAN,SIGMA "
                             "e.g. lognormal:2000,0.8") from None
        return Lognormal(median, sigma)
    if kind == "list":
        return Empirical(tuple(int(x) for x in rest.split(",") if x), "list")
    return load_length_trace(spec)


def load_length_trace(path: str | Path) -> LengthDist:
    """Response lengths from a JSON list, a one-number-per-line file, or JSONL rows holding a list
    under one of LENGTH_KEYS; a directory is searched for metrics.jsonl / rollout_lengths.*. A
    `specrl train` metrics.jsonl (per-step p50/p99 only) gives the log-normal with those quantiles."""
    p = Path(path)
    if p.is_dir():
        cands = sorted(p.glob("rollout_lengths.*")) + sorted(p.glob("**/metrics.jsonl"))
        if not cands:
            raise FileNotFoundError(f"run directory {str(p)!r} has no rollout_lengths.* or "
                                    "metrics.jsonl; pass a lengths file instead.")
        p = cands[0]
    if not p.exists():
        raise FileNotFoundError(f"length trace {str(p)!r} not found; expected a file or a run "
                                "directory, or use lognormal:MEDIAN,SIGMA / list:L1,L2,...")
    text = p.read_text()
    lengths = _parse_lengths_text(text)
    if lengths:
        return Empirical(tuple(lengths), p.name)
    quantiles = _lognormal_from_quantiles(text)
    if quantiles is None:
        raise ValueError(f"no response lengths found in {str(p)!r}; expected numbers, or JSONL rows "
                         f"with one of the keys {LENGTH_KEYS} or response_len_p50/p99.")
    return quantiles


def _lognormal_from_quantiles(text: str) -> Lognormal | None:
    """Median of the per-step p50s and p99s; sigma from p99 = median * exp(2.326 sigma)."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]
    rows = [r for r in rows if "response_len_p50" in r and "response_len_p99" in r]
    if not rows:
        return None
    p50 = float(np.median([r["response_len_p50"] for r in rows]))
    p99 = float(np.median([r["response_len_p99"] for r in rows]))
    return Lognormal(max(p50, 1.0), max(np.log(max(p99, 1.0) / max(p50, 1.0)), 0.0) / 2.326)


def _parse_lengths_text(text: str) -> list[int]:
    text = text.strip()
    if text.startswith("["):
        return [int(x) for x in json.loads(text)]
    out: list[int] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if not line.startswith("{"):
            out.append(int(float(line)))
            continue
        row = json.loads(line)
        for key in LENGTH_KEYS:
            if isinstance(row.get(key), list):
                out.extend(int(x) for x in row[key])
                break
    return out
