"""Runs inside vLLM's worker process (`worker_extension_cls`): vLLM reloads the target's weights itself
(`reload_weights`), not the drafter's, so this adds the same in-place reload for the drafter's model.
Imported by the worker only; vLLM is importable wherever this runs."""
from __future__ import annotations


class DrafterReload:
    """Mixed into vLLM's worker class; called by name through `LLM.collective_rpc`."""

    def reload_drafter(self, weights_path: str) -> int:
        """Loads `weights_path`/model.safetensors into the drafter's model in place (vLLM's layer-wise reload:
        CPU linears are repacked after loading, so a plain copy would not fit them); returns the count."""
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
        return len(tensors)
