"""The suffix drafter's cross-step state survives a checkpoint as tensors: drafts, and how later rollouts and
forgetting change them, are the same after a save/load as without one."""
import random

from specrl.drafters.suffix.tree import SuffixStore
from specrl.state_files import load_state, save_state


def _filled_store(seed: int) -> SuffixStore:
    """Pools with repeats, ties and forgotten rollouts (max_rollouts=3 forces forget_oldest)."""
    rng = random.Random(seed)
    store = SuffixStore(depth=4, max_rollouts=3, max_tokens=10_000)
    for p in range(5):
        prompt = [rng.randrange(6) for _ in range(4)]
        for _ in range(6):
            pool = store.acquire(prompt)
            out = [rng.randrange(6) for _ in range(rng.randrange(3, 12))]
            pool.trie.add_tokens(list(prompt[-4:]) + out, 4)
            store.release(pool, out)
    return store


def _drafts(store: SuffixStore, rng: random.Random) -> list:
    out = []
    for prompt, pool in store.pools.items():
        for _ in range(20):
            ctx = list(prompt) + [rng.randrange(6) for _ in range(rng.randrange(0, 5))]
            out.append(pool.trie.draft(ctx, 4, 1, 1.0))
    return out


def _continue(store: SuffixStore, seed: int) -> None:
    """More rollouts on the same prompts: forgetting the oldest recomputes ties from the stored counts."""
    rng = random.Random(seed)
    for prompt in list(store.pools):
        pool = store.acquire(list(prompt))
        out = [rng.randrange(6) for _ in range(8)]
        pool.trie.add_tokens(list(prompt[-4:]) + out, 4)
        store.release(pool, out)


def test_a_saved_and_loaded_store_drafts_and_evolves_like_the_original(tmp_path):
    a = _filled_store(0)
    save_state(tmp_path, "drafter", a.state_dict())
    b = SuffixStore(depth=4, max_rollouts=3, max_tokens=10_000)
    b.load_state_dict(load_state(tmp_path, "drafter"))
    assert list(b.pools) == list(a.pools)  # least-recently-used order kept: eviction order is the same
    assert b.num_tokens == a.num_tokens
    assert _drafts(b, random.Random(1)) == _drafts(a, random.Random(1))
    for s in range(3):
        _continue(a, s)
        _continue(b, s)
        assert _drafts(b, random.Random(s)) == _drafts(a, random.Random(s))


def test_the_node_fields_round_trip_exactly(tmp_path):
    a = _filled_store(3)
    b = SuffixStore(depth=4, max_rollouts=3, max_tokens=10_000)
    b.load_state_dict(a.state_dict())

    def walk(node):
        yield node.total, node.best, node.best_count, None if node.counts is None else list(node.counts.items())
        for tok in sorted(node.children or {}):
            yield tok
            yield from walk(node.children[tok])
    for key in a.pools:
        assert list(walk(b.pools[key].trie.root)) == list(walk(a.pools[key].trie.root))
        assert list(b.pools[key].finished) == list(a.pools[key].finished)
