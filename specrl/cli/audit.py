"""`specrl audit --model DIR --rollouts FILE.jsonl [--temperature T] [--top-p P] [--top-k K] [--alpha A]
[--out FILE.png]`: were these completions drawn from this model at these settings? The sampler audit of
`specrl train` (specrl/audit/) on a dump from any engine (vLLM, verl, NeMo-RL): each row has `prompt_ids` and
`completion_ids`, token ids of the model's vocabulary, so no tokenizer is read. Prints one JSON line: `e_value`
and `log_e` (the e-process over the file's tokens, row by row), `p_value` (1 / its running maximum: the smallest
alpha it rejects at, exact for any policy), `rejected` at `--alpha`, `tokens`, and the randomized-PIT `z` as a
diagnostic. A dump sampled at other settings than the flags is no error: its e-value says so. `--out` draws
the e-process against 1/alpha. Temperature 0 is greedy: the test is then identity (every token the argmax).

The test takes the rows as independent draws. A dump must not share one seed across prompts (vLLM's per-request
`seed` set to one value for a whole batch does): sample j of every prompt then draws the same uniforms, so the
rows are coupled, and an exact sampler can ring. Seed each prompt apart (`specrl generate --seed` does) or not
at all.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ..config.renamed import rename
from ..errors import InputFormatError, MissingFileError, UserError, pyplot

RENAMED = {"--plot": "--out"}


def read_rollouts(path: Path, vocab_size: int) -> tuple[list[list[int]], list[list[int]]]:
    """(prompt ids, completion ids) per row; a row without either, or with an id outside the vocabulary, is an
    error that names the line."""
    if not path.is_file():
        raise MissingFileError(f"--rollouts {str(path)!r} does not exist; pass a JSONL file of rows with "
                               "prompt_ids and completion_ids")
    prompts, completions = [], []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputFormatError(f"{path}:{n}: not a JSON object ({e.msg})") from e
        for key in ("prompt_ids", "completion_ids"):
            ids = row.get(key) if isinstance(row, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise InputFormatError(f"{path}:{n}: no {key} (a list of token ids); every row needs prompt_ids "
                                       "and completion_ids, e.g. vLLM's prompt_token_ids and outputs[0].token_ids")
            bad = [i for i in ids if not 0 <= i < vocab_size]
            if bad:
                raise InputFormatError(f"{path}:{n}: {key} holds id {bad[0]}, outside the model's vocabulary "
                                       f"[0, {vocab_size}): the rollouts come from another model or tokenizer")
        if not row["prompt_ids"]:
            raise InputFormatError(f"{path}:{n}: prompt_ids is empty; the first completion token needs a context")
        prompts.append(row["prompt_ids"])
        completions.append(row["completion_ids"])
    if not prompts:
        raise InputFormatError(f"--rollouts {str(path)!r} has no rows")
    return prompts, completions


@torch.no_grad()
def greedy_mismatches(model, prompts: list[list[int]], completions: list[list[int]]) -> tuple[int, int]:
    """(tokens that are not the argmax of the model's logits, tokens checked)."""
    bad = total = 0
    for p, c in zip(prompts, completions):
        if not c:
            continue
        logits = model(torch.tensor([p + c[:-1]])).logits[0, len(p) - 1:]  # [r, V]
        bad += int((logits.argmax(-1) != torch.tensor(c)).sum())
        total += len(c)
    return bad, total


def plot_eprocess(path_log_e: torch.Tensor, alpha: float, path: Path, title: str) -> None:
    plt = pyplot("--out")
    from ..audit.plot import draw_eprocess
    fig, ax = plt.subplots(figsize=(7, 4))
    draw_eprocess(ax, list(range(1, len(path_log_e) + 1)), path_log_e.tolist(), alpha)
    ax.set_xlabel("audited tokens (rows in file order)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl audit", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n")[1])
    ap.add_argument("--model", required=True, help="the policy's checkpoint directory (config + safetensors)")
    ap.add_argument("--rollouts", required=True, type=Path, help="JSONL rows with prompt_ids and completion_ids")
    ap.add_argument("--temperature", type=float, default=1.0, help="the temperature the rows were sampled at "
                    "(0: greedy, checked by identity)")
    ap.add_argument("--top-p", type=float, default=1.0, help="the top-p they were sampled with (1: none)")
    ap.add_argument("--top-k", type=int, default=-1, help="the top-k they were sampled with (-1: none)")
    ap.add_argument("--seed", type=int, default=0, help="the audit's own uniforms (the PIT diagnostic)")
    ap.add_argument("--alpha", type=float, default=1e-3, help="the false-alarm probability it rejects at")
    ap.add_argument("--out", type=Path, default=None, metavar="FILE.png", help="PNG of the e-process against 1/alpha (needs matplotlib)")
    ap.add_argument("--dtype", default="float32", help="the model's dtype for scoring: float32 or bfloat16")
    args = ap.parse_args(rename(list(sys.argv[1:] if argv is None else argv), RENAMED, "specrl audit"))
    from ..engine.sampler import SamplingParams
    from ..model import load_model
    from ..audit.offline import audit_completions
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha:g} is outside (0, 1): pass the false-alarm probability to reject at, "
                        "e.g. --alpha 1e-3")
    SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)  # the engine's checks
    model = load_model(args.model, dtype=args.dtype).eval()
    prompts, completions = read_rollouts(args.rollouts, model.config.vocab_size)
    out = {"rows": len(prompts), "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k}
    if args.temperature == 0:
        bad, total = greedy_mismatches(model, prompts, completions)
        print("specrl audit: temperature 0 is greedy: checked by identity (each token must be the argmax), "
              "not by the PIT test", file=sys.stderr)
        out.update(test="greedy_identity", tokens=total, mismatches=bad, p_value=1.0 if bad == 0 else 0.0)
        print(json.dumps(out))
        return 0
    if not any(completions):
        raise UserError(f"--rollouts {str(args.rollouts)!r}: every completion is empty; nothing to audit")
    result, path = audit_completions(model, prompts, completions, args.temperature, args.top_p, args.top_k,
                                     args.seed, args.alpha)
    out.update(result)
    if args.out is not None:
        plot_eprocess(path, args.alpha, args.out, f"{args.rollouts.name}: e = {result['e_value']:.3g}, "
                      f"p = {result['p_value']:.2g}, {result['tokens']} tokens")
        out["plot"] = str(args.out)
    print(json.dumps(out))
    return 0
