"""Two FSDP2 trainer processes (gloo, CPU) take the same step as one process: loss, grad norm, weights."""
from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

from specrl.pipeline.learner import LocalLearner
from specrl.config.run import TrainConfig
from specrl.trainer.trainer import collate
from tests.helpers import save_tiny

pytest.importorskip("torch.distributed.fsdp")


def _batch():
    g = torch.Generator().manual_seed(0)
    prompts = [[4, 5, 6], [7, 8, 9, 10], [11, 12], [13, 14, 15]]
    responses = [torch.randint(3, 32, (n,), generator=g).tolist() for n in (5, 9, 3, 7)]
    logprobs = [[-1.5] * len(r) for r in responses]
    return collate(prompts, responses, logprobs, torch.tensor([1.0, -0.5, 0.25, -0.75]), pad_id=0)


def _cfg() -> TrainConfig:
    cfg = TrainConfig()
    cfg.optim.lr, cfg.optim.warmup_steps, cfg.optim.micro_batch_size = 1e-2, 0, 2
    cfg.schedule.max_steps = 4
    return cfg


def _rank(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    from specrl.trainer.fsdp import FSDPLearner, init_process_group
    init_process_group(rank, world, f"127.0.0.1:{port}")
    learner = FSDPLearner.build(model_dir, _cfg())
    metrics = [learner.step(_batch()) for _ in range(2)]
    weights = dict(learner.named_weights())
    if rank == 0:
        torch.save({"metrics": metrics, "weights": weights}, out)
    torch.distributed.barrier()  # both ranks tear gloo down together: rank 1 leaving mid-save aborted it at times
    torch.distributed.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_fsdp_ranks_take_the_single_process_step(tmp_path):
    model_dir = save_tiny(tmp_path / "model", vocab=32, max_pos=96)
    out = tmp_path / "fsdp.pt"
    mp.spawn(_rank, args=(2, _port(), str(model_dir), str(out)), nprocs=2, join=True)
    sharded = torch.load(out, weights_only=True)
    single = LocalLearner.build(model_dir, _cfg())
    metrics = [single.step(_batch()) for _ in range(2)]
    for got, want in zip(sharded["metrics"], metrics):
        for key in ("loss", "grad_norm", "entropy", "clip_frac", "logprob_diff"):
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key
    assert metrics[1]["entropy"] != metrics[0]["entropy"]  # the first update changed the policy
    want = dict(single.named_weights())
    assert sharded["weights"].keys() == want.keys()
    for name, tensor in want.items():
        torch.testing.assert_close(sharded["weights"][name], tensor, rtol=1e-5, atol=1e-6)
