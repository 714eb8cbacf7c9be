"""Continuous batching by hand: 3 slots, two prompts of 2 samples each."""
from specrl.engine.sampler import SamplingParams
from specrl.engine.sequence import Scheduler
from specrl.engine.sequence import Sequence, Status


def _seqs():
    # seq ids 0, 1 sample prompt 0; ids 2, 3 sample prompt 1
    return [Sequence(i, i // 2, i % 2, [1, 2], SamplingParams(), 0, 16) for i in range(4)]


def test_admit_groups_by_prompt_and_fills_every_free_slot():
    s = Scheduler(num_slots=3)
    a0, a1, b0, b1 = seqs = _seqs()
    s.add(seqs)
    groups = s.admit()
    # slots 0, 1, 2 go in order; prompt 1's group is split (one slot left), its second sample waits
    assert [[q.seq_id for q in g] for g in groups] == [[0, 1], [2]]
    assert [q.slot for q in (a0, a1, b0)] == [0, 1, 2] and all(q.status is Status.RUNNING for q in (a0, a1, b0))
    assert list(s.waiting) == [b1] and b1.slot is None
    assert s.admit() == []  # no free slot: nothing moves


def test_a_finished_sequence_frees_its_slot_for_the_next():
    s = Scheduler(num_slots=3)
    a0, a1, b0, b1 = seqs = _seqs()
    s.add(seqs)
    s.admit()
    a1.status = Status.FINISHED
    assert s.retire_finished() == [a1] and list(s.free_slots) == [1]
    assert [[q.seq_id for q in g] for g in s.admit()] == [[3]]
    # b1 takes slot 1; running stays sorted by slot (the runner reads consecutive slots as views)
    assert b1.slot == 1 and [q.seq_id for q in s.running] == [0, 3, 2]
    assert not s.done
    for q in (a0, b0, b1):
        q.status = Status.FINISHED
    assert len(s.retire_finished()) == 3 and s.done and sorted(s.free_slots) == [0, 1, 2]
