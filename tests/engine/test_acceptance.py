"""Per-position acceptance counts, worked by hand. Constants (engine/adaptive/constants.py): ACCEPT_DECAY 0.99,
PRIOR_ALPHA 0.5 counted as PRIOR_ROWS 1 row, BONUS 0.35, MAX_ALPHA 0.98."""
import math

import pytest

from specrl.engine.adaptive.acceptance import AcceptanceStats


def _one_row():
    stats = AcceptanceStats(k_max=3)
    # one row asked for 3 drafts, proposed 3, first accepted, second rejected:
    # positions 0 and 1 were reached, position 0 was accepted
    stats.add(asked=[3], lengths=[3], accepted=[1])
    return stats


def test_counts_of_one_row():
    stats = _one_row()
    assert stats.reached == [1.0, 1.0, 0.0] and stats.accepted == [1.0, 0.0, 0.0]
    assert stats.asked == stats.proposed == [1.0, 1.0, 1.0] and stats.rows == 1.0


def test_alphas_and_expected_accepted_drafts():
    stats = _one_row()
    # alpha_0 = (1 + 1 x 0.5) / (1 + 1) = 0.75; alpha_1 = (0 + 1 x 0.75) / (1 + 1) = 0.375 (the prior is the
    # previous position's estimate); alpha_2 = (0 + 0.375) / (0 + 1) = 0.375 (never reached: the prior alone)
    assert list(stats.alphas(3, optimistic=False)) == pytest.approx([0.75, 0.375, 0.375])
    # expected accepted = 0.75 + 0.75 x 0.375 + 0.75 x 0.375^2 = 0.75 + 0.28125 + 0.10546875
    assert stats.expected(3, optimistic=False) == pytest.approx(1.13671875)
    assert stats.expected(1, optimistic=False) == pytest.approx(0.75)
    # optimism: + 0.35 / sqrt(reached + 1); position 0: 0.75 + 0.247 = 0.997, capped at 0.98
    bonus = 0.35 / math.sqrt(2)
    assert list(stats.alphas(3)) == pytest.approx([0.98, 0.375 + bonus, 0.375 + 0.35])


def test_counts_decay_and_a_short_proposal():
    stats = _one_row()
    # the next step: every count first decays by 0.99; then a row asked for 2, proposed 1, that 1 accepted
    stats.add(asked=[2], lengths=[1], accepted=[1])
    assert stats.reached == pytest.approx([1.99, 1.99, 0.0]) and stats.accepted == pytest.approx([1.99, 0.0, 0.0])
    assert stats.asked == pytest.approx([1.99, 1.99, 0.99]) and stats.proposed == pytest.approx([1.99, 0.99, 0.99])
    # rows asked for 2 that got both: (0.99 + 0.5 prior) / (1.99 + 1)
    assert stats.full_share(2) == pytest.approx(1.49 / 2.99)
    stats.add(asked=[], lengths=[], accepted=[])  # a step this drafter did not draft: no decay
    assert stats.rows == pytest.approx(1.99)


def test_state_round_trip():
    stats, copy = _one_row(), AcceptanceStats(k_max=3)
    copy.load_state_dict(stats.state_dict())
    assert copy.expected(3) == stats.expected(3)
