"""The engine's bookkeeping, no tensors: one sample's state (`Sequence`) and its stop strings, which sequences run
next and in which cache slot (`Scheduler`), what one engine step did (`StepResult`), and the vLLM-shaped results
of `LLM.generate` (`RequestOutput`).

Stop strings are matched on text decoded incrementally after every token (vLLM's rule), so a speculative step
that accepts several tokens stops at exactly the token where plain decoding would have stopped."""
from __future__ import annotations

import enum
from collections import Counter, deque
from dataclasses import dataclass, field

from ..model.tokenizer import TextTokenizer
from .sampler import SamplingParams


class StopStrings:
    """One sequence's detokenizer and stop-string matcher."""

    def __init__(self, tokenizer: TextTokenizer, stops: list[str], skip_special_tokens: bool = True):
        self.tokenizer, self.stops, self.skip = tokenizer, list(stops), skip_special_tokens
        self.ids: list[int] = []
        self.text = ""
        self.prefix_offset = self.read_offset = 0  # decode window: ids[prefix:read] is text already emitted
        self.hit: str | None = None  # the stop string that ended the sequence
        self.hit_at = -1  # its index in `text`

    def push(self, token: int, check: bool = True) -> str | None:
        """Adds one token; returns the stop string its text completes (only looked for when `check`)."""
        self.ids.append(token)
        new = self._new_text()
        self.text += new
        if not check or not new:
            return None
        for stop in self.stops:  # only matches that end in the new text, like vLLM
            at = self.text.find(stop, max(0, len(self.text) - len(new) - len(stop) + 1))
            if at >= 0:
                self.hit, self.hit_at = stop, at
                return stop
        return None

    def _new_text(self) -> str:
        # decode a short window with some context before it, so a tokenizer that strips a leading space at the
        # start of a decode still yields it; hold back text ending in an incomplete UTF-8 character
        before = self.tokenizer.decode(self.ids[self.prefix_offset:self.read_offset], self.skip)
        upto = self.tokenizer.decode(self.ids[self.prefix_offset:], self.skip)
        if len(upto) <= len(before) or upto.endswith("\ufffd"):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return upto[len(before):]

    def output_text(self, include_stop: bool) -> str:
        """The text up to the stop string that ended the sequence (or through it with `include_stop`)."""
        if self.hit is None:  # no stop string ended it: all of the text
            return self.text
        return self.text[:self.hit_at + (len(self.hit) if include_stop else 0)]


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    STOP = "stop"
    LENGTH = "length"


@dataclass(eq=False)
class Sequence:
    seq_id: int
    request_id: int  # index of the prompt; the n samples of a prompt share it (GRPO siblings)
    sample_index: int
    prompt: list[int]
    params: SamplingParams
    seed: int
    max_len: int  # context limit of the engine
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    status: Status = Status.WAITING
    finish_reason: FinishReason | None = None
    slot: int | None = None
    stop_ids: frozenset[int] = frozenset()
    stop_strings: StopStrings | None = None
    stop_reason: int | str | None = None  # the stop token id (not EOS) or stop string that ended it
    top_logprobs: list[dict[int, float]] = field(default_factory=list)  # when params.logprobs is set
    versions: list[tuple[int, int]] = field(default_factory=list)  # as CompletionOutput.weight_versions

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def budget(self) -> int:
        """How many more tokens this sequence may generate (max_tokens and the context limit)."""
        return min(self.params.max_tokens - len(self.output), self.max_len - self.num_tokens)

    def mark_version(self, version: int) -> None:
        """The tokens sampled from now on come from weights `version`."""
        if self.versions and self.versions[-1][0] == len(self.output):
            self.versions.pop()  # no token was sampled by the previous version
        if not self.versions or self.versions[-1][1] != version:
            self.versions.append((len(self.output), version))

    def append(self, tokens: list[int], logprobs: list[float], tops: list[dict[int, float]] | None = None) -> int:
        """Appends tokens until a stop token, a stop string or the budget ends the sequence; returns how many
        were kept. Checked token by token, so a multi-token speculative step stops where plain decoding would."""
        kept = 0
        for tok, lp in zip(tokens, logprobs):
            self.output.append(tok)
            self.logprobs.append(lp)
            if tops is not None and self.params.logprobs is not None:
                self.top_logprobs.append(tops[kept])
            kept += 1
            if tok in self.stop_ids:
                self.stop_reason = tok if tok in (self.params.stop_token_ids or ()) else None
                self.finish(FinishReason.STOP)
                break
            if self.stop_strings is not None:  # vLLM looks for stop strings only once min_tokens tokens exist
                self.stop_reason = self.stop_strings.push(tok, check=len(self.output) >= self.params.min_tokens)
                if self.stop_reason is not None:
                    self.finish(FinishReason.STOP)
                    break
            if self.budget <= 0:
                self.finish(FinishReason.LENGTH)
                break
        return kept

    def finish(self, reason: FinishReason) -> None:
        self.status = Status.FINISHED
        self.finish_reason = reason


