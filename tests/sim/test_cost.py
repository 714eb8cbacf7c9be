import numpy as np
import pytest

from specrl.sim import cost
from specrl.sim.hardware import HARDWARE, get_hardware
from specrl.sim.models import from_hf_config, get_model
from tests.sim.helpers import TINY, toy_hw


def test_tiny_param_counts_by_hand(tiny):
    # attention: q,o 2*64*(4*16)=8192 + k,v 2*64*(2*16)=4096 -> 12288; MLP 3*64*128 = 24576
    # 2 layers * 36864 = 73728; untied embeddings 2*100*64 = 12800 -> 86528
    assert tiny.total_params == 86528
    assert tiny.active_params == 86528
    assert tiny.matmul_params == 86528 - 6400
    assert tiny.kv_bytes_per_token(2) == 2 * 2 * 2 * 16 * 2  # K and V, layers, kv heads, head_dim, bf16


def test_roofline_by_hand(tiny):
    # bytes: weights 2*86528 = 173056 + KV 100*256 = 25600 -> 198656
    # flops: 2*80128*4 = 641024 + attention 4*2 layers*4 heads*16*100 pairs = 51200 -> 692224
    assert cost.forward_bytes(tiny, 4, 100) == pytest.approx(198656)
    assert cost.forward_flops(tiny, 4, 100) == pytest.approx(692224)
    hw = toy_hw(bw=1e6, flops=1e6)
    assert cost.roofline_s(hw, tiny, 1, 4, 100, 100) == pytest.approx(0.692224)  # compute-bound
    hw = toy_hw(bw=1e5, flops=1e6)
    assert cost.roofline_s(hw, tiny, 1, 4, 100, 100) == pytest.approx(1.98656)  # memory-bound
    # TP=2 halves both per-GPU terms; overheads add 0.5 s + 2 seqs * 0.1 s; all-reduces:
    # 2 per layer * 2 layers * ring factor 2*(2-1)/2 * (4 tokens * 64 * 2 bytes) / 1e5 B/s = 0.02048 s
    hw = toy_hw(bw=1e5, flops=1e6, iter_s=0.5, per_seq_s=0.1)
    assert cost.tp_comm_s(hw, tiny, 2, 4) == pytest.approx(0.02048)
    assert cost.target_step_s(hw, tiny, 2, 2, 4, 100, 100) == pytest.approx(1.98656 / 2 + 0.7 + 0.02048)


def test_moe_reads_only_routed_experts():
    moe = from_hf_config({**TINY, "num_experts": 4, "num_experts_per_tok": 1,
                          "moe_intermediate_size": 32}, "moe")
    expert = 2 * 4 * 3 * 64 * 32  # layers * experts * (gate, up, down) = 49152
    assert moe.expert_params == expert
    assert moe.active_params == moe.dense_params + expert // 4
    # two tokens with top-1 of 4: expected share of experts hit 1 - (3/4)^2 = 7/16
    assert cost.weight_bytes(moe, 2) == pytest.approx(2 * (moe.dense_params + expert * 7 / 16))


def test_qwen3_public_sizes():
    assert get_model("qwen3-8b").total_params / 1e9 == pytest.approx(8.19, abs=0.01)
    big = get_model("Qwen3-235B-A22B")
    assert big.total_params / 1e9 == pytest.approx(235.0, abs=0.5)
    assert big.active_params / 1e9 == pytest.approx(22.1, abs=0.2)


def test_training_and_sync_cost():
    hw, m = HARDWARE["H100"], get_model("qwen3-8b")
    # 6 * N * tokens / (gpus * peak * mfu)
    want = 6 * m.active_params * 1e6 / (8 * 989e12 * 0.5)
    assert cost.train_s(hw, m, 1e6, 8, 0.5) == pytest.approx(want)
    coloc = cost.weight_sync_s(hw, m, 1, colocated=True)
    assert coloc == pytest.approx(0.3 + m.total_params * 2 / 450e9)
    assert cost.weight_sync_s(hw, m, 1, colocated=False) > coloc  # network slower than NVLink


def test_unknown_hardware_lists_valid_names():
    with pytest.raises(ValueError, match="H100.*cpu-local"):
        get_hardware("A100")
    with pytest.raises(FileNotFoundError, match="calibrate"):
        get_hardware("cpu-local", "/nonexistent/calibration.json")


def test_kv_capacity_and_model_too_big():
    hw, big = HARDWARE["H100"], get_model("qwen3-235b-a22b")
    with pytest.raises(ValueError, match="raise --tp"):
        cost.kv_capacity_seqs(hw, big, 1, 1000)
    assert cost.kv_capacity_seqs(hw, big, 8, 1000) > 100
    assert np.isclose(cost.tp_comm_s(hw, big, 1, 10), 0.0)
