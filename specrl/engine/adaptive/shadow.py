"""Shadow drafts: the model-free drafters propose k_max tokens for a few rows each step (microseconds), each
scored against the tokens the row then emits. For a point draft that is an unbiased look at its acceptance
(the verifier accepts x with probability p(x), the chance that the policy's own exact sample is x), so the
schedule learns which model-free drafter pays at every draft length without spending steps on trying each."""
from __future__ import annotations

from ..constants import SHADOW_ROWS
from ..pool import DrafterPool
from ..sequence import Sequence, Status
from .arms import ALL, FULL, tally


class ShadowDrafts:
    def __init__(self, names: list[str], k_max: int):
        self.names, self.k_max = names, k_max  # the model-free drafters
        self.pending: list[tuple[str, Sequence, int, list[int]]] = []  # (drafter, row, its length, draft)
        self.turn = 0  # which rows shadow drafts next

    def propose(self, seqs: list[Sequence], pool: DrafterPool) -> None:
        if not self.names or not seqs:
            return
        busy = {(name, seq.seq_id) for name, seq, _, _ in self.pending}
        n = min(SHADOW_ROWS, len(seqs))
        rows = [seqs[(self.turn + i) % len(seqs)] for i in range(n)]
        self.turn += n
        for name in self.names:
            free = [s for s in rows if (name, s.seq_id) not in busy and s.budget > 1]
            if not free:
                continue
            prop = pool.drafters[name].propose(free, [self.k_max] * len(free))
            for seq, toks, length in zip(free, prop.tokens.tolist(), prop.lengths.tolist()):
                self.pending.append((name, seq, seq.num_tokens, toks[:length]))

    def score(self, rows: dict, per_row) -> None:
        """Counts into `rows` the drafts whose outcome is known: the row emitted past the draft (or past a
        rejection), or finished; and hands each to `per_row(seq_id, drafter, asked, accepted)`."""
        pending = []
        for name, seq, before, draft in self.pending:
            emitted = seq.tokens[before:]
            a = 0
            while a < min(len(draft), len(emitted)) and draft[a] == emitted[a]:
                a += 1
            known = a < min(len(draft), len(emitted)) or len(emitted) > len(draft)  # a rejection, or past it
            if not known and seq.status is not Status.FINISHED:
                pending.append((name, seq, before, draft))
                continue
            asked = self.k_max if known else len(emitted)  # a finished row reveals what it emitted only
            if asked == 0:
                continue
            keys = ((name, ALL), (name, FULL)) if len(draft) >= asked else ((name, ALL),)
            tally(rows, keys, asked, min(len(draft), asked), min(a, asked))
            per_row(seq.seq_id, name, asked, min(a, asked))
        self.pending = pending
