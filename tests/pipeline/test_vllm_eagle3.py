"""vLLM serves what `specrl export-drafter` writes, as written: the shipped EAGLE-3 head exported by the CLI,
greedy tokens identical to specrl's engine without SD, vLLM's acceptance counters non-zero, and the head
refitted in place (an online drafter update). One engine for the module."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", exc_type=ImportError)

from specrl.cli.main import main as cli_main  # noqa: E402
from specrl.config import load_config  # noqa: E402
from specrl.drafters.eagle3.head import load_head  # noqa: E402
from specrl.engine import LLM, SamplingParams  # noqa: E402
from specrl.engine.methods import get_method  # noqa: E402
from specrl.pipeline.vllm.build import vllm_backend  # noqa: E402
from specrl.pipeline.vllm.refit import RefitError  # noqa: E402
from specrl.tasks import default_policy_path, make_problems  # noqa: E402
from specrl.train.config import TrainConfig  # noqa: E402
from specrl.train.data import PromptEncoder  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, max_tokens=96)


@pytest.fixture(scope="module")
def prompts():
    encoder = PromptEncoder(default_policy_path())
    return [encoder.encode(p.prompt) for p in make_problems(4, seed=3, split="test")]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "eagle3"
    assert cli_main(["export-drafter", str(get_method("eagle3").shipped_dir), "--policy",
                     str(default_policy_path()), "--out", str(out)]) == 0
    cfg = load_config(TrainConfig, None, ["rollout.spec.method=eagle3", f"rollout.spec.draft_model={out}",
                                          "rollout.spec.num_speculative_tokens=4", "rollout.max_num_seqs=8"])
    be = vllm_backend(default_policy_path(), cfg)
    assert be.llm.llm_engine.vllm_config.speculative_config.model == str(out)  # served as written
    yield be
    be.close()


def _run(backend, prompts) -> tuple[list[list[int]], dict]:
    backend.reset_stats()
    outs = backend.generate(prompts, [GREEDY] * len(prompts))
    return [r.outputs[0].token_ids for r in outs], backend.stats()


def test_the_exported_head_is_lossless_and_accepted(backend, prompts):
    tokens, stats = _run(backend, prompts)
    plain = LLM(str(default_policy_path()), dtype="float32").generate(prompts, GREEDY)
    assert tokens == [r.outputs[0].token_ids for r in plain]
    assert 0 < stats["draft_tokens"] <= 4 * stats["drafts"]
    assert stats["accepted_tokens"] > 0 and stats["acceptance_length"] > 1.5  # chains: the head drafts well
    assert len(stats["acceptance_rate_per_pos"]) == 4


def test_a_drafter_refit_reloads_the_head_in_place(backend, prompts):
    tokens, stats = _run(backend, prompts)
    head = load_head(get_method("eagle3").shipped_dir)
    state = head.state_dict()
    torch.manual_seed(0)
    noisy = {k: v + 0.5 * torch.randn_like(v) if v.dim() == 2 else v for k, v in state.items()}
    backend.update_drafter(noisy.items(), 1)
    bad_tokens, bad = _run(backend, prompts)
    assert bad_tokens == tokens  # a worse drafter is slower, never different
    assert bad["accepted_tokens"] < stats["accepted_tokens"] and backend.drafter_version == 1
    backend.update_drafter(state.items(), 2)
    assert _run(backend, prompts)[1]["accepted_tokens"] == stats["accepted_tokens"]  # greedy: the same drafts


def test_a_drafter_refit_that_does_not_fit_is_refused(backend, prompts):
    state = load_head(get_method("eagle3").shipped_dir).state_dict()
    state["fc.weight"] = state["fc.weight"][:, :-1]
    with pytest.raises(RefitError, match=r"does not fit the engine's head: .*fc.weight"):
        backend.update_drafter(state.items(), 3)
    assert backend.drafter_version == 2
