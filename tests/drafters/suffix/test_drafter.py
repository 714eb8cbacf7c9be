"""Suffix drafter: the frequency trie, per-prompt pools (siblings, history, eviction), and greedy exactness."""
import pytest
import torch

from specrl import LLM, SamplingParams, SpecConfig
from specrl.drafters.suffix.drafter import SuffixDrafter
from specrl.drafters.suffix.tree import ContextTrie, SuffixStore
from specrl.engine.drafting import TargetForward
from specrl.engine.sequence import Sequence
from tests.helpers import tiny_model

PROMPT = [0, 20, 21, 22]


def make_seq(seq_id, slot, output=(), prompt=PROMPT, request_id=0):
    seq = Sequence(seq_id, request_id, seq_id, list(prompt), SamplingParams(max_tokens=50), seed=0, max_len=64)
    seq.slot, seq.output = slot, list(output)
    return seq


def observe(drafter, seqs):
    """What the engine passes after a forward; the drafter reads only seqs and valid."""
    B = len(seqs)
    z = torch.zeros(B, 1, dtype=torch.long)
    drafter.observe(TargetForward(seqs, z, z, torch.ones(B, dtype=torch.long), (), torch.zeros(B, 1, 1)))


def drafts(drafter, seqs, k):
    prop = drafter.propose(seqs, [k] * len(seqs))
    return [prop.tokens[b, :n].tolist() for b, n in enumerate(prop.lengths.tolist())]


def spec(**kw):
    return SpecConfig(**{"method": "suffix", "num_speculative_tokens": 4, "options": {"suffix": {"min": 1}}, **kw})


# ---- the trie -------------------------------------------------------------------------------------------
def test_match_finds_the_longest_suffix_that_occurred():
    trie = ContextTrie(depth=4)
    trie.add_tokens([1, 2, 3, 4, 1, 2, 3], start=0)
    # "2 3" was followed by 4; "9 2 3" never occurred -> the match is "2 3", length 2
    node, n = trie.match([9, 2, 3])
    assert n == 2 and node.best == 4
    # "1 2 3" was followed by 4 once (the final "1 2 3" has no next token yet) -> length 3
    assert trie.match([1, 2, 3])[1] == 3
    assert trie.match([7]) == (None, 0)


def test_draft_follows_the_most_frequent_continuation_not_the_latest():
    trie = ContextTrie(depth=4)
    trie.add_tokens([1, 2, 3, 1, 2, 3, 1, 2, 4], start=0)
    # after "1 2": 3 twice, 4 once (4 is the latest, which prompt lookup would pick)
    assert trie.draft([1, 2], k=1, min_match=1, scale=1.0) == [3]
    # ties go to the most recently counted token
    trie.add_tokens([5, 1, 2, 4], start=0)  # now 3: 2, 4: 2
    assert trie.draft([1, 2], k=1, min_match=1, scale=1.0) == [4]


def test_draft_length_grows_with_the_match():
    trie = ContextTrie(depth=8)
    trie.add_tokens([5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10], start=0)
    # context [7]: match 1 -> ceil(1.0 * 1) = 1 token; [6, 7]: match 2 -> 2 tokens
    assert trie.draft([7], k=8, min_match=1, scale=1.0) == [8]
    assert trie.draft([6, 7], k=8, min_match=1, scale=1.0) == [8, 9]
    # scale 1.5: ceil(1.5 * 1) = 2; ceil(1.5 * 2) = 3; k caps it
    assert trie.draft([7], k=8, min_match=1, scale=1.5) == [8, 9]
    assert trie.draft([6, 7], k=8, min_match=1, scale=1.5) == [8, 9, 10]
    assert trie.draft([6, 7], k=2, min_match=1, scale=1.5) == [8, 9]
    # too short a match proposes nothing
    assert trie.draft([7], k=8, min_match=2, scale=1.0) == []


def test_draft_stops_where_rollouts_disagree():
    trie = ContextTrie(depth=4)
    # after "1 2": 3 (p = 1), after "1 2 3": 4 three times, 5 twice, 6 five times -> p(6) = 0.5
    for nxt in [4, 4, 4, 5, 5, 6, 6, 6, 6, 6]:
        trie.add_tokens([1, 2, 3, nxt], start=0)
    assert trie.draft([1, 2], k=4, min_match=1, scale=2.0, min_prob=0.0) == [3, 6]
    # path probability 1 * 0.5 < 0.6: stop after the first token
    assert trie.draft([1, 2], k=4, min_match=1, scale=2.0, min_prob=0.6) == [3]


def test_forgetting_every_token_empties_the_trie():
    trie = ContextTrie(depth=3)
    trie.add_tokens([1, 2, 3, 1, 2, 4], start=0)
    trie.add_tokens([1, 2, 3, 1, 2, 4], start=0, delta=-1)
    assert trie.num_tokens == 0 and not trie.root.children


# ---- pools: siblings, history, eviction -----------------------------------------------------------------
def test_siblings_in_flight_share_their_text():
    d = SuffixDrafter(spec(), "cpu")
    a, b = make_seq(0, slot=0, output=[10, 11, 12, 13, 14]), make_seq(1, slot=1, output=[10, 11])
    observe(d, [a, b])
    # b's context "... 22 10 11" matches a's text (match >= 4) -> a's next 3 tokens
    assert drafts(d, [b], k=3) == [[12, 13, 14]]
    other = make_seq(2, slot=2, output=[10, 11], prompt=[0, 30, 31, 22])
    observe(d, [other])
    # a different prompt has its own pool: "22 10 11" there was never followed by anything
    assert drafts(d, [other], k=3) == [[]]


