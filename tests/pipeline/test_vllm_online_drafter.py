"""`specrl train pipeline.backend=vllm` with an online EAGLE-3 drafter, sync and async, on the embedded policy and
its shipped head: each update reaches vLLM between two generate() calls (inside one it waits:
test_vllm_publish.py), and the row of the step it served says so (`drafter_served`, the version vLLM held when
the step's rollout began). Sync serves step s with the drafter of s - 1 updates; async with at most that,
mostly one version fewer, since the next rollout starts as the policy's weights are published, before the
drafter that follows them. No update is refused (a refusal stops the run). One engine process for the module
(an async run refits from a second thread), shared by the runs as in test_vllm_runs.py."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm", exc_type=ImportError)

import specrl.pipeline.vllm.build as build  # noqa: E402
from specrl.cli.main import main  # noqa: E402
from specrl.config import load_config  # noqa: E402
from specrl.config.run import TrainConfig  # noqa: E402
from specrl.engine.methods import get_method  # noqa: E402
from specrl.pipeline.run_dir import read_jsonl  # noqa: E402
from specrl.tasks import default_policy_path  # noqa: E402
from tests.pipeline.fixtures import shared_backend  # noqa: E402

SHARED = "vllm_test_online_drafter"
STEPS = 3
HEAD = get_method("eagle3").shipped_dir
SPEC = {"rollout.spec.method": "eagle3", "rollout.spec.draft_model": HEAD, "rollout.spec.num_speculative_tokens": 4}


@pytest.fixture(scope="module")
def shared():
    cfg = load_config(TrainConfig, None, [f"{k}={v}" for k, v in SPEC.items()] + ["rollout.max_num_seqs=8"])
    engine = build.vllm_backend(default_policy_path(), cfg)
    with shared_backend(SHARED, engine) as made:
        yield made
    engine.close()


def _train(out, **kw) -> list[dict]:
    args = {"pipeline.backend": SHARED, **SPEC, "rollout.drafter.online": True, "rollout.prompts_per_step": 2,
            "rollout.n": 4, "rollout.max_tokens": 64, "data.eval_size": 2, "data.eval_max_tokens": 16,
            "schedule.max_steps": STEPS, "schedule.eval_every": 0, "schedule.save_every": STEPS,
            "optim.micro_batch_size": 4, "out_dir": out, "progress": False, "plots": False, "tensorboard": False,
            **kw}
    assert main(["train", *[f"{k}={v}" for k, v in args.items()]]) == 0  # a refused update would stop the run
    return read_jsonl(out / "metrics.jsonl")


def test_sync_serves_each_step_the_drafter_of_the_step_before(shared, tmp_path):
    rows = _train(tmp_path / "sync")
    assert [r["drafter_served"] for r in rows] == [0, 1, 2]  # published after each update, before the next call
    assert [r["drafter_version"] for r in rows] == [1, 2, 3] and shared[-1].engine.drafter_version == STEPS
    assert all(r["acceptance_length"] > 1 for r in rows)  # vLLM drafted with it and accepted tokens
    assert not any(r["drafter_alarm"] for r in rows)


def test_async_serves_published_drafters_in_order_never_the_steps_own(shared, tmp_path):
    rows = _train(tmp_path / "async", **{"pipeline.mode": "async", "pipeline.max_policy_lag": 1})
    served = [r["drafter_served"] for r in rows]
    # never a drafter trained on the step's own rollout; the policy's weights are published before the drafter,
    # so a rollout that starts at once is served the version before (s - 2 at step s), a later one s - 1
    assert served[0] == 0 and all(s <= r["step"] - 1 for s, r in zip(served, rows))
    assert served == sorted(served) and served[-1] >= 1  # updates arrived, in order
    assert all(r["drafter_version"] >= s for s, r in zip(served, rows))
    assert all(r["acceptance_length"] > 1 for r in rows)
