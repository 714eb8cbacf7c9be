"""Continuous batching: which sequences run next, and which cache slot each one owns. No tensors."""
from __future__ import annotations

from collections import deque

from .sequence import Sequence, Status


class Scheduler:
    def __init__(self, num_slots: int):
        self.free_slots = deque(range(num_slots))
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seqs: list[Sequence]) -> None:
        self.waiting.extend(seqs)

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    def admit(self) -> list[list[Sequence]]:
        """Moves waiting sequences into free slots, grouped by prompt (a group shares one prefill; split if need be)."""
        groups: list[list[Sequence]] = []
        while self.waiting and self.free_slots:
            seq = self.waiting.popleft()
            seq.slot = self.free_slots.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
            if groups and groups[-1][0].request_id == seq.request_id:
                groups[-1].append(seq)
            else:
                groups.append([seq])
        self.running.sort(key=lambda s: s.slot)  # consecutive slots let the runner read the cache as views
        return groups

    def retire_finished(self) -> list[Sequence]:
        done = [s for s in self.running if s.status is Status.FINISHED]
        self.running = [s for s in self.running if s.status is not Status.FINISHED]
        self.free_slots.extend(s.slot for s in done)
        return done
