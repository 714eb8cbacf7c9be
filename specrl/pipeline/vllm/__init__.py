"""`pipeline.backend=vllm`: vLLM as the rollout engine behind the seam, trained by the in-process learner.

vLLM is imported only when the backend is built (`build.require_vllm` is the seam's check hook), so the core
imports without it. docs/vllm.md has the install, what maps onto what, and what vLLM cannot express.
"""
