"""`specrl export-drafter SRC --out DIR`: a trained drafter in the layout serving engines load.

SRC is a drafter directory or a run directory (its latest checkpoint's `drafter/`, with `model/` as the
policy). An EAGLE-3 head is written for the policy it was trained on (`--model`; checked to fit) in the
public EAGLE-3 layout or `--layout speculators` (docs/drafter_export.md), optionally over a reduced draft
vocabulary (`--draft-vocab-size N`, token frequencies from `--data FILE.jsonl` rows with `token_ids`); a draft
model as a plain Hugging Face checkpoint. MTP modules ship inside the policy checkpoint instead.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import UserError
from ..config.renamed import rename

RENAMED = {"--policy": "--model"}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="specrl export-drafter", description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="a drafter directory, or a run directory (latest checkpoint's drafter/)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--model", help="the policy checkpoint the head drafts for (EAGLE-3: required; checked "
                                     "against the head, its lm_head goes into the export); default for a run "
                                     "directory: the checkpoint's model/")
    ap.add_argument("--draft-vocab-size", type=int, help="EAGLE-3: draft over the N most frequent tokens")
    ap.add_argument("--data", help="JSONL with token_ids per row (`specrl generate` output) to count tokens in")
    ap.add_argument("--dtype", default=None, help="stored dtype, e.g. bfloat16 (default: the head's own)")
    ap.add_argument("--layout", default="eagle3", choices=["eagle3", "speculators"],
                    help="EAGLE-3: LlamaForCausalLMEagle3 (vLLM with method eagle3, SGLang, SpecForge) or the "
                         "speculators format (newer vLLM, method read from the config)")
    ap.add_argument("--verifier", default=None, help="speculators layout: the verifier's path or hub name "
                    "(default: the --model path)")
    ap.add_argument("--speculative-tokens", type=int, default=3, help="speculators layout: the proposal length "
                    "vLLM defaults num_speculative_tokens to")
    ap.add_argument("--allow-last-layer", action="store_true", help="EAGLE-3: export a head that reads the "
                    "policy's last layer (only the newest vLLM capture code serves it) with a warning")
    args = ap.parse_args(rename(argv, RENAMED, "specrl export-drafter"))
    drafter, run_policy = resolve_source(Path(args.src))
    print(json.dumps(exporter_of(drafter)(args, drafter, Path(args.model) if args.model else run_policy)))
    return 0


def resolve_source(src: Path) -> tuple[Path, Path | None]:
    """(drafter dir, policy dir or None). Errors name what is missing and how to get it."""
    if (src / "config.json").is_file() and not (src / "checkpoints").is_dir():
        return src, None
    from ..trainer.checkpoint import latest_checkpoint
    ckpt = latest_checkpoint(src)
    if ckpt is None:
        raise UserError(f"{str(src)!r} is neither a drafter directory (config.json) nor a run directory with "
                        "checkpoints: pass a drafter dir or `specrl train` output")
    drafter = ckpt / "drafter"  # pipeline/learner.py saves it there
    if not (drafter / "config.json").is_file():
        raise UserError(f"the run {str(src)!r} has no model drafter in its latest checkpoint ({str(drafter)!r} "
                        "missing): only runs with spec.method eagle3 or draft_model and online drafter training "
                        "save one; model-free drafters (ngram, suffix) have nothing to export")
    return drafter, ckpt / "model"


def exporter_of(drafter: Path):
    """The export for the checkpoint in `drafter`, told by the architectures its config.json names."""
    from ..drafters.eagle3.head import PUBLIC_ARCHS

    hf = json.loads((drafter / "config.json").read_text())
    if {"Eagle3Head", *PUBLIC_ARCHS} & set(hf.get("architectures", [])):
        return export_head
    if hf.get("num_nextn_predict_layers"):
        raise UserError(f"{str(drafter)!r} holds MTP modules, which have no standalone public layout: ship them "
                        "inside the policy checkpoint (train-drafter --method mtp with mtp_only=False)")
    return export_model


def export_model(args: argparse.Namespace, drafter: Path, policy_dir: Path | None) -> dict:
    """A draft model: a plain Hugging Face checkpoint (it needs no policy)."""
    from ..model import load_model, save_model
    save_model(load_model(drafter), args.out, tokenizer_dir=drafter, dtype=args.dtype)
    return {"method": "draft_model", "out": args.out, "layout": "huggingface"}


def export_head(args: argparse.Namespace, drafter: Path, policy_dir: Path | None) -> dict:
    """An EAGLE-3 head, for the policy it drafts for, in `args.layout`."""
    from ..model import load_model, resolve_dtype
    from ..drafters.eagle3.export import draft_vocab, export_eagle3, token_counts, with_draft_vocab
    from ..drafters.eagle3.head import load_head
    if policy_dir is None:
        raise UserError(f"an EAGLE-3 head is exported for the policy it drafts for (the export checks that the "
                        f"head fits it and copies its lm_head rows and token ids): pass --model DIR for "
                        f"{str(drafter)!r}")
    policy = load_model(policy_dir)
    head = load_head(drafter, dtype=None)  # as stored: the export keeps it
    lm_head = policy.lm_head.weight.detach()
    if args.draft_vocab_size and args.draft_vocab_size != head.config.vocab_size:
        if args.data is None or not Path(args.data).is_file():
            raise UserError(f"--draft-vocab-size needs token frequencies: --data {args.data!r} is not a file (write "
                            "one with `specrl generate --out FILE.jsonl`)")
        rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
        counts = token_counts([r["token_ids"] for r in rows if "token_ids" in r], head.config.vocab_size)
        head = with_draft_vocab(head, lm_head, draft_vocab(counts, args.draft_vocab_size))
    dtype = resolve_dtype(args.dtype) if args.dtype else None
    export_eagle3(head, args.out, policy.config, lm_head, dtype=dtype, layout=args.layout,
                  verifier=args.verifier or str(policy_dir), allow_last_layer=args.allow_last_layer,
                  speculative_tokens=args.speculative_tokens, source=str(drafter))
    return {"method": "eagle3", "out": args.out, "layout": args.layout,
            "draft_vocab_size": head.config.draft_vocab_size or head.config.vocab_size,
            "dtype": str(dtype or next(head.parameters()).dtype).removeprefix("torch.")}
