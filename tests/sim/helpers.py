"""Shared fixtures: a tiny dense model and a toy machine whose costs are easy to work out by hand."""
from specrl.sim.hardware import HardwareSpec, Overheads

TINY = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 100, "intermediate_size": 128, "tie_word_embeddings": False}
SMALL = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 1000, "intermediate_size": 768}


ZERO_OVERHEADS = {"iter_s": 0.0, "per_seq_s": 0.0, "per_token_s": 0.0, "spec_iter_s": 0.0,
                  "draft_iter_s": 0.0, "draft_per_seq_s": 0.0}


def toy_hw(bw=1e6, flops=1e6, **ov) -> HardwareSpec:
    """Peaks used as-is (efficiency 1), no overheads unless given."""
    return HardwareSpec("toy", flops, flops, bw, 1e15, bw, bw, gpus_per_node=1, eff_bw=1.0,
                        eff_flops=1.0, comm_latency_s=0.0,
                        overheads=Overheads(**{**ZERO_OVERHEADS, **ov}))
