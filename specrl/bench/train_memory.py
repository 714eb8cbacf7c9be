"""Resident memory of one policy forward + chunked lm-head + backward on a real checkpoint, by glibc malloc
setting: where a training micro-batch's RSS goes on a CPU.

Each arm is a fresh process (its own allocator state): MALLOC_MMAP_THRESHOLD_ unset (glibc's dynamic
threshold) or fixed at the given bytes, decoder activation checkpointing on or off. Prints one JSON line per
arm: RSS after the forward, the lm-head and the backward, the sampled peak (every 20 ms), and the forward /
backward seconds (so the speed cost of a setting shows beside its memory).

    specrl bench train-memory --model DIR [--rows 16] [--tokens 252] [--thresholds ,131072,1048576,16777216]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from specrl.errors import UserError
from specrl.runtime import policy_path


def rss_mib() -> float:
    """This process's resident memory now (Linux: /proc/self/statm's resident pages)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def arm(args) -> dict:
    import torch
    from specrl.model import load_model
    from specrl.trainer.trainer import head_logprobs
    torch.set_num_threads(args.threads)
    peak = [0.0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], rss_mib())
            time.sleep(0.02)
    threading.Thread(target=sample, daemon=True).start()
    model = load_model(policy_path(args.model))
    model.train()
    model.checkpoint_layers = args.checkpointing == "on"
    for p in model.parameters():
        p.data = p.data.clone()  # resident now (the checkpoint's tensors are mapped lazily)
    ids = torch.randint(3, model.config.vocab_size - 1, (args.rows, args.tokens))
    time.sleep(0.2)
    start = peak[0] = rss_mib()
    t0 = time.perf_counter()
    out = model(ids, compute_logits=False)
    fwd_s, after_fwd = time.perf_counter() - t0, rss_mib()
    logp, _ = head_logprobs(model.lm_head, out.last_hidden, ids, 1.0, contextlib.nullcontext)
    after_head = rss_mib()
    t0 = time.perf_counter()
    logp.sum().backward()
    bwd_s = time.perf_counter() - t0
    return {"rows": args.rows, "tokens": args.tokens, "checkpointing": args.checkpointing,
            "mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default"),
            "start_mib": round(start), "after_forward_mib": round(after_fwd), "after_head_mib": round(after_head),
            "after_backward_mib": round(rss_mib()), "peak_mib": round(peak[0]),
            "forward_s": round(fwd_s, 1), "backward_s": round(bwd_s, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl bench train-memory", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF checkpoint dir (default: the embedded policy)")
    ap.add_argument("--rows", type=int, default=16, help="rows of the micro-batch")
    ap.add_argument("--tokens", type=int, default=252, help="tokens per row (a 52-token prompt + 200)")
    ap.add_argument("--thresholds", default=",131072,1048576,16777216",
                    help="comma-separated MALLOC_MMAP_THRESHOLD_ values; empty: glibc's default")
    ap.add_argument("--checkpointing", default="on", help="on, off or on,off")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads of each arm")
    ap.add_argument("--arm", action="store_true", help=argparse.SUPPRESS)  # a child: one arm
    args = ap.parse_args(argv)
    if args.arm:
        print("RESULT " + json.dumps(arm(args)), flush=True)
        return 0
    for ckpt in args.checkpointing.split(","):
        for threshold in args.thresholds.split(","):
            env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
            if threshold:
                env["MALLOC_MMAP_THRESHOLD_"] = threshold
            cmd = [sys.executable, "-m", "specrl", "bench", "train-memory", "--arm", "--rows", str(args.rows),
                   "--tokens", str(args.tokens), "--checkpointing", ckpt, "--threads", str(args.threads),
                   *(["--model", args.model] if args.model else [])]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise UserError(f"arm {ckpt} {threshold or 'default'} failed: {proc.stderr.strip()[-2000:]}")
            print(line[len("RESULT "):], flush=True)
    return 0
