"""`verify` and `draft_q` worked by hand on a 3-token vocabulary {0, 1, 2}, so a bug in the acceptance rule
or the residual fails here, in one line, before the chi-square tests in tests/drafters would notice it.

Every row verifies K = 2 drafts against the same target distributions (except the greedy row):

    p[0] = [0.5, 0.3, 0.2]   p[1] = [0.1, 0.6, 0.3]   p[2] = [0.2, 0.2, 0.6]  (the bonus position)

Rule: draft x at position i is accepted when u_accept[i] * q(x) < p(x); at the first rejection i the token is
drawn from norm(max(p[i] - q[i], 0)), and after K acceptances from p[K]. `sample_from` is an inverse CDF:
the token is the number of CDF entries below u x (total mass).
"""
from __future__ import annotations

import torch

from specrl.engine.sampler import draft_q, verify

P = [[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]
ONE = {0: [1.0, 0.0, 0.0], 1: [0.0, 1.0, 0.0], 2: [0.0, 0.0, 1.0]}
NONE = [0.0, 0.0, 0.0]  # q past a row's draft length

# (p [K+1, V], drafts [K], q [K, V], u_accept [K], u_sample [K+1], expected accepted, expected tokens)
CASES = {
    # point drafts (q one-hot). Draft 1 at 0: 0.25 * 1 < p(1) = 0.3, accepted. Draft 2 at 1: 0.5 >= p(2) = 0.3,
    # rejected. Residual max(p[1] - onehot(2), 0) = [0.1, 0.6, 0]: CDF [0.1, 0.7, 0.7], u = 0.5 -> 0.35 -> 1.
    "point, one accepted": (P, [1, 2], [ONE[1], ONE[2]], [0.25, 0.5], [0.9, 0.5, 0.9], 1, [1, 1]),
    # draft distributions. Draft 1 at 0: q(1) = 0.6, p(1) = 0.3 (ratio 0.5); 0.6 * 0.6 = 0.36 >= 0.3, rejected.
    # Residual max([0.5, 0.3, 0.2] - [0.2, 0.6, 0.2], 0) = [0.3, 0, 0]: token 0 whatever the uniform.
    "q, first rejected": (P, [1, 2], [[0.2, 0.6, 0.2], [0.3, 0.3, 0.4]], [0.6, 0.1], [0.99, 0.5, 0.5], 0, [0]),
    # every draft accepted: 0.4 < p[0](0) = 0.5 and 0.59 < p[1](1) = 0.6; the bonus comes from p[2]:
    # CDF [0.2, 0.4, 1.0], u = 0.9 -> 2.
    "point, all accepted": (P, [0, 1], [ONE[0], ONE[1]], [0.4, 0.59], [0.1, 0.1, 0.9], 2, [0, 1, 2]),
    # no draft (length 0: q = 0 everywhere): nothing is accepted and the residual is p[0] itself:
    # CDF [0.5, 0.8, 1.0], u = 0.7 -> 1.
    "no draft": (P, [2, 2], [NONE, NONE], [0.01, 0.01], [0.7, 0.5, 0.5], 0, [1]),
    # p(x) > q(x) is accepted at any uniform: draft 1 at 0 with q(1) = 0.1 < p(1) = 0.3 (0.99 * 0.1 < 0.3).
    # Draft 2 at 1: q(2) = 0.8, p(2) = 0.3; 0.4 * 0.8 = 0.32 >= 0.3, rejected. Residual
    # max([0.1, 0.6, 0.3] - [0.1, 0.1, 0.8], 0) = [0, 0.5, 0]: token 1.
    "q, p above q": (P, [1, 2], [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8]], [0.99, 0.4], [0.5, 0.01, 0.5], 1, [1, 1]),
    # greedy p (one-hot on the argmax): draft 1 is the argmax at 0 (accepted at any u), draft 2 is not at 1
    # (p(2) = 0: rejected at any u); the residual onehot(0) - onehot(2), clamped, is onehot(0): token 0.
    "greedy": ([ONE[1], ONE[0], ONE[2]], [1, 2], [ONE[1], ONE[2]], [0.99, 0.01], [0.5, 0.5, 0.5], 1, [1, 0]),
    # p = q at the rejected position leaves an empty residual (only float round-off gets there; u = 1 stands
    # in for it): the token is drawn from p[0] itself, CDF [0.5, 0.8, 1.0], u = 0.7 -> 1.
    "empty residual": (P, [0, 1], [P[0], P[1]], [1.0, 0.5], [0.7, 0.5, 0.5], 0, [1]),
}


def _batch():
    cols = list(zip(*CASES.values()))
    p, drafts, q, ua, us = (torch.tensor(c, dtype=torch.float64 if i >= 3 else None) for i, c in enumerate(cols[:5]))
    return p.float(), drafts.long(), q.float(), ua, us, cols[5], cols[6]


def test_verify_matches_the_hand_worked_rows():
    p, drafts, q, ua, us, accepted, tokens = _batch()
    verdict = verify(p, drafts, q, ua, us)
    got = verdict.num_accepted.tolist()
    for b, name in enumerate(CASES):
        assert got[b] == accepted[b], name
        assert verdict.tokens[b, :got[b] + 1].tolist() == tokens[b], name


def test_each_row_alone_gives_the_same_verdict():
    """A row's verdict does not depend on the other rows of the batch."""
    p, drafts, q, ua, us, accepted, tokens = _batch()
    for b, name in enumerate(CASES):
        one = verify(p[b:b + 1], drafts[b:b + 1], q[b:b + 1], ua[b:b + 1], us[b:b + 1])
        assert one.num_accepted.tolist() == [accepted[b]], name
        assert one.tokens[0, :accepted[b] + 1].tolist() == tokens[b], name


def test_draft_q_is_one_hot_for_point_drafts_and_zero_past_each_length():
    drafts = torch.tensor([[1, 2], [0, 2], [2, 2]])
    q = draft_q(drafts, None, torch.tensor([2, 1, 0]), 3)  # [3, 2, 3]
    assert q.tolist() == [[ONE[1], ONE[2]], [ONE[0], NONE], [NONE, NONE]]
    probs = torch.tensor([[[0.2, 0.6, 0.2], [0.3, 0.3, 0.4]]])
    assert torch.allclose(draft_q(drafts[:1], probs, torch.tensor([1]), 3), torch.tensor([[[0.2, 0.6, 0.2], NONE]]))
