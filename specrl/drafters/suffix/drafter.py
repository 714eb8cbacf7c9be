"""Suffix drafter (SuffixDecoding, Oliaro et al. 2024; DAS): model-free drafts from the prompt and from the
rollouts of the same prompt, GRPO siblings still in flight included. q is one-hot (probs=None).

Each running sequence writes its accepted tokens into its prompt's pool (tree.py), where siblings read them
at once; pools outlive a generate() call, so the next RL step on the same problem starts warm. The draft
follows the most frequent continuation of the longest matching suffix, up to min(k, ceil(scale *
match length)) tokens, nothing when fewer than `min` tokens match (its options, `rollout.spec.suffix`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...engine.drafting import Proposal, TargetForward, pad_proposals
from ...engine.methods import SpecConfig
from ...engine.sequence import Sequence
from .tree import PromptPool, SuffixStore

# Bounded memory: finished rollouts kept per prompt (GRPO n=8 -> the last two RL steps) and tokens indexed over
# all prompts; idle prompts are evicted least recent first. A token costs at most `max` new contexts
# (text that never repeats), far less on repetitive text, so the index's memory is bounded too.
MAX_ROLLOUTS_PER_PROMPT = 16
MAX_INDEXED_TOKENS = 200_000
# A draft stops once its empirical path probability falls below this: the verify forward pays for every
# drafted token, and a continuation the rollouts themselves disagree on is rarely the policy's next token.
MIN_PATH_PROB = 0.1


@dataclass
class _SlotState:
    seq: Sequence
    pool: PromptPool
    tail: list[int]  # the last `depth` tokens of the sequence (the context a draft continues)
    indexed: int  # how many of seq.output the pool has counted


class SuffixDrafter:
    hidden_layers: tuple[int, ...] = ()

    def __init__(self, spec: SpecConfig, device, max_rollouts: int = MAX_ROLLOUTS_PER_PROMPT):
        self.spec, self.device = spec, device
        self.opts = spec.options["suffix"]
        self.store = SuffixStore(self.opts.max, max_rollouts, MAX_INDEXED_TOKENS)
        self.slots: dict[int, _SlotState] = {}

    def _sync(self, seq: Sequence) -> _SlotState:
        """Counts the sequence's accepted tokens not yet in its pool. The engine appends accepted tokens to
        seq.output before calling observe, so the output itself says what is new (a row's `valid` inputs)."""
        state = self.slots.get(seq.slot)
        if state is None or state.seq is not seq:
            if state is not None:  # the slot was reused without a release: retire its old sequence now
                self.store.release(state.pool, state.seq.output[:state.indexed])
            state = self.slots[seq.slot] = _SlotState(seq, self.store.acquire(seq.prompt),
                                                      list(seq.prompt[-self.store.depth:]), 0)
        trie, tail, depth = state.pool.trie, state.tail, self.store.depth
        for tok in seq.output[state.indexed:]:
            trie.add(tail, tok)
            tail.append(tok)
            if len(tail) > depth:
                del tail[0]
        state.indexed = len(seq.output)
        return state

    def observe(self, fwd: TargetForward) -> None:
        for seq, v in zip(fwd.seqs, fwd.valid.tolist()):
            if v > 0:
                self._sync(seq)

    def propose(self, seqs: list[Sequence], k: list[int]) -> Proposal:
        opts, drafts = self.opts, []
        for seq, ki in zip(seqs, k):
            if ki <= 0:
                drafts.append([])
                continue
            state = self._sync(seq)
            drafts.append(state.pool.trie.draft(state.tail, ki, opts.min, opts.scale, MIN_PATH_PROB))
        return pad_proposals(drafts, self.device)

    def state_dict(self) -> dict:
        """The cross-step state an exact resume needs: the pools of earlier rollouts (rejection sampling
        makes the realised tokens depend on the drafts). Taken between generate() calls."""
        return {"store": self.store.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.store.load_state_dict(state["store"])
        self.slots.clear()

    def release(self, seq: Sequence) -> None:
        state = self.slots.get(seq.slot)
        if state is None or state.seq is not seq:
            return
        self._sync(seq)
        del self.slots[seq.slot]
        self.store.release(state.pool, seq.output)
