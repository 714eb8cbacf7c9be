"""Token-frequency suffix structures for the suffix drafter (SuffixDecoding; DAS). Pure bookkeeping: no tensors.

`ContextTrie` answers "what usually follows the longest suffix of this context?": for every context of
1..depth tokens seen, how often each token followed it. It is keyed by the context read backwards, so one
walk from the root along the reversed context reaches the longest matching suffix, and adding a token is
one walk of `depth` dict steps. This is SuffixDecoding's suffix tree cut at `depth`, with counts per context
instead of per subtree; re-matching after each drafted token conditions on the same context.

`SuffixStore` keeps one trie per distinct prompt: the prompt, the outputs of its running sequences (GRPO
siblings share it) and its last `max_rollouts` finished outputs. Pools outlive a generate call, so later RL
steps on the same problem reuse them; the least recently used idle pools go past `max_tokens`.
"""
from __future__ import annotations

import math
from collections import OrderedDict, deque

import torch


class _Node:
    """One context: the counts of the tokens that followed it, and the longer contexts that end with it.
    Most deep contexts were only ever followed by one token: those keep no dict (a third of the memory)."""
    __slots__ = ("children", "counts", "total", "best", "best_count")

    def __init__(self):
        self.children: dict[int, _Node] | None = None  # token one further back -> longer context
        self.counts: dict[int, int] | None = None  # next token -> occurrences; None while only `best` occurred
        self.total = 0
        self.best: int | None = None  # most frequent next token; ties go to the most recently counted
        self.best_count = 0

    def bump(self, token: int, delta: int) -> None:
        self.total += delta
        if self.counts is None:
            if self.best is None or self.best == token:
                self.best_count += delta
                self.best = token if self.best_count > 0 else None
                return
            self.counts = {self.best: self.best_count}
        c = self.counts.get(token, 0) + delta
        if c > 0:
            self.counts[token] = c
        else:
            self.counts.pop(token, None)
        if delta > 0 and c >= self.best_count:
            self.best, self.best_count = token, c
        elif delta < 0 and token == self.best:
            self.best, self.best_count = max(self.counts.items(), key=lambda kv: kv[1], default=(None, 0))


class ContextTrie:
    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError(f"ContextTrie depth={depth} must be >= 1 (the longest context it matches)")
        self.depth = depth
        self.root = _Node()
        self.num_tokens = 0  # tokens indexed, each with its contexts of 1..depth tokens

    def add(self, context: list[int], token: int, delta: int = 1) -> None:
        """Counts `token` (delta=+1) or forgets it (delta=-1) after each suffix of `context` up to depth."""
        self.num_tokens += delta
        node = self.root
        if delta > 0:  # the hot path: one per accepted token
            for tok in reversed(context[-self.depth:]):
                if node.children is None:
                    node.children = {}
                child = node.children.get(tok)
                if child is None:
                    child = node.children[tok] = _Node()
                if child.counts is None and (child.best == token or child.best is None):  # bump(token, 1), inlined
                    child.best, child.best_count, child.total = token, child.best_count + 1, child.total + 1
                else:
                    child.bump(token, 1)
                node = child
            return
        path = []
        for tok in reversed(context[-self.depth:]):  # every context on the way was counted when token was added
            child = node.children[tok]
            child.bump(token, delta)
            path.append((node, tok, child))
            node = child
        for parent, tok, child in reversed(path):  # drop contexts that no longer occur, deepest first
            if child.total <= 0 and not child.children:
                del parent.children[tok]

    def add_tokens(self, tokens: list[int], start: int, delta: int = 1) -> None:
        """Counts (or forgets) tokens[start:], each after the tokens before it."""
        for i in range(max(start, 1), len(tokens)):
            self.add(tokens[max(0, i - self.depth):i], tokens[i], delta)

    def match(self, context: list[int]) -> tuple[_Node | None, int]:
        """The node of the longest suffix of `context` that occurred with a known next token, and its length."""
        node, found, length = self.root, None, 0
        for n, tok in enumerate(reversed(context[-self.depth:]), start=1):
            child = node.children.get(tok) if node.children else None
            if child is None:
                break
            node = child
            if node.total > 0:
                found, length = node, n
        return found, length

    def draft(self, context: list[int], k: int, min_match: int, scale: float, min_prob: float = 0.0) -> list[int]:
        """Greedy walk by frequency: up to min(k, ceil(scale * match length)) tokens, stopping where the
        context no longer matches `min_match` tokens or the path's empirical probability drops below min_prob."""
        node, length = self.match(context)
        if node is None or length < min_match or k <= 0:
            return []
        limit = min(k, math.ceil(scale * length))
        tail, out, prob = list(context[-self.depth:]), [], 1.0
        while True:
            prob *= node.best_count / node.total
            if prob < min_prob:
                break
            out.append(node.best)
            if len(out) >= limit:
                break
            tail.append(node.best)
            if len(tail) > self.depth:
                del tail[0]
            node, length = self.match(tail)
            if node is None or length < min_match:
                break
        return out


NODE_FIELDS = ("parent", "key", "total", "best", "has_best", "best_count", "has_counts")  # one entry per node
COUNT_FIELDS = ("count_node", "count_token", "count")  # one entry per (node, next token) count


