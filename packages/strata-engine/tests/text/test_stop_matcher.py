"""Stop strings matched by the automaton give exactly the text a direct search gives.

The reference re-searches the whole decoded text after every token for every stop string
(the earliest start wins, ties to the shorter stop; the stop must end after the text of the
first `min_tokens` tokens) and holds back the longest tail that begins a stop: slow and
obviously right. Random tokens and stops over a three-letter alphabet make overlapping
stops, stops inside stops and stops spanning tokens common.
"""

from __future__ import annotations

import random

import pytest

from strata_engine.text.stop_matcher import ROOT, StopMatcher
from strata_engine.text.stream import TextStream


class PieceDecoder:
    """A decoder whose token ids index a list of text pieces."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def push(self, token_id: int) -> str:
        return self.pieces[token_id]

    def flush(self) -> str:
        return ""


class PieceTokenizer:
    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def new_decoder(self, skip_special: bool = False) -> PieceDecoder:
        return PieceDecoder(self.pieces)


def reference(pieces: list[str], stops: list[str], include: bool, min_tokens: int) -> tuple[list[str], bool]:
    """(released piece per token, whether a stop hit) by brute force over the whole text."""
    stops = [s for s in stops if s]
    text, released, out, floor = "", 0, [], 0
    for k, piece in enumerate(pieces, 1):
        text += piece
        if k <= min_tokens:
            floor = len(text)
        hits = [
            (i, i + len(s))
            for s in stops
            for i in range(len(text) - len(s) + 1)
            if text.startswith(s, i) and i + len(s) > floor
        ]
        if hits:
            start, end = min(hits)
            cut = end if include else start
            out.append(text[released:cut])
            return out, True
        hold = 0
        if not include:
            hold = max(
                (n for s in stops for n in range(1, len(s)) if n <= len(text) and text.endswith(s[:n])),
                default=0,
            )
        end = max(released, len(text) - hold)
        out.append(text[released:end])
        released = end
    return out, False


def run_stream(pieces: list[str], stops: list[str], include: bool, min_tokens: int) -> tuple[list[str], bool]:
    ts = TextStream(PieceTokenizer(pieces), tuple(stops), include_stop=include, min_tokens=min_tokens)  # type: ignore[arg-type]
    out = []
    for i in range(len(pieces)):
        piece, hit = ts.push(i)
        out.append(piece)
        if hit:
            return out, True
    return out, False


@pytest.mark.parametrize("seed", range(40))
def test_matches_a_direct_search_on_random_overlapping_stops(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        pieces = [
            "".join(rng.choice("abc") for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 12))
        ]
        stops = [
            "".join(rng.choice("abc") for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 6))
        ]
        include, min_tokens = rng.random() < 0.3, rng.choice([0, 0, 1, 3])
        assert run_stream(pieces, stops, include, min_tokens) == reference(
            pieces, stops, include, min_tokens
        ), (
            pieces,
            stops,
            include,
            min_tokens,
        )


@pytest.mark.parametrize(
    ("pieces", "stops", "released", "hit"),
    [
        (["ab", "cd"], ["abcd", "bc"], ["", ""], True),  # "bc" ends first, "abcd" starts first: it wins
        (["xab", "cde"], ["abcdef", "cd"], ["x", "ab"], True),  # a long partial match gives way to "cd"
        (["aa", "aa", "b"], ["aaab"], ["", "a", ""], True),  # the stop starts inside the held-back text
        (["he", "llo", " world"], ["lo w", "low"], ["he", "l", ""], True),  # spans three tokens
        (["abab", "x"], ["abac"], ["ab", "abx"], False),  # hold back "ab", release when "x" rules it out
        (["say ", "STOP"], [], ["say ", "STOP"], False),
    ],
)
def test_edge_cases(pieces: list[str], stops: list[str], released: list[str], hit: bool) -> None:
    assert run_stream(pieces, stops, False, 0) == (released, hit) == reference(pieces, stops, False, 0)


def test_a_stop_that_is_a_suffix_of_a_longer_one_ends_the_text_at_its_start() -> None:
    m = StopMatcher(["bcd", "abcde", "cd"])
    state = ROOT
    matches = []
    for char in "xabcd":
        state = m.step(state, char)
        matches.append(m.match(state))
    assert matches == [0, 0, 0, 0, 3]  # "bcd" ends at "d" (longer than "cd": the earlier start)
    assert m.hold(state) == 4  # "abcd" may still become "abcde"


def test_many_long_stops_cost_per_character_not_per_stop() -> None:
    """2,000 stops of 1,000 characters: a token's characters take microseconds, as with one stop."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz "
    stops = ["".join(rng.choice(letters) for _ in range(1000)) for _ in range(2000)]
    text = "".join(rng.choice(letters) for _ in range(20_000))
    m = StopMatcher(stops)
    state, steps = ROOT, 0
    for char in text:
        state = m.step(state, char)
        steps += m.match(state) > 0
    assert steps == 0
    assert len(m._prefix) < 5 * len(text)  # states grow with the text read, not the 2M stop characters
