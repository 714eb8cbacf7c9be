"""Stop strings, matched on text decoded incrementally after every token (vLLM's rule), so a speculative step
that accepts several tokens stops at exactly the token where plain decoding would have stopped."""
from __future__ import annotations

from ..model.tokenizer import TextTokenizer


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
        return self.text[:self.hit_at + (len(self.hit) if include_stop else 0)]
