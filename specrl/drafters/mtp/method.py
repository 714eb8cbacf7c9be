"""`mtp`: the policy's multi-token-prediction modules (DeepSeek-V3) chained as a drafter (drafter.py), trained
offline with the policy frozen (train.py) or online. Torch-free at import: each member imports what it runs."""
from __future__ import annotations

from pathlib import Path

from ...engine.methods import SpecConfig
from ..base import WithWeights


class MTP(WithWeights):
    name = "mtp"
    defers = False  # its modules read the next inputs, so it observes every step
    train_settings = None  # `specrl train-drafter` has no MTP settings

    # ---- the engine
    def load(self, draft_model: str | None, target, num_slots: int, max_len: int):
        from .drafter import load_drafter
        return load_drafter(draft_model, self.shipped_dir, target, num_slots, max_len)

    @property
    def module_class(self):
        from ...model.mtp import MTPStack
        return MTPStack

    def scratch(self, policy, seed: int = 0):
        """Two modules (drafts past the second reuse the last): a small stack to train."""
        from .train import init_stack
        return init_stack(policy, 2, seed)

    def engine_drafter(self, module, target, num_slots: int, max_len: int):
        from .drafter import MTPDrafter
        return MTPDrafter(target, module, num_slots, max_len)

    # ---- training
    def capture_layers(self, module) -> tuple[int, ...]:
        from ..training.capture import LAST
        return (LAST,)  # its modules read the policy's final normed hidden state

    def draft_ids(self, module) -> None:
        return None  # it drafts over the policy's whole vocabulary

    def online_logits(self, trainer, mb) -> list:
        """(weight, draft logits, policy logits, mask) per depth d = 1..mtp_depths, weighted unroll_decay^(d-1),
        normalised; each depth against the policy's distribution at its own offset."""
        from ..training.capture import LAST
        depths = trainer.module.unroll(mb.hidden[LAST].float(), mb.input_ids, trainer.view.embed,
                                       trainer.view.lm_head, trainer.cfg.mtp_depths)  # depth d: [b, T-d, V]
        decay = trainer.cfg.unroll_decay
        norm = sum(decay ** d for d in range(len(depths))) or 1.0
        # entry i of depth d predicts t_{i+d+1}: the policy's distribution at index i+d
        return [(decay ** (d - 1) / norm, logits, mb.logits[:, d:d + logits.shape[1]],
                 mb.mask[:, d:d + logits.shape[1]]) for d, logits in enumerate(depths, start=1)]

    def cli_train(self, ns, on_log=None):
        from .train import train
        return train  # `specrl train-drafter` has no MTP options

    def save(self, module, policy, path, dtype: str | None = None):
        from .drafter import save_mtp_only
        return save_mtp_only(module, policy.config, path, dtype=dtype)

    # ---- vLLM and the simulator
    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        from ..vllm import UnsupportedMethod
        raise UnsupportedMethod("vLLM runs MTP only for architectures whose checkpoints carry their own MTP "
                                "layers (DeepSeek-V3, Qwen3-Next/3.5, MiMo, GLM-4.5 ...); specrl's MTP modules "
                                "for a dense Qwen3/Llama policy have no vLLM model class")

    def vllm_available(self) -> bool:
        return False

    def vllm_refit(self, model_dir: Path) -> None:
        return None

    def sim_draft_frac(self, head_frac: float) -> float:
        return head_frac  # a module is one decoder layer and the shared lm_head
