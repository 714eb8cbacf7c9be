"""merge_proposals: parts over disjoint rows become one proposal; point drafts become one-hot rows of q."""
import torch

from specrl.engine.drafting import Proposal
from specrl.engine.steps import merge_proposals


def test_a_point_draft_beside_a_distribution_draft_becomes_one_hot_rows_of_q():
    # row 0: a drafter with q over a 3-token vocabulary, 2 drafts; row 2: point drafts [2, 1] of length 1;
    # row 1: no part, so it drafts nothing
    q = torch.tensor([[[0.5, 0.25, 0.25], [0.0, 1.0, 0.0]]])  # [1, 2, 3]
    with_q = Proposal(torch.tensor([[0, 1]]), torch.tensor([2]), q)
    points = Proposal(torch.tensor([[2, 1]]), torch.tensor([1]), None)
    merged = merge_proposals([([0], with_q), ([2], points)], B=3, vocab=3, device="cpu")
    assert merged.tokens.tolist() == [[0, 1], [0, 0], [2, 1]]
    assert merged.lengths.tolist() == [2, 0, 1]
    assert torch.equal(merged.probs[0], q[0])
    assert merged.probs[1].abs().sum() == 0  # no part: q stays zero
    # the point drafts' q is one-hot on each token (past the length too: sample() masks by the lengths)
    assert merged.probs[2].tolist() == [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]


def test_point_drafts_alone_carry_no_q():
    points = Proposal(torch.tensor([[2]]), torch.tensor([1]), None)
    merged = merge_proposals([([1], points)], B=2, vocab=3, device="cpu")
    assert merged.probs is None and merged.tokens.tolist() == [[0], [2]]
