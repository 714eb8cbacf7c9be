"""What the commands (`specrl generate`, `specrl train-drafter`) and the benchmarks (`specrl bench ...`) share:
the policy, where and how it runs, and its KV cache. It sits below both specrl.cli and specrl.bench, so that
neither imports the other's modules (the CLI names the benches by module only)."""
from __future__ import annotations

import argparse

import torch

AS_TRAIN = object()  # --threads left out of a bench (specrl/bench/common.py base_parser)


def add_runtime_args(ap: argparse.ArgumentParser, threads_default: str = "the free cores") -> None:
    """The flags of the policy, where and how it runs, and its KV cache (specrl.engine.memory)."""
    from .engine.memory import DEFAULT_MEMORY_UTILIZATION
    ap.add_argument("--model", default=None, help="HF checkpoint dir (default: the embedded policy)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="cpu or cuda (default: cuda where torch sees a GPU)")
    ap.add_argument("--dtype", default="auto", help="auto (default: bf16 where the model's GEMMs run clearly faster "
                    "in it here, else fp32; specrl/model/precision.py), float32 or bfloat16")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (each prompt gets its own from it)")
    ap.add_argument("--threads", type=int, default=None, help=f"torch CPU threads (default: {threads_default})")
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="context length per sequence (default: what the KV budget gives, capped by the model)")
    ap.add_argument("--kv-cache-memory", default=None, help="KV cache budget, e.g. 2GiB (default: a fraction of "
                    "the free memory, --memory-utilization)")
    ap.add_argument("--memory-utilization", type=float, default=DEFAULT_MEMORY_UTILIZATION,
                    help="fraction of the free memory the KV cache may take when --kv-cache-memory is not given")


def parse_args(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`ap.parse_args(argv)`, then torch's thread count from --threads (left out: the free cores, or in a bench
    torch's default, recorded in args.threads)."""
    args = ap.parse_args(argv)
    if args.threads is AS_TRAIN:
        args.threads = torch.get_num_threads()
    else:
        from .threads import set_threads
        set_threads(args.threads)
    return args


def engine(args: argparse.Namespace, path: str, max_num_seqs: int, spec=None):
    """An LLM on --device and --dtype, its KV cache sized by `add_runtime_args`' options."""
    from . import LLM
    return LLM(path, device=args.device, dtype=args.dtype, spec=spec, max_num_seqs=max_num_seqs,
               max_model_len=args.max_model_len, kv_cache_memory=args.kv_cache_memory,
               memory_utilization=args.memory_utilization)


def policy_path(path: str | None, flag: str = "--model DIR") -> str:
    """`path`, or the embedded policy's directory when it is not given."""
    if path:
        return path
    from .errors import MissingFileError
    from .tasks import default_policy_path
    try:
        return str(default_policy_path())
    except FileNotFoundError as e:
        raise MissingFileError(f"{e}, or pass {flag}") from e
