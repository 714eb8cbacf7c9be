"""`specrl export-drafter SRC --out DIR`: a trained drafter in the layout serving engines load.

SRC is a drafter directory or a run directory (its latest checkpoint's `drafter/`, with the checkpoint's
`model/` as the policy). An EAGLE-3 head is written in the public EAGLE-3 layout (drafters/eagle3/export.py,
docs/drafter_export.md), optionally over a reduced draft vocabulary (`--draft-vocab-size N` with token
frequencies from `--data FILE.jsonl`, rows with `token_ids` as `specrl generate` writes them); a draft
model is written as a plain Hugging Face checkpoint. MTP modules have no standalone public layout (they
ship inside the policy checkpoint: `specrl train-drafter --method mtp` with mtp_only=False).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import UserError

DRAFTER_SUBDIR = "drafter"


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="specrl export-drafter", description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="a drafter directory, or a run directory (latest checkpoint's drafter/)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--policy", help="the policy checkpoint (EAGLE-3: its lm_head goes into the export); "
                                     "default for a run directory: the checkpoint's model/")
    ap.add_argument("--draft-vocab-size", type=int, help="EAGLE-3: draft over the N most frequent tokens")
    ap.add_argument("--data", help="JSONL with token_ids per row (`specrl generate` output) to count tokens in")
    ap.add_argument("--dtype", default=None, help="stored dtype, e.g. bfloat16 (default: as trained)")
    return ap.parse_args(argv)


def resolve_source(src: Path) -> tuple[Path, Path | None]:
    """(drafter dir, policy dir or None). Errors name what is missing and how to get it."""
    if (src / "config.json").is_file() and not (src / "checkpoints").is_dir():
        return src, None
    from ..train.checkpoint import latest_checkpoint
    ckpt = latest_checkpoint(src)
    if ckpt is None:
        raise UserError(f"{str(src)!r} is neither a drafter directory (config.json) nor a "
                         "run directory with checkpoints: pass a drafter dir or `specrl train` output")
    drafter = ckpt / DRAFTER_SUBDIR
    if not (drafter / "config.json").is_file():
        raise UserError(f"the run {str(src)!r} has no model drafter in its latest checkpoint "
                         f"({str(drafter)!r} missing): only runs with spec.method eagle3 or draft_model and online "
                         "drafter training save one; model-free drafters (ngram, suffix) have nothing to export")
    return drafter, ckpt / "model"


def kind_of(drafter: Path) -> str:
    hf = json.loads((drafter / "config.json").read_text())
    archs = hf.get("architectures", [])
    if "Eagle3Head" in archs or "LlamaForCausalLMEagle3" in archs:
        return "eagle3"
    if hf.get("num_nextn_predict_layers"):
        raise UserError(f"{str(drafter)!r} holds MTP modules, which have no standalone "
                         "public layout: ship them inside the policy checkpoint (train-drafter --method mtp with "
                         "mtp_only=False)")
    return "draft_model"


def counts_from(path: str | None, vocab_size: int):
    from ..drafters.eagle3.export import token_counts
    if path is None or not Path(path).is_file():
        raise UserError(f"--draft-vocab-size needs token frequencies: --data {path!r} "
                         "is not a file (write one with `specrl generate --out FILE.jsonl`)")
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return token_counts([r["token_ids"] for r in rows if "token_ids" in r], vocab_size)


def export(args: argparse.Namespace) -> dict:
    from ..model import load_model, resolve_dtype, save_model
    from ..drafters.eagle3.export import draft_vocab, export_eagle3, with_draft_vocab
    from ..drafters.eagle3.head import load_head
    drafter, run_policy = resolve_source(Path(args.src))
    policy_dir = Path(args.policy) if args.policy else run_policy
    policy = load_model(policy_dir) if policy_dir else None
    dtype = resolve_dtype(args.dtype) if args.dtype else None
    if kind_of(drafter) == "draft_model":
        save_model(load_model(drafter), args.out, tokenizer_dir=drafter, dtype=args.dtype)
        return {"method": "draft_model", "out": args.out, "layout": "huggingface"}
    head = load_head(drafter)
    lm_head = policy.lm_head.weight.detach() if policy is not None else None
    if args.draft_vocab_size and args.draft_vocab_size != head.config.vocab_size:
        if lm_head is None:
            raise UserError("a reduced draft vocabulary takes its lm_head rows from the "
                             "policy: pass --policy DIR")
        ids = draft_vocab(counts_from(args.data, head.config.vocab_size), args.draft_vocab_size)
        head = with_draft_vocab(head, lm_head, ids)
    if head.lm_head is None and lm_head is None:
        raise UserError("the public EAGLE-3 layout stores an lm_head, and this head uses "
                         "the policy's: pass --policy DIR")
    export_eagle3(head, args.out, lm_head, policy.config if policy is not None else None, dtype)
    return {"method": "eagle3", "out": args.out, "layout": "LlamaForCausalLMEagle3",
            "draft_vocab_size": head.config.draft_vocab_size or head.config.vocab_size}


def main(argv: list[str]) -> int:
    print(json.dumps(export(parse(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
