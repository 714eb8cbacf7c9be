"""Small random models shared by the tests (no downloads)."""
from __future__ import annotations

from pathlib import Path

import torch

from specrl.model import CausalLM, ModelConfig, save_model


def tiny_config(arch="qwen3", vocab=32, hidden=32, layers=2, heads=4, kv_heads=2, max_pos=64, **kw) -> ModelConfig:
    return ModelConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_layers=layers,
                       num_heads=heads, num_kv_heads=kv_heads, arch=arch, max_position_embeddings=max_pos,
                       eos_token_id=[1], bos_token_id=0, pad_token_id=0, **kw)


def tiny_model(seed=0, scale=1.0, **kw) -> CausalLM:
    torch.manual_seed(seed)
    model = CausalLM(tiny_config(**kw))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0, scale / p.shape[-1] ** 0.5)
            elif "norm" in name:
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0, 0.1)
    return model.eval()


def char_tokenizer_json(vocab: int) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    tokens = {f"t{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(vocab=tokens, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok.to_str()


def save_tiny(path: Path, seed=0, **kw) -> Path:
    model = tiny_model(seed, **kw)
    save_model(model, path)
    (Path(path) / "tokenizer.json").write_text(char_tokenizer_json(model.config.vocab_size))
    return Path(path)


@torch.no_grad()
def weights_equal(a, b) -> bool:
    """Bitwise equality of two models' state dicts (an audit after a weight sync)."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