class Scheduler:
    """Continuous batching: which sequences run next, and which cache slot each one owns."""

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


@dataclass
class StepResult:
    """What one engine step did, made once by the engine's postprocess and read by the counters, the tracer and
    the strategy (which learns its costs and acceptance from it alone), so none of them re-derives it."""
    phase: str  # "prefill", "decode" (SD off) or "spec" (one verify forward)
    seqs: list[Sequence]  # the sequences the forward ran, in row order
    tokens_in: int  # inputs of the target forward (all rows, drafts and padding included)
    emitted_tokens: int  # tokens appended to the sequences
    k: int = 0  # the longest draft asked for
    draft_tokens: int = 0
    accepted_tokens: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0  # the target forward, sampling and verification
    other_s: float = 0.0  # the rest of the step (scheduling, shadow drafts, bookkeeping)
    context_len_mean: float = 0.0  # when a trace is written
    # per row of a spec step: the drafter whose drafts row b carried (None: none), the k asked of it, the
    # drafts proposed and accepted; and each drafter's propose time
    drafters: list[str | None] = field(default_factory=list)
    drafters_asked: list[str | None] = field(default_factory=list)  # asked for drafts (k > 0), proposing or not
    asked: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    draft_s_by: dict[str, float] = field(default_factory=dict)  # a deferred drafter's catch-up included
    # per drafter that observes late: the inputs it caught up on before drafting, and the seconds that took
    catch_up: dict[str, tuple[int, float]] = field(default_factory=dict)
    # drafts made only to be scored: (drafter, row, the row's num_tokens when drafted, the draft tokens)
    shadows: list[tuple[str, Sequence, int, list[int]]] = field(default_factory=list)
    plan: str = "off"  # the label of the strategy's plan (engine/drafting.py Plan.label)

    @property
    def active(self) -> int:
        return len(self.seqs)

    @property
    def total_s(self) -> float:
        return self.draft_s + self.verify_s + self.other_s

    def trace_row(self) -> dict:
        row = {"phase": self.phase, "active": self.active, "tokens_in": self.tokens_in, "k": self.k,
               "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens,
               "emitted_tokens": self.emitted_tokens, "draft_s": self.draft_s, "verify_s": self.verify_s,
               "other_s": self.other_s, "context_len_mean": self.context_len_mean}
        if len({d for d in self.drafters if d is not None}) > 1 or self.draft_s_by:
            row["mix"] = dict(Counter(d or "none" for d in self.drafters))  # rows per drafter ("none": no draft)
        return row


@dataclass
class CompletionOutput:
    """One sample of a request, as vLLM returns it."""
    index: int
    token_ids: list[int]
    logprobs: list[float]  # log-prob of each token under the policy's temperature-scaled distribution
    finish_reason: str  # "stop" | "length"
    text: str | None = None  # decoded output (params.skip_special_tokens), cut before a stop string
    top_logprobs: list[dict[int, float]] | None = None  # with params.logprobs=N: top-N + the sampled token
    stop_reason: int | str | None = None  # the stop string or stop_token_id that ended it (None for EOS)
    # (first token index, weights version) per run of tokens one version sampled; more than one run when
    # the weights were updated in flight (LLM.update_weights between engine steps)
    weight_versions: list[tuple[int, int]] | None = None

    @property
    def oldest_version(self) -> int | None:
        return min(v for _, v in self.weight_versions) if self.weight_versions else None

    @property
    def newest_version(self) -> int | None:
        return max(v for _, v in self.weight_versions) if self.weight_versions else None

    def token_versions(self) -> list[int]:
        """The weights version that sampled each token."""
        runs = self.weight_versions or []
        ends = [start for start, _ in runs[1:]] + [len(self.token_ids)]
        return [v for (start, v), end in zip(runs, ends) for _ in range(start, end)]


@dataclass
class RequestOutput:
    request_id: int
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
