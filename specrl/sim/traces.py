"""Engine traces: synthesise them from the simulator (for tests and what-ifs), and recover the
workload of a recorded run (prompt length, response lengths) from a trace or its sidecar meta."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from specrl.sim.des import Engine, SDSetting, simulate_replica


def synthesize(engine: Engine, lengths, prompt_len: int, slots: int, sd: SDSetting | None,
               method: str | None, seed: int = 0, noise: float = 0.0) -> list[dict]:
    """Rows in the engine trace schema for one generate() call, timed by the simulator itself,
    with optional multiplicative log-normal timing noise."""
    rng = np.random.default_rng(seed)
    tr = simulate_replica(engine, np.asarray(lengths), prompt_len, slots, sd, rng)
    jitter = np.exp(noise * rng.standard_normal((2, tr.t.size)))  # [2, J]
    k = sd.acceptance.k if sd else 0
    emitted = np.round(tr.emitted).astype(int)  # [J]
    rows, clock = [], 0.0
    for j in range(tr.t.size):
        active, spec = int(tr.active[j]), bool(tr.spec[j])
        draft_s = float(tr.draft_t[j] * jitter[0, j])
        verify_s = float((tr.t[j] - tr.draft_t[j]) * jitter[1, j])
        clock += draft_s + verify_s
        rows.append({"step": j, "t": clock, "phase": "spec" if spec else
                     ("prefill" if j == 0 else "decode"), "active": active,
                     "tokens_in": int(tr.tokens_in[j]), "k": k if spec else 0,
                     "draft_tokens": active * k if spec else 0,
                     "accepted_tokens": max(0, int(emitted[j]) - active) if spec else 0,
                     "emitted_tokens": int(emitted[j]), "draft_s": draft_s, "verify_s": verify_s,
                     "other_s": 0.0, "method": method if spec else None,
                     "model_params": engine.model.total_params,
                     "context_len_mean": float(tr.ctx_sum[j] / max(active, 1))})
    return rows


def write_jsonl(rows: list[dict], path: str | Path) -> None:
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))


def meta_path(trace: str | Path) -> Path:
    return Path(str(trace) + ".meta.json")


def load_meta(trace: str | Path, rows: list[dict]) -> dict:
    """The sidecar `<trace>.meta.json` if present, else the workload reconstructed from the trace."""
    p = meta_path(trace)
    if p.exists():
        return json.loads(p.read_text())
    return meta_from_trace(rows, name=Path(trace).stem)


def meta_from_trace(rows: list[dict], name: str = "trace") -> dict:
    """Assumes one generate() call without queueing: the batch only shrinks, and a sequence that
    leaves after step j has emitted as many tokens as the average sequence up to j."""
    active = np.array([r["active"] for r in rows], dtype=np.int64)  # [R]
    per_seq = np.array([r["emitted_tokens"] for r in rows]) / np.maximum(active, 1)  # [R]
    cum = np.cumsum(per_seq)  # [R]
    drops = np.maximum(active[:-1] - active[1:], 0)
    lengths = np.repeat(np.round(cum[:-1]), drops).tolist() + [round(cum[-1])] * int(active[-1])
    spec = [r for r in rows if r.get("phase") == "spec"]
    return {"name": name, "prompt_len": int(rows[0]["tokens_in"] / max(rows[0]["active"], 1)),
            "response_lens": [int(x) for x in lengths], "max_num_seqs": int(active.max()),
            "k": int(max((r["k"] for r in rows), default=0)),
            "method": spec[0]["method"] if spec else None, "workload": name}
