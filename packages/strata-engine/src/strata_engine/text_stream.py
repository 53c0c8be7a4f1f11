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
    def __init__(self, tokenizer: Tokenizer, stop: tuple[str, ...]) -> None:
        self.decoder = tokenizer.new_decoder()
        self.stop = tuple(s for s in stop if s)
        self.text = ""  # everything decoded so far (stop text included until it is cut)
        self.released = 0  # characters of `text` already handed out

    @property
    def offset(self) -> int:
        """Where the next token's text starts in the decoded text (held-back text included)."""
        return len(self.text)

    def push(self, token_id: int) -> tuple[str, bool]:
        """Add a token; return (newly released text, whether a stop string was hit)."""
        self.text += self.decoder.push(token_id)
        return self._release()

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
        hits = [i for s in self.stop if (i := self.text.find(s, window_start)) != -1]
        if hits:
            cut = min(hits)
            piece = self.text[self.released : cut]
            self.text = self.text[:cut]
            self.released = cut
            return piece, True
        hold = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        end = max(self.released, len(self.text) - hold)
        piece = self.text[self.released : end]
        self.released = end
        return piece, False
