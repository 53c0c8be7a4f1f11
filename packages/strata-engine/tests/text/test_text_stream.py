"""Completion text from token ids on the real tokenizer: stop strings across token borders,
hold-back and release, and whole UTF-8 characters only."""

from __future__ import annotations

import pytest

from strata_engine.api import LogprobParams, Request, SamplingParams, Step
from strata_engine.engine import LLMEngine
from strata_engine.text.stream import TextStream, decode_spans
from strata_engine.text.tokenizer import Tokenizer

ANSWER = "The capital of France is Paris."
EMOJI = "🤖🎉👍🏽 and 日本語, naïve café 😊!"
FRANCE = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tok(engine: LLMEngine) -> Tokenizer:
    return engine.tokenizer


def stream(tok: Tokenizer, text: str, stop: tuple[str, ...]) -> tuple[list[str], bool, str]:
    """Push `text`'s tokens one by one: (pieces released, whether a stop hit, finish())."""
    ts = TextStream(tok, stop)
    pieces = []
    for token in tok.encode(text):
        piece, hit = ts.push(token)
        pieces.append(piece)
        if hit:
            return pieces, True, ""
    return pieces, False, ts.finish()


def test_stop_string_spanning_tokens_is_cut_and_not_returned(tok: Tokenizer) -> None:
    stop = "f Fr"
    assert not any(stop in tok.decode([t]) for t in tok.encode(ANSWER))  # spans " of" + " France"
    pieces, hit, _ = stream(tok, ANSWER, (stop,))
    assert hit
    assert "".join(pieces) == "The capital o"
    assert len(pieces) == 4  # stopped on the token that completed the stop string


def test_earliest_stop_string_wins(tok: Tokenizer) -> None:
    pieces, hit, _ = stream(tok, ANSWER, ("Paris", "capital"))
    assert hit
    assert "".join(pieces) == "The "


def test_possible_stop_prefix_is_held_back_then_released(tok: Tokenizer) -> None:
    ts = TextStream(tok, ("Paris!",))
    released = []
    for token in tok.encode(ANSWER)[:-1]:  # up to " Paris": could still become "Paris!"
        piece, hit = ts.push(token)
        assert not hit
        released.append(piece)
    assert "".join(released) == "The capital of France is "
    assert ts.finish() == "Paris"  # generation ended another way: the held text comes out


def test_held_back_text_released_when_the_stop_cannot_match(tok: Tokenizer) -> None:
    pieces, hit, rest = stream(tok, ANSWER, ("Paris!",))
    assert not hit
    assert pieces[-2] == " "  # "Paris" of " Paris" was held back ...
    assert pieces[-1] == "Paris."  # ... and released with the "." that rules the stop out
    assert "".join(pieces) + rest == ANSWER


def test_no_stop_strings_releases_everything_at_once(tok: Tokenizer) -> None:
    pieces, hit, rest = stream(tok, ANSWER, ())
    assert not hit and rest == ""
    assert pieces == [tok.decode([t]) for t in tok.encode(ANSWER)]


@pytest.mark.parametrize("stop", [(), ("zzz",), ("!",)], ids=["no-stop", "unmatched-stop", "stop"])
def test_characters_split_across_tokens_never_yield_replacement(tok: Tokenizer, stop) -> None:
    ids = tok.encode(EMOJI)
    broken = [t for t in ids if "\ufffd" in tok.token_bytes(t).decode("utf-8", errors="replace")]
    assert broken, "the premise: some tokens carry only part of a character"
    pieces, hit, rest = stream(tok, EMOJI, stop)
    assert all("\ufffd" not in p for p in [*pieces, rest])
    assert "".join(pieces) + rest == (EMOJI[:-1] if hit else EMOJI)
    assert "" in pieces  # a token that only starts a character releases nothing yet


def test_engine_applies_stop_strings(engine: LLMEngine) -> None:
    ids = engine.tokenizer.encode(FRANCE, add_special=False)
    request = Request(
        tuple(ids),
        SamplingParams(max_tokens=32, temperature=0.0, stop=("France is",)),
        LogprobParams(),
    )
    steps = [e for e in engine.generate(request) if isinstance(e, Step)]
    assert "".join(s.text for s in steps) == "The capital of "
    assert steps[-1].finish_reason == "stop"
    assert engine.tokenizer.decode([s.token_id for s in steps]).endswith("France is")


def test_engine_releases_held_text_at_length(engine: LLMEngine) -> None:
    ids = engine.tokenizer.encode(FRANCE, add_special=False)
    request = Request(
        tuple(ids),
        SamplingParams(max_tokens=3, temperature=0.0, stop=("capital city",)),
        LogprobParams(),
    )
    steps = [e for e in engine.generate(request) if isinstance(e, Step)]
    assert [s.finish_reason for s in steps] == [None, None, "length"]
    assert steps[1].text == " "  # "capital" held back: it may start "capital city"
    assert "".join(s.text for s in steps) == "The capital of"


def test_offsets_follow_decoded_tokens_while_text_is_held_back(tok: Tokenizer) -> None:
    """With a stop string pending nothing is released, yet each token's offset advances."""
    ids = tok.encode(ANSWER)
    ts = TextStream(tok, ("Paris!",))
    offsets = []
    for token in ids:
        offsets.append(ts.offset)
        ts.push(token)
    text, spans = decode_spans(tok, ids)
    assert text == ANSWER and offsets == list(spans)
