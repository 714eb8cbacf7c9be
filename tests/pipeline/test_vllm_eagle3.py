"""vLLM serves what `specrl export-drafter` writes, as written: the shipped EAGLE-3 head exported by the CLI,
greedy tokens identical to specrl's engine without SD, vLLM's acceptance counters non-zero, and the head
refitted in place (an online drafter update); then a head trained online by the run's learner and exported
over a reduced draft vocabulary, served the same way. Two engines for the module."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("vllm", exc_type=ImportError)

from specrl.cli.main import main as cli_main  # noqa: E402
from specrl.config import load_config  # noqa: E402
from specrl.drafters.eagle3.head import load_head  # noqa: E402
from specrl.engine import LLM, SamplingParams  # noqa: E402
from specrl.engine.methods import get_method  # noqa: E402
from specrl.pipeline.learner import LocalLearner  # noqa: E402
from specrl.pipeline.vllm.build import vllm_backend  # noqa: E402
from specrl.pipeline.vllm.refit import RefitError  # noqa: E402
from specrl.tasks import default_policy_path, make_problems  # noqa: E402
from specrl.trainer.batch import collate  # noqa: E402
from specrl.config.run import TrainConfig  # noqa: E402
from specrl.trainer.data import PromptEncoder  # noqa: E402
from tests.pipeline.fixtures import in_process_vllm  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, max_tokens=96)
DRAFT_VOCAB = 32  # of the policy's 44 ids


@pytest.fixture(scope="module")
def prompts():
    encoder = PromptEncoder(default_policy_path())
    return [encoder.encode(p.prompt) for p in make_problems(4, seed=3, split="test")]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "eagle3"
    assert cli_main(["export-drafter", str(get_method("eagle3").shipped_dir), "--model",
                     str(default_policy_path()), "--out", str(out)]) == 0
    cfg = load_config(TrainConfig, None, ["rollout.spec.method=eagle3", f"rollout.spec.draft_model={out}",
                                          "rollout.spec.num_speculative_tokens=4", "rollout.max_num_seqs=8"])
    with in_process_vllm():
        be = vllm_backend(default_policy_path(), cfg)
    assert be.llm.llm_engine.vllm_config.speculative_config.model == str(out)  # served as written
    yield be
    be.close()


@pytest.fixture(scope="module")
def plain(prompts):
    """Greedy tokens of specrl's engine without SD."""
    outs = LLM(str(default_policy_path()), dtype="float32").generate(prompts, GREEDY)
    return [r.outputs[0].token_ids for r in outs]


def _run(backend, prompts) -> tuple[list[list[int]], dict]:
    backend.reset_stats()
    outs = backend.generate(prompts, [GREEDY] * len(prompts))
    return [r.outputs[0].token_ids for r in outs], backend.stats()


def test_the_exported_head_is_lossless_and_accepted(backend, prompts, plain):
    tokens, stats = _run(backend, prompts)
    assert tokens == plain
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


def test_seeded_requests_whose_prompts_fill_more_than_a_step_complete(backend):
    # 8 x 600 prompt tokens do not fit one engine step: with chunked prefill, vLLM splits a prompt and then
    # rewinds its request's generator, which a CPU generator cannot do (the engine process died)
    prompts = [[5 + (i + j) % 30 for j in range(600)] for i in range(8)]  # ids within the policy's vocabulary
    outs = backend.generate(prompts, [SamplingParams(temperature=1.0, max_tokens=4, seed=i) for i in range(8)])
    assert [len(r.prompt_token_ids) for r in outs] == [600] * 8
    assert all(1 <= len(r.outputs[0].token_ids) <= 4 for r in outs)


def _online_head(work) -> tuple:
    """The shipped head after two online updates by the run's learner (rollout.drafter.online, the policy's
    forward capturing its inputs) on the policy's own samples, saved where a run's checkpoint keeps it; and
    those samples as `specrl generate` writes them (the export's token counts)."""
    policy = default_policy_path()
    cfg = load_config(TrainConfig, None, ["rollout.spec.method=eagle3", "rollout.drafter.online=true",
                                          "rollout.drafter.sample_fraction=1.0", "seed=0"])
    learner = LocalLearner.build(policy, cfg)
    before = {k: v.clone() for k, v in learner.drafter.named_weights()}
    encoder = PromptEncoder(policy)
    train = [encoder.encode(p.prompt) for p in make_problems(8, seed=5, split="train")]
    outs = LLM(str(policy), dtype="float32").generate(train, SamplingParams(n=2, temperature=1.0, max_tokens=96,
                                                                            seed=1))
    rows = [(r.prompt_token_ids, c) for r in outs for c in r.outputs]
    batch = collate([p for p, _ in rows], [c.token_ids for _, c in rows], [c.logprobs for _, c in rows],
                    torch.linspace(-1, 1, len(rows)), pad_id=learner.pad_id)  # any advantages will do
    for _ in range(2):
        assert "drafter_loss" in learner.step(batch)
    after = dict(learner.drafter.named_weights())
    assert learner.drafter_version == 2 and any(not torch.equal(before[k], after[k]) for k in before)
    learner.drafter.save_drafter(work / "drafter")
    (work / "samples.jsonl").write_text("".join(json.dumps({"token_ids": c.token_ids}) + "\n" for _, c in rows))
    return work / "drafter", work / "samples.jsonl"


def test_an_online_trained_reduced_vocabulary_export_is_served_as_written(tmp_path, prompts, plain,
                                                                          record_property):
    head, samples = _online_head(tmp_path)
    out = tmp_path / "export"
    assert cli_main(["export-drafter", str(head), "--model", str(default_policy_path()), "--out", str(out),
                     "--draft-vocab-size", str(DRAFT_VOCAB), "--data", str(samples)]) == 0
    tensors = load_file(str(out / "model.safetensors"))
    assert tensors["d2t"].shape == (DRAFT_VOCAB,) and tensors["lm_head.weight"].shape[0] == DRAFT_VOCAB
    cfg = load_config(TrainConfig, None, ["rollout.spec.method=eagle3", f"rollout.spec.draft_model={out}",
                                          "rollout.spec.num_speculative_tokens=4", "rollout.max_num_seqs=8"])
    with in_process_vllm():
        be = vllm_backend(default_policy_path(), cfg)
    try:
        assert be.llm.llm_engine.vllm_config.speculative_config.model == str(out)  # served as written
        tokens, stats = _run(be, prompts)
    finally:
        be.close()
    record_property("vllm_counters", {k: stats[k] for k in ("drafts", "draft_tokens", "accepted_tokens")})
    assert tokens == plain
    assert 0 < stats["draft_tokens"] <= 4 * stats["drafts"] and stats["accepted_tokens"] > 0
