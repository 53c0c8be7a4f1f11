"""Turns generated token ids into completion text: incremental UTF-8, stop strings, hold-back.

Text is released only when it can no longer become part of a stop string, and never in the
middle of a UTF-8 character; the stop text itself is never released.
"""

from __future__ import annotations

from collections.abc import Sequence

from strata_engine.protocol import EngineTokenizer
from strata_engine.text.stop_matcher import ROOT, StopMatcher
from strata_engine.text.tokenizer import Tokenizer


def decode_spans(tokenizer: EngineTokenizer, ids: Sequence[int]) -> tuple[str, tuple[int, ...]]:
    """`ids` as text, and where each token's text starts in it (an echoed prompt's offsets)."""
    decoder = tokenizer.new_decoder()
    pieces: list[str] = []
    offsets: list[int] = []
    length = 0
    for token_id in ids:
        offsets.append(length)
        piece = decoder.push(token_id)
        pieces.append(piece)
        length += len(piece)
    pieces.append(decoder.flush())
    return "".join(pieces), tuple(offsets)


class TextStream:
    """One sequence's completion text, with vLLM's stop rules.

    `include_stop`: a matched stop string stays in the text (cut after it, not before), and
    a stop token's own text is added; `skip_special`: control tokens add no text;
    `min_tokens`: a stop string counts only when it ends in text of a later token.
    Stop strings are matched by one automaton over all of them (`StopMatcher`): a token costs
    its own characters, never a pass over the request's stop list. A matcher may be shared by
    the sequences of one request (it holds no per-sequence state).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        stop: tuple[str, ...] | StopMatcher,
        *,
        include_stop: bool = False,
        skip_special: bool = False,
        min_tokens: int = 0,
    ) -> None:
        self.decoder = tokenizer.new_decoder(skip_special=skip_special)
        self.stops = stop if isinstance(stop, StopMatcher) else StopMatcher(stop)
        self.state = ROOT  # where the automaton stands after the text so far
        self.include_stop = include_stop
        self.min_tokens = min_tokens
        self.text = ""  # everything decoded so far (stop text included until it is cut)
        self.released = 0  # characters of `text` already handed out
        self.pushed = 0  # tokens pushed so far

    @property
    def offset(self) -> int:
        """Where the next token's text starts in the decoded text (held-back text included)."""
        return len(self.text)

    def push(self, token_id: int) -> tuple[str, bool]:
        """Add a token; return (newly released text, whether a stop string was hit)."""
        piece = self.decoder.push(token_id)
        start = len(self.text)
        self.text += piece
        self.pushed += 1
        if not self.stops:
            return self._release_to(len(self.text)), False
        hit = self._scan(piece, start, counts=self.pushed > self.min_tokens)
        if hit is not None:
            begin, end = hit
            cut = end if self.include_stop else begin
            piece = self.text[self.released : cut]
            self.text = self.text[:cut]
            self.released = cut
            return piece, True
        hold = 0 if self.include_stop else self.stops.hold(self.state)
        return self._release_to(max(self.released, len(self.text) - hold)), False

    def end_on_token(self, token_id: int) -> str:
        """Generation ended on a stop token (end-of-generation or a stop id): its text only
        with `include_stop`, then everything held back."""
        if self.include_stop:
            self.text += self.decoder.push(token_id)
        return self.finish()

    def finish(self) -> str:
        """Flush whatever is held back (generation ended for another reason)."""
        self.text += self.decoder.flush()
        return self._release_to(len(self.text))

    def _release_to(self, end: int) -> str:
        piece = self.text[self.released : end]
        self.released = end
        return piece

    def _scan(self, piece: str, start: int, counts: bool) -> tuple[int, int] | None:
        """Run the automaton over the token's characters; the earliest-starting stop string
        that ends in them, as (start, end) in `text` (None: none, or not yet `counts`)."""
        stops, state, best = self.stops, self.state, None
        for i, char in enumerate(piece, start + 1):
            state = stops.step(state, char)
            n = stops.match(state)
            if n and counts and (best is None or i - n < best[0]):
                best = (i - n, i)  # ties on the start: the earlier end, the shorter stop
        self.state = state
        return best