def test_finished_rollouts_help_later_samples_of_the_same_prompt():
    d = SuffixDrafter(spec(), "cpu")
    a = make_seq(0, slot=0, output=[10, 11, 12, 13])
    observe(d, [a])
    d.release(a)
    # a later generate call: new seq id and request id, same prompt, the same slot reused
    c = make_seq(7, slot=0, output=[10], request_id=3)
    assert drafts(d, [c], k=4) == [[11, 12, 13]]


def test_old_rollouts_are_evicted_and_forgotten():
    d = SuffixDrafter(spec(), "cpu", max_rollouts=1)
    a, b = make_seq(0, slot=0, output=[10, 11, 12]), make_seq(1, slot=1, output=[10, 15, 16])
    observe(d, [a, b])
    assert drafts(d, [make_seq(5, slot=5, output=[10])], k=2) == [[15, 16]]  # tie 11 vs 15: latest
    d.release(b)
    d.release(a)  # keeps only a: b's tokens are subtracted again
    c = make_seq(2, slot=2, output=[10])
    assert drafts(d, [c], k=2) == [[11, 12]]
    pool = d.store.pools[tuple(PROMPT)]
    assert len(pool.finished) == 1 and 15 not in pool.trie.root.children


def test_idle_prompt_pools_are_evicted_least_recent_first():
    store = SuffixStore(depth=2, max_rollouts=4, max_tokens=10)
    p1, p2 = store.acquire([1, 2, 3, 4, 5, 6]), store.acquire([7, 8, 9, 10, 11, 12])  # 5 tokens each
    store.release(p1, [])  # 10 tokens: within the budget
    assert set(store.pools) == {(1, 2, 3, 4, 5, 6), (7, 8, 9, 10, 11, 12)}
    store.acquire([13, 14, 15])  # 12 tokens
    store.release(p2, [])  # over budget: p1 is the oldest idle pool
    assert (1, 2, 3, 4, 5, 6) not in store.pools and len(store.pools) == 2
    assert store.num_tokens == 7  # the pool of a running sequence (p3) is never evicted


# ---- exactness in the engine ----------------------------------------------------------------------------
PROMPTS = [[0] + [(7 * i + j) % 29 + 2 for j in range(3 + 2 * i)] for i in range(7)]


def _model():
    return tiny_model(seed=3, vocab=32, hidden=48, layers=2, max_pos=40, scale=2.0)  # loops and variety


def _first_new_token(tokens, start=3):
    """A token whose first occurrence is at index >= start: as a stop token it ends the row there."""
    return next(t for i, t in enumerate(tokens) if i >= start and t not in tokens[:i])


@pytest.fixture(scope="module")
def sd_off():
    """SD-off greedy runs whose rows end on each reason: row i % 3 == 0 on the 40-token context limit,
    == 1 on max_tokens = 13, == 2 on a stop token (a token that first shows up at output index >= 3)."""
    model = _model()
    free = SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True)
    runs = LLM(model, max_num_seqs=8).generate(PROMPTS, free)
    params = []
    for i, r in enumerate(runs):
        if i % 3 == 0:
            params.append(free)
        elif i % 3 == 1:
            params.append(SamplingParams(temperature=0.0, max_tokens=13, ignore_eos=True))
        else:
            stop = _first_new_token(r.outputs[0].token_ids)
            params.append(SamplingParams(temperature=0.0, max_tokens=100, stop_token_ids=[stop]))
    base = LLM(model, max_num_seqs=8).generate(PROMPTS, params)
    return model, params, [r.outputs[0] for r in base]


def assert_greedy_matches_sd_off(sd_off, method, rows, trace_path=None, **spec_kw):
    """Rows are independent under greedy decoding, so SD on a subset must reproduce those SD-off rows."""
    model, params, base = sd_off
    llm = LLM(model, max_num_seqs=4, spec=spec(method=method, **spec_kw), trace_path=trace_path)
    for _ in range(2):  # the second call starts from the pools the first one left
        got = llm.generate([PROMPTS[i] for i in rows], [params[i] for i in rows])
        for i, r in zip(rows, got):
            a, b = base[i], r.outputs[0]
            assert b.token_ids == a.token_ids and b.finish_reason == a.finish_reason
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5
    assert llm.stats["accepted_tokens"] > 0
    return llm


def test_sd_off_rows_end_on_each_reason(sd_off):
    _, _, base = sd_off
    # context limit 40 minus prompts of 4 and 10 tokens; max_tokens 13; stop tokens at index >= 3
    assert [len(base[i].token_ids) for i in (0, 3, 1, 4)] == [36, 30, 13, 13]
    assert base[2].finish_reason == base[5].finish_reason == "stop" and len(base[2].token_ids) >= 4


@pytest.mark.parametrize("row", [0, 1, 2])  # context limit, max_tokens, stop token
def test_greedy_batch1_matches_sd_off(sd_off, row):
    assert_greedy_matches_sd_off(sd_off, "suffix", [row])


def test_greedy_batch7_matches_sd_off(sd_off):
    assert_greedy_matches_sd_off(sd_off, "suffix", list(range(7)))
