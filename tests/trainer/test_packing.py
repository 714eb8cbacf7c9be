"""Packed micro-batches (specrl.trainer.batch) against the padded update: the same numbers within fp32 round-off."""
from __future__ import annotations

import copy

import pytest
import torch

from specrl import LLM, SamplingParams
from specrl.config import ConfigError
from specrl.model.layers import packed_positions
from specrl.trainer.batch import micro_batch_groups, pack
from specrl.config.run import AlgorithmConfig, OptimConfig
from specrl.trainer.trainer import ForwardInfo, PolicyTrainer, collate
from tests.helpers import tiny_model


def _trainer(model, packing, micro_tokens=None, **algo):
    optim = OptimConfig(lr=1e-2, warmup_steps=0, micro_batch_size=100, micro_batch_tokens=micro_tokens,
                        packing=packing)
    return PolicyTrainer(model, AlgorithmConfig(**algo), optim, total_steps=10, temperature=0.9, norm_len=8)


def _rollouts(model, max_tokens=24):
    """Rows of very different lengths (prompts of 1-6 tokens, responses of up to `max_tokens`)."""
    llm = LLM(copy.deepcopy(model), max_num_seqs=16)
    prompts = [[3], [6, 7], [8, 9, 10, 11, 12, 13], [4, 5, 6]]
    outs = llm.generate(prompts, SamplingParams(n=3, temperature=1.0, max_tokens=max_tokens, seed=3))
    samples = [(r.prompt_token_ids, c) for r in outs for c in r.outputs]
    adv = torch.linspace(-1, 1, len(samples)) + 0.1  # [N] none zero: every row is in the update
    return collate([p for p, _ in samples], [c.token_ids for _, c in samples], [c.logprobs for _, c in samples],
                   adv, pad_id=0)


def test_packed_positions_restart_per_row():
    assert packed_positions((3, 1, 2), "cpu").tolist() == [[0, 1, 2, 0, 0, 1]]


def test_a_packed_forward_equals_each_row_on_its_own():
    model = tiny_model(seed=1)
    batch = _rollouts(model)
    assert len(set(batch.lengths.tolist())) > 3  # the rows really differ in length
    mb = batch.rows(torch.arange(batch.num_rows))
    packed = pack(mb)
    with torch.no_grad():
        padded = model(mb.input_ids, hidden_layers=(0, 1)).logits  # [N, T, V]
        flat = model(packed.input_ids, hidden_layers=(0, 1), segments=packed.segments).logits  # [1, sum T_i, V]
    assert flat.shape[1] == int(batch.lengths.sum())
    assert torch.allclose(packed.unpack(flat)[packed.valid], padded[packed.valid], atol=1e-5)


@pytest.mark.parametrize("micro_tokens", [None, 40])  # one micro-batch; several, cut by real tokens
def test_packed_update_equals_padded_with_mtp_and_kl(micro_tokens):
    model = tiny_model(seed=6, num_mtp_modules=1)
    batch = _rollouts(model)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    algo = dict(kl_coef=0.1, mtp_coef=0.5, updates_per_step=2)  # 2 updates: pi_old from `score`
    ta, tb = _trainer(a, packing=False, micro_tokens=micro_tokens, **algo), _trainer(b, True, micro_tokens, **algo)
    ta.micro_batches = tb.micro_batches  # the same rows together (the MTP loss averages each micro-batch's)
    if micro_tokens:
        chunks = tb.micro_batches(torch.arange(batch.num_rows), batch.lengths)
        assert len(chunks) > 1 and all(int(batch.lengths[c].sum()) <= micro_tokens for c in chunks)
    old_a, old_b = ta.score(a, batch), tb.score(b, batch)  # [N, T] logprobs, 0 at padding when packed
    assert torch.allclose(old_a * batch.mask, old_b * batch.mask, atol=1e-6)
    ma, mb = ta.step(batch), tb.step(batch)
    assert ma["mtp_loss"] > 0 and ma["kl"] > 0
    for key in ("loss", "entropy", "kl", "mtp_loss", "clip_frac", "logprob_diff", "grad_norm"):
        assert mb[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-7), key
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):  # the second update's gradients
        # fp32 round-off of sums in another order, through two AdamW steps: ~1e-5 of the largest entry
        assert (pa.grad - pb.grad).abs().max() <= 1e-4 * pa.grad.abs().max(), name


