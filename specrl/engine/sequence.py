"""One sample's state, and its stop strings. Pure bookkeeping: no tensors.

Stop strings are matched on text decoded incrementally after every token (vLLM's rule), so a speculative step
that accepts several tokens stops at exactly the token where plain decoding would have stopped."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..model.tokenizer import TextTokenizer
from .sampling import SamplingParams


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
