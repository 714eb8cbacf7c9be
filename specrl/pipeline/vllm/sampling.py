"""specrl's SamplingParams onto vLLM's, and vLLM's finished outputs back into specrl's RequestOutputs.

The engine is built with `logprobs_mode="processed_logprobs"`: vLLM then reports each sampled token's
log-prob under the temperature-scaled distribution (greedy rows at temperature 1), which is what specrl's
engine reports and the trainer recomputes. vLLM renormalises those over the top-k / top-p set, specrl does
not, so a request with top_k or top_p set is refused rather than given logprobs of another distribution.
End-of-sequence ids are passed as stop ids (with vLLM's own EOS off), so both engines stop on the same set.
"""
from __future__ import annotations

import json
from pathlib import Path

from ...engine import CompletionOutput, RequestOutput, SamplingParams


def eos_ids(model_dir) -> frozenset[int]:
    """The ids that end a sequence, as specrl's engine takes them: config.json's and generation_config.json's."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        path = Path(model_dir) / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            ids |= set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    return frozenset(ids)


def to_vllm(sp: SamplingParams, eos: frozenset[int]):
    """One vLLM SamplingParams (final outputs only: nothing streams back before a request ends)."""
    if sp.top_p < 1.0 or sp.top_k != -1:
        raise ValueError(f"top_p={sp.top_p}, top_k={sp.top_k}: with pipeline.backend=vllm only top_p=1.0 and "
                         "top_k=-1 are supported (vLLM reports logprobs renormalised over the top-k/top-p set, "
                         "specrl's trainer scores the temperature-scaled distribution): drop them, or use "
                         "pipeline.backend=local")
    from vllm import SamplingParams as VllmParams
    from vllm.sampling_params import RequestOutputKind
    stop = set(sp.stop_token_ids or ()) | (set() if sp.ignore_eos else set(eos))
    return VllmParams(n=sp.n, temperature=sp.temperature, top_p=1.0, top_k=0, seed=sp.seed,
                      max_tokens=sp.max_tokens, min_tokens=sp.min_tokens, stop_token_ids=sorted(stop) or None,
                      ignore_eos=True, stop=sp.stop, include_stop_str_in_output=sp.include_stop_str_in_output,
                      logprobs=sp.logprobs or 0, skip_special_tokens=sp.skip_special_tokens,
                      repetition_penalty=sp.repetition_penalty, detokenize=sp.stop is not None,
                      output_kind=RequestOutputKind.FINAL_ONLY)


def to_specrl(out, request_id: int, sp: SamplingParams, eos: frozenset[int], version: int) -> RequestOutput:
    """A finished vLLM RequestOutput as specrl's: every token tagged with the weights `version` (vLLM's
    weights change only between generate() calls here)."""
    completions = []
    for c in sorted(out.outputs, key=lambda c: c.index):
        tokens = list(c.token_ids)
        # with logprobs=0 each position holds the sampled token (plus the top-N when asked)
        logprobs = [float(pos[t].logprob) for pos, t in zip(c.logprobs, tokens)]
        top = ([{k: float(v.logprob) for k, v in pos.items()} for pos in c.logprobs]
               if sp.logprobs is not None else None)
        own_stop = c.stop_reason if c.stop_reason not in eos or c.stop_reason in (sp.stop_token_ids or ()) else None
        completions.append(CompletionOutput(c.index, tokens, logprobs, c.finish_reason, c.text or None, top,
                                            own_stop, [(0, version)] if tokens else []))
    return RequestOutput(request_id, None, list(out.prompt_token_ids), completions)
