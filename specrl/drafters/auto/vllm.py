"""`auto` on vLLM. vLLM runs one drafter for every sequence with a draft length fixed per batch size, so `auto`
becomes the first of its `drafters` this vLLM runs, with a batch-size -> k schedule fitted by specrl's cost
model (`batch_schedule`); no per-sequence drafter or draft length, no refitting."""
from __future__ import annotations

from dataclasses import replace

from ...engine.methods import SpecConfig, get_method
from ..vllm import UnsupportedMethod, checkpoint_params

# per-position acceptance assumed by `auto`'s schedule: vLLM's schedule is fixed at start-up, so it cannot
# learn the run's own acceptance as specrl's adaptive engine does
AUTO_ACCEPTANCE_PRIOR = 0.7


def vllm_config(spec: SpecConfig, ctx) -> dict:
    skipped, opts = [], spec.options[spec.method]
    for name in opts.drafters:
        try:
            config = get_method(name).vllm_config(replace(spec, method=name), ctx)
        except UnsupportedMethod as e:
            skipped.append(f"{name}: {e}")
            continue
        drafter_params = checkpoint_params(config["model"]) if get_method(name).trainable else 0
        schedule = batch_schedule(checkpoint_params(ctx.policy_dir), drafter_params, spec.num_speculative_tokens,
                                  ctx.max_num_seqs, opts.cost_profile)
        return {**config, "num_speculative_tokens_per_batch_size": schedule}
    raise UnsupportedMethod(f"'auto' found no drafter among {list(opts.drafters)} that this vLLM runs "
                            f"({'; '.join(skipped)})")


def batch_schedule(target_params: int, drafter_params: int, k_max: int, max_batch: int,
                   profile: str | None = None, acceptance: float = AUTO_ACCEPTANCE_PRIOR) -> list[list[int]]:
    """vLLM's [[first batch, last batch, k], ...]: per batch size b the k in 0..k_max with the most expected
    tokens per second, b * (1 + a + ... + a^k) / (target(b (k + 1) tokens) + drafter(b k tokens, k steps)),
    under specrl's cost model (a saved profile, else counted work), priced over an empty cache: vLLM fixes k
    per batch size, not per context, so a saved profile's attention term goes unread here."""
    from ...engine.adaptive.cost_model import CostModel
    cost = CostModel(target_params, {"d": drafter_params}, deterministic=True)
    if profile is not None:
        cost.load_profile(profile)

    def rate(b: int, k: int) -> float:
        tokens = sum(acceptance ** i for i in range(k + 1))
        return b * tokens / (cost.target_s(b * (k + 1), b) + cost.draft_s("d", b * k, k))

    best = [max(range(k_max + 1), key=lambda k: rate(b, k)) for b in range(1, max_batch + 1)]
    ranges: list[list[int]] = []
    for b, k in enumerate(best, start=1):
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = b
        else:
            ranges.append([b, b, k])
    return ranges