class Recorder:
    hidden_layers = (0, 1)

    def __init__(self):
        self.seen = []

    def __call__(self, info: ForwardInfo) -> None:
        self.seen.append((info, info.logits(info.output.last_hidden.detach())))


def test_the_forward_hook_sees_the_padded_layout():
    model = tiny_model(seed=2)
    batch = _rollouts(model)
    batch = batch._replace(advantages=batch.advantages * (torch.arange(batch.num_rows) % 3 != 0))  # some skipped
    views, groups = {}, _trainer(model, True, micro_tokens=60).micro_batches
    for packing in (False, True):
        t = _trainer(copy.deepcopy(model), packing, micro_tokens=60)
        t.micro_batches = groups  # the same rows together either way
        t.forward_hook = rec = Recorder()
        t.step(batch)
        views[packing] = rec.seen
    assert len(views[True]) >= 2  # the update's micro-batches and the skipped rows' forward
    assert [v.rows.tolist() for v, _ in views[False]] == [v.rows.tolist() for v, _ in views[True]]
    for (pad, pad_logits), (pk, pk_logits) in zip(views[False], views[True]):
        assert torch.equal(pad.input_ids, pk.input_ids) and torch.equal(pad.mask, pk.mask)
        valid = torch.arange(pad.input_ids.shape[1])[None] < batch.lengths[pad.rows][:, None]  # [b, T]
        for h_pad, h_pk in zip(pad.output.hidden + (pad.output.last_hidden,), pk.output.hidden +
                               (pk.output.last_hidden,)):
            assert h_pad.shape == h_pk.shape  # [b, T, D]
            assert torch.allclose(h_pad[valid], h_pk[valid], atol=1e-5)
            assert not h_pk[~valid].any()  # padding: zeros
        assert torch.allclose(pad_logits[valid], pk_logits[valid], atol=1e-5)


@pytest.mark.parametrize("packing", [False, True])
def test_a_token_budget_below_the_longest_row_names_the_knob(packing):
    model = tiny_model(seed=2)
    batch = _rollouts(model)
    longest = int(batch.lengths.max())
    t = _trainer(model, packing, micro_tokens=longest - 1)
    with pytest.raises(ConfigError, match=f"optim.micro_batch_tokens.*at least {longest}"):
        t.step(batch)


def test_micro_batch_groups_cap_rows_and_tokens():
    lengths, idx = torch.tensor([2, 3, 5, 7]), torch.arange(4)  # sorted ascending

    def groups(packed: bool, max_tokens: int) -> list[list[int]]:
        return [g.tolist() for g in micro_batch_groups(idx, lengths, 3, max_tokens, packed)]

    # packed counts real tokens: 2+3+5 = 10 fits 10, a 4th row would break the 3-row cap
    assert groups(True, 10) == [[0, 1, 2], [3]]
    # padded counts rows x the last (longest) row: 3 x 5 = 15 > 10, then 2 x 7 = 14 > 10
    assert groups(False, 10) == [[0, 1], [2], [3]]
    # no token cap: only the row cap
    assert groups(False, 0) == [[0, 1, 2], [3]]


def test_no_rows_make_no_micro_batches():
    # an audit whose rows all learn leaves nothing to score: no micro-batch (not one of zero rows, which crashed)
    for packed in (False, True):
        assert micro_batch_groups(torch.arange(0), torch.tensor([]), 3, 0, packed) == []
