"""rollout.spec onto vLLM's `speculative_config`: each method's class says its own (`vllm_config`,
drafters/<method>/method.py), or raises `UnsupportedMethod` naming what is missing."""
from __future__ import annotations

from ...drafters.auto.vllm import AUTO_ACCEPTANCE_PRIOR, batch_schedule  # noqa: F401 (auto's, read by tests)
from ...drafters.vllm import Context, UnsupportedMethod  # noqa: F401 (the methods' vLLM context and refusal)
from ...engine.methods import SpecConfig, get_method, method_names


def speculative_config(spec: SpecConfig, ctx: Context) -> dict | None:
    """vLLM's speculative_config for `spec` (None: SD off); an UnsupportedMethod lists what runs here."""
    if not spec.enabled:
        return None
    try:
        return get_method(spec.method).vllm_config(spec, ctx)
    except UnsupportedMethod as e:
        runs = [name for name in method_names() if get_method(name).vllm_available()]
        raise UnsupportedMethod(f"rollout.spec.method={spec.method!r} cannot run on pipeline.backend=vllm: {e}. "
                                f"Runs here: {runs} (or null: SD off)") from None
