import json

import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.engine.sequence import Scheduler
from specrl.engine.sequence import Sequence, Status
from tests.helpers import save_tiny, tiny_model


def test_same_seed_same_outputs_independent_of_batching():
    model = tiny_model(seed=0, vocab=32, hidden=32)
    prompts = [[0, 4, 5], [0, 7], [0, 9, 9, 9]]
    params = SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=7)
    a = LLM(model, max_num_seqs=2).generate(prompts, params)
    b = LLM(model, max_num_seqs=16).generate(prompts, params)
    assert [[o.token_ids for o in r.outputs] for r in a] == [[o.token_ids for o in r.outputs] for r in b]
    assert len({tuple(o.token_ids) for o in a[0].outputs}) > 1  # the n samples differ


def test_n_samples_share_one_prefill():
    model = tiny_model(seed=0, vocab=32, hidden=32)
    llm = LLM(model, max_num_seqs=8)
    llm.generate([[0, 4, 5, 6, 7]], SamplingParams(n=8, max_tokens=2, ignore_eos=True))
    assert llm.stats["prefill_tokens"] == 5


def test_continuous_batching_refills_slots_at_once():
    sched = Scheduler(num_slots=2)
    params = SamplingParams(n=1, max_tokens=4)
    seqs = [Sequence(i, i, 0, [0, 1], params, i, 64) for i in range(3)]
    sched.add(seqs)
    assert [len(g) for g in sched.admit()] == [1, 1]
    assert sched.admit() == []  # no free slot
    seqs[0].status = Status.FINISHED
    assert sched.retire_finished() == [seqs[0]]
    groups = sched.admit()
    assert groups == [[seqs[2]]] and seqs[2].slot == seqs[0].slot


def test_finish_reasons_and_stop_token_included():
    model = tiny_model(seed=1, vocab=32, hidden=32)
    out = LLM(model).generate([[0, 3]], SamplingParams(n=20, temperature=1.0, max_tokens=6, seed=0,
                                                       stop_token_ids=[5, 6, 7]))[0].outputs
    for o in out:
        if o.finish_reason == "stop":
            assert o.token_ids[-1] in (1, 5, 6, 7) and not set(o.token_ids[:-1]) & {1, 5, 6, 7}
        else:
            assert len(o.token_ids) == 6
        assert len(o.logprobs) == len(o.token_ids)
    assert {o.finish_reason for o in out} == {"stop", "length"}


def test_logprobs_match_a_full_forward():
    model = tiny_model(seed=2, vocab=32, hidden=32)
    prompt = [0, 3, 4]
    o = LLM(model).generate([prompt], SamplingParams(temperature=0.8, max_tokens=10, ignore_eos=True, seed=3))[0].outputs[0]
    ids = torch.tensor([prompt + o.token_ids])
    logp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1:-1] / 0.8, -1)
    expected = logp.gather(-1, torch.tensor(o.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(o.logprobs), expected, atol=1e-5)


def test_string_prompts_use_the_checkpoint_tokenizer(tmp_path):
    path = save_tiny(tmp_path / "m", vocab=32)
    llm = LLM(str(path))
    out = llm.generate(["t4 t5"], SamplingParams(max_tokens=3, ignore_eos=True))
    assert out[0].prompt_token_ids == [4, 5] and len(out[0].outputs[0].token_ids) == 3
    assert isinstance(out[0].outputs[0].text, str)


def test_trace_rows(tmp_path):
    model = tiny_model(seed=0, vocab=32, hidden=32)
    trace = tmp_path / "trace.jsonl"
    LLM(model, trace_path=str(trace), spec=SpecConfig(method="ngram")).generate(
        [[0, 2, 3, 2, 3]], SamplingParams(n=2, max_tokens=8, ignore_eos=True))
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert rows[0]["phase"] == "prefill" and {r["phase"] for r in rows[1:]} == {"spec"}
    assert sum(r["emitted_tokens"] for r in rows) == 16


# ---- bad input --------------------------------------------------------------------------------------------
def test_empty_prompt_list():
    with pytest.raises(ValueError, match="prompts is empty"):
        LLM(tiny_model()).generate([], SamplingParams())


def test_prompt_longer_than_context():
    with pytest.raises(ValueError, match="prompt 1 has 70 tokens but the context limit is 64"):
        LLM(tiny_model(max_pos=64)).generate([[0, 1], [2] * 70], SamplingParams())


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Hugging Face checkpoint"):
        LLM(str(tmp_path / "missing"))


def test_tokenizer_vocab_mismatch(tmp_path):
    path = save_tiny(tmp_path / "m", vocab=32)
    from tests.helpers import char_tokenizer_json
    (path / "tokenizer.json").write_text(char_tokenizer_json(40))
    with pytest.raises(ValueError, match="has 40 tokens but the model's vocab_size is 32"):
        LLM(str(path))


def test_unknown_method_and_bad_k():
    with pytest.raises(ValueError, match="method='eagle' is invalid: expected one of"):
        SpecConfig(method="eagle")
    for k in (0, 17):
        with pytest.raises(ValueError, match=f"num_speculative_tokens={k} is invalid: expected in"):
            SpecConfig(method="ngram", num_speculative_tokens=k)
