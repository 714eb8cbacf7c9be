"""`draft_model`: a small causal LM with the policy's tokenizer drafts greedily (drafter.py), distilled offline
(train.py) or online. Torch-free at import: each member imports what it runs."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...engine.methods import SpecConfig
from ..base import WithWeights


@dataclass
class DraftModelTrainSettings:
    """`specrl train-drafter --method draft_model`'s own settings (`cli_train` reads them)."""
    draft_layers: int | None = None  # draft_model: decoder layers of the student; null: a third of the policy's


class DraftModel(WithWeights):
    name = "draft_model"
    defers = True  # its observe reads each input alone
    train_settings = DraftModelTrainSettings

    # ---- the engine
    def load(self, draft_model: str | None, target, num_slots: int, max_len: int):
        from .drafter import load_drafter
        return load_drafter(Path(draft_model) if draft_model else self.shipped_dir, target, num_slots, max_len)

    @property
    def module_class(self):
        from ...model import CausalLM
        return CausalLM

    def scratch(self, policy, seed: int = 0):
        """A 2-layer model of the policy's family: its embedding, final norm, lm_head, and the first and last of
        its active decoder layers, the fewest that keep both ends (deterministic: no random part)."""
        from .train import student_from_policy
        return student_from_policy(policy, min(2, policy.config.num_layers))

    def engine_drafter(self, module, target, num_slots: int, max_len: int):
        from .drafter import DraftModelDrafter
        return DraftModelDrafter(module, num_slots, max_len)

    # ---- training
    def capture_layers(self, module) -> tuple[int, ...]:
        return ()  # it reads the tokens only

    def draft_ids(self, module) -> None:
        return None  # it drafts over the policy's whole vocabulary

    def online_logits(self, trainer, mb) -> list:
        """(weight, draft logits [b, T, V], policy logits, mask): one term, the next token."""
        return [(1.0, trainer.module(mb.input_ids).logits, mb.logits, mb.mask)]

    def cli_train(self, ns, on_log=None):
        """`train(policy, out, data, args)` with `specrl train-drafter`'s options for this method bound."""
        from .train import DraftModelOptions, train
        opts = DraftModelOptions(num_layers=ns.draft_layers)
        return lambda policy, out, data, args: train(policy, out, data, args, opts)

    def save(self, module, policy, path, dtype: str | None = None):
        from ...model import save_model
        return save_model(module, path, tokenizer_dir=policy.source_path, dtype=dtype)

    # ---- vLLM and the simulator
    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        from ..vllm import drafter_dir, k_config
        return {**k_config(spec), "model": str(drafter_dir(spec))}

    def vllm_refit(self, model_dir: Path):
        """A function from the draft model's HF-named weights to the tensors to load (checked against its files)."""
        from ..vllm import checkpoint_layout, fitted
        layout = checkpoint_layout(model_dir)
        return lambda weights: fitted(weights, layout, "draft model")

    def sim_draft_frac(self, head_frac: float) -> float:
        return 0.1  # a small model's forward, a tenth of the target's
