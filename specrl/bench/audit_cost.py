"""`specrl bench audit cost`: the audit's work alone, a token at a time, against the update's, at a model's
vocabulary."""
from __future__ import annotations

import json
import time

import torch

from specrl.audit import TokenScorer


def cost(args) -> None:
    """Seconds a token of the audit's scoring, of a forward without gradients (what a skipped row costs) and of
    a forward and backward (the update), on `--model` at its vocabulary: the audit's work alone, for a quiet
    machine. Rows are random tokens: the scoring's cost does not depend on what they are."""
    from specrl.model import load_model
    from specrl.tasks import default_policy_path
    model = load_model(str(args.model or default_policy_path()), dtype=args.dtype or "float32")
    V = model.config.vocab_size
    ids = torch.randint(0, V, (args.rows, args.tokens), generator=torch.Generator().manual_seed(args.seed))
    scorer, n = TokenScorer(1.0), args.rows * args.tokens
    timed = {}

    def update():
        out = model(ids, compute_logits=False).last_hidden  # [b, T, D]
        loss = sum(torch.nn.functional.cross_entropy(model.lm_head(out[i]).float(), ids[i]) for i in range(len(ids)))
        loss.backward()

    def forward():  # as PolicyTrainer.show runs a skipped row's decoder
        with torch.inference_mode():
            model(ids, compute_logits=False)

    def score():
        with torch.no_grad():
            last = model(ids, compute_logits=False).last_hidden
            t0 = time.perf_counter()
            for i in range(len(ids)):
                for k in range(0, args.tokens, 256):
                    logits = model.lm_head(last[i, k:k + 256]).float()  # [h, V]
                    pos = torch.arange(k, k + len(logits))
                    scorer(logits, ids[i, pos], torch.full_like(pos, i), pos)
            return time.perf_counter() - t0
    for name, fn in (("update", update), ("forward", forward), ("score", score)):
        fn()  # warm
        t0 = time.perf_counter()
        got = fn()
        timed[name] = (got if name == "score" else time.perf_counter() - t0) / n
    print(json.dumps({"kind": "cost", "model": str(args.model or "shipped"), "vocab": V, "tokens": n,
                      **{f"{k}_us_a_token": round(v * 1e6, 2) for k, v in timed.items()},
                      "score_over_update": timed["score"] / timed["update"],
                      "skipped_forward_over_update": timed["forward"] / timed["update"]}))
