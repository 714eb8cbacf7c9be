"""Policy updates in flight: the local backend takes weights sent from another thread between two engine
steps, groups are as old as their oldest token, and the async pipeline accounts and drops by that."""
from __future__ import annotations

import threading

import pytest

from specrl import LLM, SamplingParams
from specrl.cli.train import build_config, main
from specrl.config import ConfigError
from specrl.engine.sequence import CompletionOutput, RequestOutput
from specrl.pipeline.local import LocalBackend
from specrl.pipeline.run_dir import read_jsonl
from specrl.pipeline.seam import group_version
from specrl.pipeline.steps import Rollout, drop_stale
from tests.helpers import tiny_model, weights_equal
from tests.pipeline.fixtures import make_setup, overrides, strip_timings

ASYNC = {"pipeline.mode": "async", "pipeline.rollout_threads": 1, "pipeline.train_threads": 1}
PARAMS = [SamplingParams(n=2, temperature=1.0, max_tokens=12, ignore_eos=True, seed=3)] * 2
PROMPTS = [[0, 4, 5], [0, 7, 2]]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_setup(tmp_path_factory.mktemp("tiny"))


def send_after_step(backend: LocalBackend, steps: int, weights: dict, version: int) -> None:
    """Once the engine has run `steps` steps, another thread (a trainer) sends `weights` to the backend."""
    real, done = backend.llm.engine.step, []

    def step(scheduler):
        real(scheduler)
        done.append(1)
        if len(done) == steps:
            sender = threading.Thread(target=backend.update_weights, args=(weights.items(), version))
            sender.start()
            sender.join()
    backend.llm.engine.step = step


@pytest.mark.parametrize("inflight", [True, False])
def test_weights_sent_during_generate_land_between_steps_or_after_the_call(inflight):
    new = tiny_model(seed=5, vocab=32, hidden=32)
    backend = LocalBackend(LLM(tiny_model(seed=0, vocab=32, hidden=32), max_num_seqs=8), inflight=inflight)
    send_after_step(backend, 3, new.state_dict(), version=1)
    outs = backend.generate(PROMPTS, PARAMS)
    # in flight: prefill + 2 decode steps sampled 3 tokens with version 0, the rest comes from version 1
    expected = [(0, 0), (3, 1)] if inflight else [(0, 0)]
    assert [c.weight_versions for r in outs for c in r.outputs] == [expected] * 4
    assert backend.weights_version == 1 and weights_equal(backend.llm.model, new)  # applied by the end
    again = backend.generate(PROMPTS, PARAMS)
    assert {tuple(c.weight_versions) for r in again for c in r.outputs} == {((0, 1),)}


def test_a_version_older_than_the_one_held_is_ignored():
    old, new = tiny_model(seed=0, vocab=32, hidden=32), tiny_model(seed=5, vocab=32, hidden=32)
    backend = LocalBackend(LLM(tiny_model(seed=0, vocab=32, hidden=32)), inflight=True)
    backend.update_weights(new.state_dict().items(), 2)
    backend.update_weights(old.state_dict().items(), 1)  # e.g. a restart's load racing a broadcast
    assert backend.weights_version == 2 and weights_equal(backend.llm.model, new)


def _group(*runs_per_sample, request_id: int = 0) -> RequestOutput:
    return RequestOutput(request_id, None, [0], [CompletionOutput(j, [1] * 6, [0.0] * 6, "length",
                                                                  weight_versions=runs)
                                                 for j, runs in enumerate(runs_per_sample)])


def test_a_group_is_as_old_as_its_oldest_token_and_is_dropped_whole():
    a = _group([(0, 3)], [(0, 1), (4, 3)])  # one sample began on version 1: the group is version 1
    b = _group([(0, 2)], [(0, 3)], request_id=1)
    assert (group_version(a, 9), group_version(b, 9)) == (1, 2)
    rollout = Rollout(4, 1, ["ex a", "ex b"], [a, b], {}, 0.0, 0.0, 3)
    # token lags at step 4: a: 6 + 2 tokens of v3 (lag 1), 4 of v1 (lag 3); b: 6 of v2 (lag 2), 6 of v3 (lag 1)
    assert rollout.token_lags == {1: 14, 2: 6, 3: 4}
    kept, dropped = drop_stale(rollout, max_lag=2)  # a is 3 behind: out, both its samples
    assert dropped == 1 and kept.examples == ["ex b"] and kept.outputs == [b] and b.request_id == 0  # renumbered
    assert kept.version == 2
    assert drop_stale(rollout, max_lag=3) == (rollout, 0)


def test_inflight_updates_need_the_async_pipeline(setup, tmp_path):
    with pytest.raises(ConfigError, match="inflight_updates"):
        build_config(None, overrides(*setup, tmp_path, **{"pipeline.inflight_updates": "true"}))


NEW_KEYS = ("policy_lag", "policy_lag_newest", "token_lags", "token_lag_mean", "stale_groups")


def test_async_with_inflight_updates_keeps_staleness_bounded(setup, tmp_path):
    kw = {**ASYNC, "pipeline.inflight_updates": "true"}
    assert main(overrides(*setup, tmp_path / "a1", **kw, **{"pipeline.max_policy_lag": 1})) == 0
    rows = read_jsonl(tmp_path / "a1" / "metrics.jsonl")
    for r in rows:
        assert 0 <= r["policy_lag_newest"] <= r["policy_lag"] <= 1 and r["stale_groups"] == 0
        assert sum(r["token_lags"].values()) == r["generated_tokens"]
        assert ("is_ratio" in r) == (r["policy_lag"] > 0)
    # at lag 0 no version can arrive during a rollout: the sync run, exactly
    assert main(overrides(*setup, tmp_path / "sync", num_threads=1)) == 0
    assert main(overrides(*setup, tmp_path / "a0", **kw, **{"pipeline.max_policy_lag": 0})) == 0
    a0 = [{k: v for k, v in r.items() if k not in NEW_KEYS} for r in read_jsonl(tmp_path / "a0" / "metrics.jsonl")]
    assert strip_timings(a0) == strip_timings(read_jsonl(tmp_path / "sync" / "metrics.jsonl"))
    assert all(r["token_lags"] == {"0": r["generated_tokens"]} for r in read_jsonl(tmp_path / "a0" / "metrics.jsonl"))
