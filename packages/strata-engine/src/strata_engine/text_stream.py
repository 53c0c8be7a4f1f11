"""Turns generated token ids into completion text: incremental UTF-8, stop strings, hold-back.

Text is released only when it can no longer become part of a stop string, and never in the
middle of a UTF-8 character; the stop text itself is never released.
"""

from __future__ import annotations

from collections.abc import Sequence

from strata_engine.protocol import EngineTokenizer
from strata_engine.tokenizer import Tokenizer


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
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        stop: tuple[str, ...],
        *,
        include_stop: bool = False,
        skip_special: bool = False,
        min_tokens: int = 0,
    ) -> None:
        self.decoder = tokenizer.new_decoder(skip_special=skip_special)
        self.stop = tuple(s for s in stop if s)
        self.include_stop = include_stop
        self.min_tokens = min_tokens
        self.text = ""  # everything decoded so far (stop text included until it is cut)
        self.released = 0  # characters of `text` already handed out
        self.pushed = 0  # tokens pushed so far
        self.floor = 0  # a stop string must end after this many characters (min_tokens)

    @property
    def offset(self) -> int:
        """Where the next token's text starts in the decoded text (held-back text included)."""
        return len(self.text)

    def push(self, token_id: int) -> tuple[str, bool]:
        """Add a token; return (newly released text, whether a stop string was hit)."""
        self.text += self.decoder.push(token_id)
        self.pushed += 1
        if self.pushed <= self.min_tokens:
            self.floor = len(self.text)
        return self._release()

    def end_on_token(self, token_id: int) -> str:
        """Generation ended on a stop token (end-of-generation or a stop id): its text only
        with `include_stop`, then everything held back."""
        if self.include_stop:
            self.text += self.decoder.push(token_id)
        return self.finish()

    def finish(self) -> str:
        """Flush whatever is held back (generation ended for another reason)."""
        self.text += self.decoder.flush()
        piece = self.text[self.released :]
        self.released = len(self.text)
        return piece

    def _release(self) -> tuple[str, bool]:
        if not self.stop:
            piece = self.text[self.released :]
            self.released = len(self.text)
            return piece, False
        longest = max(len(s) for s in self.stop)
        window_start = max(0, self.released - longest + 1)
        hits = [
            (i, i + len(s))
            for s in self.stop
            if (i := self.text.find(s, max(window_start, self.floor - len(s) + 1))) != -1
        ]
        if hits:
            start, end = min(hits)
            cut = end if self.include_stop else start
            piece = self.text[self.released : cut]
            self.text = self.text[:cut]
            self.released = cut
            return piece, True
        hold = 0 if self.include_stop else self._possible_stop_tail()
        end = max(self.released, len(self.text) - hold)
        piece = self.text[self.released : end]
        self.released = end
        return piece, False

    def _possible_stop_tail(self) -> int:
        """How many trailing characters could still begin a stop string (held back)."""
        hold = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        return hold