def trie_state(trie: ContextTrie) -> dict:
    """The trie as flat tensors (nodes in depth-first order, each after its parent), for checkpoints. The
    order of every node's counts is kept: it decides ties when a count is forgotten."""
    nodes, counts = [], []
    stack = [(trie.root, 0, 0)]
    while stack:
        node, par, tok = stack.pop()
        counts += [(len(nodes), t, c) for t, c in (node.counts or {}).items()]
        nodes.append((par, tok, node.total, node.best if node.best is not None else 0, node.best is not None,
                      node.best_count, node.counts is not None))
        stack.extend((child, len(nodes) - 1, t) for t, child in reversed(list((node.children or {}).items())))
    state = {"depth": trie.depth, "num_tokens": trie.num_tokens}
    for fields, rows in ((NODE_FIELDS, nodes), (COUNT_FIELDS, counts)):
        for k, col in zip(fields, list(zip(*rows)) or [()] * len(fields)):
            state[k] = torch.tensor(col, dtype=torch.bool if k.startswith("has_") else torch.long)
    return state


def trie_from_state(state: dict) -> ContextTrie:
    trie = ContextTrie(int(state["depth"]))
    trie.num_tokens = int(state["num_tokens"])
    nodes = []
    for i, (par, tok, total, best, has_best, best_count, has_counts) in enumerate(
            zip(*(state[k].tolist() for k in NODE_FIELDS))):
        node = trie.root if i == 0 else _Node()
        node.total, node.best_count = total, best_count
        node.best = best if has_best else None
        node.counts = {} if has_counts else None
        if i > 0:
            parent = nodes[par]
            if parent.children is None:
                parent.children = {}
            parent.children[tok] = node
        nodes.append(node)
    for n, t, c in zip(*(state[k].tolist() for k in COUNT_FIELDS)):
        nodes[n].counts[t] = c
    return trie


class PromptPool:
    """Everything indexed for one prompt: the prompt, live outputs, and recent finished outputs."""

    def __init__(self, prompt: tuple[int, ...], depth: int):
        self.prompt = prompt
        self.trie = ContextTrie(depth)
        self.trie.add_tokens(list(prompt), 1)
        self.finished: deque[list[int]] = deque()
        self.active = 0  # running sequences writing into this pool

    def forget_oldest(self) -> None:
        output = self.finished.popleft()
        tokens = list(self.prompt[-self.trie.depth:]) + output
        self.trie.add_tokens(tokens, len(tokens) - len(output), delta=-1)


class SuffixStore:
    def __init__(self, depth: int, max_rollouts: int, max_tokens: int):
        if max_rollouts < 0 or max_tokens < 0:
            raise ValueError(f"SuffixStore max_rollouts={max_rollouts}, max_tokens={max_tokens}: expected >= 0")
        self.depth, self.max_rollouts, self.max_tokens = depth, max_rollouts, max_tokens
        self.pools: OrderedDict[tuple[int, ...], PromptPool] = OrderedDict()

    @property
    def num_tokens(self) -> int:
        return sum(p.trie.num_tokens for p in self.pools.values())

    def acquire(self, prompt: list[int]) -> PromptPool:
        """The pool of this prompt (new or cached) for one more running sequence."""
        key = tuple(prompt)
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = PromptPool(key, self.depth)
        self.pools.move_to_end(key)
        pool.active += 1
        return pool

    def release(self, pool: PromptPool, output: list[int]) -> None:
        """A sequence of `pool` finished: its output (already indexed) joins the pool's history."""
        pool.active -= 1
        pool.finished.append(list(output))
        while len(pool.finished) > self.max_rollouts:
            pool.forget_oldest()
        self._evict()

    def state_dict(self) -> dict:
        """The pools between generate() calls (no sequence running), in least-recently-used order."""
        if any(p.active for p in self.pools.values()):
            raise RuntimeError("SuffixStore.state_dict() while sequences are running: save between generate() calls")
        return {"depth": self.depth, "max_rollouts": self.max_rollouts, "max_tokens": self.max_tokens,
                "pools": [{"prompt": torch.tensor(key, dtype=torch.long), "trie": trie_state(pool.trie),
                           "finished": [torch.tensor(o, dtype=torch.long) for o in pool.finished]}
                          for key, pool in self.pools.items()]}

    def load_state_dict(self, state: dict) -> None:
        if int(state["depth"]) != self.depth:
            raise ValueError(f"suffix state has depth {state['depth']} but this drafter matches up to {self.depth} "
                             "tokens (rollout.spec.suffix.max): resume with the run's own config")
        self.pools = OrderedDict()
        for entry in state["pools"]:
            key = tuple(entry["prompt"].tolist())
            pool = PromptPool.__new__(PromptPool)
            pool.prompt, pool.trie, pool.active = key, trie_from_state(entry["trie"]), 0
            pool.finished = deque(o.tolist() for o in entry["finished"])
            self.pools[key] = pool

    def _evict(self) -> None:
        total = self.num_tokens
        for key in list(self.pools):  # least recently used first
            if total <= self.max_tokens:
                break
            pool = self.pools[key]
            if pool.active == 0:
                total -= pool.trie.num_tokens
                del self.pools[key]
