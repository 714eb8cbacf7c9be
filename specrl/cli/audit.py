"""`specrl audit --model DIR --rollouts FILE.jsonl [--temperature T] [--top-p P] [--top-k K] [--plot FILE.png]`:
were these completions drawn from this model? The sampler audit of `specrl train` (specrl/rl/audit.py) on a
dump from any engine (vLLM, verl, NeMo-RL): each row has `prompt_ids` and `completion_ids`, token ids of the
model's vocabulary, so no tokenizer is read. Prints one JSON line: `p_value` (two-sided), `z` (the weighted
randomized-PIT statistic, N(0, 1) for an exact sampler), `tokens`, and the share of tokens in the PIT's top and
bottom 5%. `--plot` draws the PIT histogram (uniform for an exact sampler). Temperature 0 is greedy: the test
is then identity (every token must be the argmax), not a PIT.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ..errors import InputFormatError, MissingFileError, UserError, pyplot


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


def plot_pit(scores: torch.Tensor, path: Path, title: str) -> None:
    plt = pyplot("--plot")
    u, w = scores[:, 0].numpy(), scores[:, 1].numpy()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, weights, name in ((axes[0], None, "tokens"), (axes[1], w, "weight (1 - max p)")):
        ax.hist(u, bins=20, range=(0, 1), weights=weights, density=True)
        ax.axhline(1.0, color="k", lw=1, ls="--")
        ax.set_xlabel("randomized PIT u (vocabulary by probability, descending)")
        ax.set_ylabel(f"density ({name})")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specrl audit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the policy's checkpoint directory (config + safetensors)")
    ap.add_argument("--rollouts", required=True, type=Path, help="JSONL rows with prompt_ids and completion_ids")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=-1)
    ap.add_argument("--seed", type=int, default=0, help="the audit's own uniforms (randomized PIT)")
    ap.add_argument("--plot", type=Path, default=None, help="PNG of the PIT histogram")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args(argv)
    from ..engine.sampling import SamplingParams
    from ..model import load_model
    from ..rl.audit import step_test
    from ..train.audit import TokenScorer, score_completions
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
    scores = score_completions(model, TokenScorer(args.temperature, args.top_p, args.top_k, args.seed),
                               prompts, completions, rows_per_batch=4)  # [n, 3]
    if len(scores) == 0:
        raise UserError(f"--rollouts {str(args.rollouts)!r}: every completion is empty; nothing to audit")
    t = step_test(scores)
    u = scores[:, 0]
    out.update(test="weighted_randomized_pit", p_value=t.p_value, z=t.z, tokens=t.tokens, weight=t.weight,
               impossible=t.impossible, pit_top5=float((u > 0.95).double().mean()),
               pit_bottom5=float((u < 0.05).double().mean()))
    if args.plot is not None:
        plot_pit(scores, args.plot, f"{args.rollouts.name}: z = {t.z:+.2f}, p = {t.p_value:.2g}, {t.tokens} tokens")
        out["plot"] = str(args.plot)
    print(json.dumps(out))
    return 0
