"""A new speculative method is one class and one registry line: a toy method defined here, with no edit outside
this file, runs through `LLM` (greedy and sampled, lossless), `specrl train`, and vLLM's method mapping (which
it refuses, naming the methods that run), its own options under `rollout.spec.fixed`."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from specrl import LLM, SamplingParams, SpecConfig
from specrl.drafters import registry
from specrl.drafters.vllm import Context, UnsupportedMethod
from specrl.engine.drafting import Proposal, TargetForward, pad_proposals
from specrl.engine import methods
from specrl.engine.methods import METHODS, get_method
from specrl.engine.pool import static_drafting
from specrl.engine.sequence import Sequence
from specrl.pipeline.vllm.spec import speculative_config
from tests.drafters.test_exactness import N_SAMPLES, PROMPT, SETTINGS, peaky_model, sample_first3
from tests.helpers import tiny_model
from tests.stats import assert_matches, exact_distribution

FIXED = 5  # the peaky model continues PROMPT with 5 often, not always: drafts are accepted and rejected


class FixedDrafter:
    """Proposes the same token k times: a point draft (q one-hot) that is sometimes right."""
    hidden_layers: tuple[int, ...] = ()

    def __init__(self, token: int):
        self.token = token

    def observe(self, fwd: TargetForward) -> None:
        pass

    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        return pad_proposals([[self.token] * ki for ki in k], "cpu")

    def release(self, seq: Sequence) -> None:
        pass


@dataclass
class FixedOptions:
    token: int = FIXED  # the token it proposes
    OLD_KEYS = {}  # no flat keys of its own before

    def validate(self) -> None:
        assert self.token >= 0


class Fixed:
    name = "fixed"
    trainable, adaptive, defers = False, False, False
    options = FixedOptions

    def engine_drafting(self, spec, target, num_slots, max_len):
        return static_drafting(self, spec, target, num_slots, max_len)

    def build(self, spec, target, num_slots, max_len):
        return FixedDrafter(spec.options[self.name].token)

    def vllm_config(self, spec, ctx):
        raise UnsupportedMethod("vLLM has no fixed-token proposer")

    def vllm_available(self):
        return False

    def vllm_refit(self, model_dir):
        return None

    def sim_draft_frac(self, head_frac):
        return 0.0


@pytest.fixture
def fixed():
    registry.register("fixed", Fixed())
    yield get_method("fixed")
    registry.unregister("fixed")


def test_registering_adds_the_name_everywhere_and_unregistering_removes_it(fixed):
    assert fixed.name == "fixed" and "fixed" in methods.METHODS and "fixed" not in METHODS  # METHODS: read before
    SpecConfig(method="auto", options={"auto": {"drafters": ("suffix", "fixed")}})  # "auto" can choose it
    assert SpecConfig(method="fixed").options["fixed"] == FixedOptions(FIXED)
    registry.unregister("fixed")
    with pytest.raises(ValueError, match=r"method='fixed' is invalid: expected one of \['draft_model'"):
        SpecConfig(method="fixed")
    registry.register("fixed", fixed)


def test_greedy_tokens_are_sd_offs(fixed):
    model = tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40)
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    prompts = [[0, 4, 5], [1, 5, 5, 5], [2]]
    base = LLM(model).generate(prompts, params)
    llm = LLM(model, spec=SpecConfig(method="fixed", num_speculative_tokens=3))
    got = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in base]
    assert llm.stats["draft_tokens"] > 0


def test_sampled_distribution_is_sd_offs(fixed):
    model = peaky_model()
    setting = SETTINGS["t1"]
    dist = exact_distribution(model, PROMPT, 3, **setting)
    llm = LLM(model, max_num_seqs=1024, spec=SpecConfig(method="fixed", num_speculative_tokens=3))
    assert_matches(sample_first3(llm, setting), dist)
    drafted, accepted = llm.stats["draft_tokens"], llm.stats["accepted_tokens"]
    assert drafted >= N_SAMPLES // 10 and 0 < accepted < drafted, (drafted, accepted)


def test_a_train_step_runs_with_it(fixed, tmp_path):
    from specrl.cli.train import main
    from specrl.pipeline.run_dir import read_jsonl
    from tests.pipeline.fixtures import make_setup, overrides
    model, data = make_setup(tmp_path / "tiny")
    out = tmp_path / "run"
    assert main(overrides(model, data, out, **{"rollout.spec.method": "fixed", "rollout.spec.fixed.token": FIXED,
                                                   "schedule.max_steps": 1})) == 0
    rows = read_jsonl(out / "metrics.jsonl")
    assert len(rows) == 1 and rows[0]["acceptance_length"] >= 1.0
    import yaml
    assert yaml.safe_load((out / "config.yaml").read_text())["rollout"]["spec"]["fixed"] == {"token": FIXED}


def test_vllm_refuses_it_and_names_what_runs(fixed, tmp_path):
    from tests.helpers import save_tiny
    ctx = Context(save_tiny(tmp_path / "policy"), tmp_path / "work", 8)
    with pytest.raises(UnsupportedMethod, match=r"method='fixed' cannot run on pipeline.backend=vllm: vLLM has no "
                                                r"fixed-token proposer\. Runs here: \['draft_model', 'eagle3', 'ngram'"):
        speculative_config(SpecConfig(method="fixed"), ctx)
