"""`eagle3`: a one-layer head over fused target hidden states (head.py, drafter.py), trained offline with
training-time test (train.py) or online, exported for vLLM and SGLang (export.py). Torch-free at import: each
member imports what it runs."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...engine.methods import SpecConfig
from ..base import WithWeights


@dataclass
class Eagle3TrainSettings:
    """`specrl train-drafter --method eagle3`'s own settings (`cli_train` reads them)."""
    eagle3_layers: str | None = None  # target layers to fuse, e.g. 1,3,5; null: 1, L/2-1, L-4 made increasing
    ttt_steps: int = 7  # eagle3: training-time-test unroll steps
    eagle3_intermediate: int | None = None  # eagle3: head MLP width; null: the policy's
    # eagle3: draft over the N tokens most frequent in the sampled responses, with the head's own output
    # layer and EAGLE-3's d2t map; null: the target's whole vocabulary
    draft_vocab_size: int | None = None


class Eagle3(WithWeights):
    name = "eagle3"
    defers = True  # its observe reads each input alone
    train_settings = Eagle3TrainSettings

    # ---- the engine
    def load(self, draft_model: str | None, target, num_slots: int, max_len: int):
        from .drafter import load_drafter
        path = Path(draft_model) if draft_model else self.shipped_dir
        return load_drafter(path, draft_model is None, target, num_slots, max_len)

    @property
    def module_class(self):
        from .head import Eagle3Head
        return Eagle3Head

    def scratch(self, policy, seed: int = 0):
        """A fresh head (init_head: normal(0, 0.02) matrices, unit norms) over the default fused layers."""
        from .head import Eagle3Config, init_head
        return init_head(Eagle3Config.for_target(policy.config), seed=seed)

    def engine_drafter(self, module, target, num_slots: int, max_len: int):
        from .drafter import Eagle3Drafter
        return Eagle3Drafter(module, target, num_slots, max_len)

    # ---- training
    def capture_layers(self, module) -> tuple[int, ...]:
        return tuple(sorted(set(module.config.target_hidden_layers)))

    def draft_ids(self, module):
        """The target ids of the head's draft vocabulary (its logits' columns); None: the policy's whole one."""
        return module.target_ids

    def online_logits(self, trainer, mb) -> list:
        """(weight, draft logits, policy logits, mask) per training-time-test step j, weighted unroll_decay^j, only
        at the indices where some step takes a loss (`loss_queries`)."""
        import torch

        from .train import loss_queries, shift_left, take, ttt_unroll
        layers = trainer.module.config.target_hidden_layers
        features = torch.cat([mb.hidden[i].float() for i in layers], dim=-1)  # [b, T, 3D]
        B, T = mb.input_ids.shape
        positions = torch.arange(T, device=mb.input_ids.device).expand(B, T)  # [b, T]
        q = loss_queries(mb.mask, trainer.cfg.ttt_steps)
        steps = ttt_unroll(trainer.module, trainer.view, features, mb.input_ids, positions, trainer.cfg.ttt_steps,
                           q.index)
        # step j at index t predicts token t+2+j: the policy's distribution at index t+1+j
        return [(trainer.cfg.unroll_decay ** j, logits, take(shift_left(mb.logits, 1 + j), q.index),
                 take(shift_left(mb.mask, 1 + j), q.index) * q.valid) for j, logits in enumerate(steps)]

    def cli_train(self, ns, on_log=None):
        """`train(policy, out, data, args)` with `specrl train-drafter`'s options for this method bound."""
        from .train import Eagle3Options, train
        layers = tuple(int(i) for i in ns.eagle3_layers.split(",")) if ns.eagle3_layers else None
        opts = Eagle3Options(ttt_steps=ns.ttt_steps, layers=layers, intermediate_size=ns.eagle3_intermediate,
                             draft_vocab_size=ns.draft_vocab_size)
        return lambda policy, out, data, args: train(policy, out, data, args, opts, on_log=on_log)

    def save(self, module, policy, path, dtype: str | None = None):
        from ...model import resolve_dtype
        from .head import save_head
        return save_head(module, path, resolve_dtype(dtype) if dtype else None)

    # ---- vLLM and the simulator
    def vllm_config(self, spec: SpecConfig, ctx) -> dict:
        """A public export (`specrl export-drafter`'s output) is served as written; a head in specrl's own layout
        is exported first, as `specrl export-drafter` would (checked against the policy)."""
        from .vllm import vllm_export
        from ..vllm import drafter_dir, k_config
        return {**k_config(spec), "model": str(vllm_export(drafter_dir(spec), ctx.policy_dir, ctx.work_dir))}

    def vllm_refit(self, model_dir: Path):
        from .vllm import refit_tensors
        return refit_tensors(model_dir)

    def sim_draft_frac(self, head_frac: float) -> float:
        return head_frac  # one decoder layer and the shared lm_head
