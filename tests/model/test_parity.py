"""Logits parity with transformers for every supported family, on a batch of different-length prompts."""
import json

import pytest
import torch

from specrl.model import ModelConfig, UnsupportedModelError, load_model, save_model
from tests.helpers import tiny_model

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("arch,tied", [("llama", False), ("qwen2", True), ("qwen3", False), ("qwen3", True)])
def test_logits_match_transformers(tmp_path, arch, tied):
    model = tiny_model(seed=1, arch=arch, vocab=48, hidden=64, layers=3, heads=4, kv_heads=2,
                       tie_word_embeddings=tied, rope_theta=5000.0)
    save_model(model, tmp_path / "ckpt")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt", dtype=torch.float32).eval()
    ours = load_model(tmp_path / "ckpt")
    lengths = [5, 11, 8]
    torch.manual_seed(0)
    for n in lengths:  # each prompt alone in HF, all together (right padded) in ours
        ids = torch.randint(0, 48, (1, n))
        with torch.no_grad():
            ref = hf(ids).logits
            got = ours(ids).logits
        assert torch.allclose(got, ref, atol=1e-4), (arch, (got - ref).abs().max())
    batch = torch.randint(0, 48, (3, max(lengths)))
    with torch.no_grad():
        padded = ours(batch).logits
        for b, n in enumerate(lengths):
            ref = hf(batch[b:b + 1, :n]).logits[0]
            assert torch.allclose(padded[b, :n], ref, atol=1e-4)


def test_cached_forward_matches_full_forward():
    model = tiny_model(seed=2, arch="qwen2", hidden=64, layers=2)
    ids = torch.randint(0, 32, (2, 10))
    full = model(ids).logits
    cfg = model.config
    cache = [(torch.zeros(4, cfg.num_kv_heads, 32, cfg.head_dim), torch.zeros(4, cfg.num_kv_heads, 32, cfg.head_dim))
             for _ in range(cfg.num_layers)]
    slots = torch.tensor([3, 1])
    pos = torch.arange(10).expand(2, 10)
    first = model(ids[:, :6], pos[:, :6], cache, slots).logits
    rest = [model(ids[:, t:t + 1], pos[:, t:t + 1], cache, slots).logits for t in range(6, 10)]
    got = torch.cat([first] + rest, dim=1)
    assert torch.allclose(got, full, atol=1e-5)


def test_sharded_round_trip(tmp_path):
    model = tiny_model(seed=3, arch="llama")
    save_model(model, tmp_path / "c", max_shard_bytes=4000)
    assert (tmp_path / "c" / "model.safetensors.index.json").is_file()
    back = load_model(tmp_path / "c")
    ids = torch.randint(0, 32, (1, 7))
    assert torch.equal(back(ids).logits, model(ids).logits)


def test_missing_checkpoint_names_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Hugging Face checkpoint.*does not exist"):
        load_model(tmp_path / "nope")


def test_pickle_weights_refused(tmp_path):
    model = tiny_model()
    (tmp_path / "config.json").write_text(json.dumps(model.config.to_hf()))
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="never unpickles"):
        load_model(tmp_path)


def test_unsupported_architecture_lists_supported():
    with pytest.raises(UnsupportedModelError, match=r"supports \['llama', 'qwen2', 'qwen3'\]"):
        ModelConfig.from_hf({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})


def test_cudnn_attention_is_skipped_on_a_gpu_only():
    """cuDNN's SDPA rebuilds per shape (3.2x slower bf16 rollouts on an H100): the engine turns it off for a
    CUDA device, and leaves a CPU process alone."""
    import torch
    from specrl.model.layers import skip_cudnn_attention
    was = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        skip_cudnn_attention("cpu")
        assert torch.backends.cuda.cudnn_sdp_enabled()
        skip_cudnn_attention("cuda:0")  # only reads the device type: no GPU needed
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
