"""Formatting engine rows into wire objects, from hand-made rows (the engine computes the listing)."""

from __future__ import annotations

import math

import msgspec

from strata_engine.api import LogprobParams, LogprobRow, PromptScores, SamplingParams, Step
from strata_engine.text.stream import decode_spans
from strata_server.formatting import (
    ChoiceTally,
    LegacyBuilder,
    chat_entry,
    legacy_top,
    merge_legacy,
    safe_logprob,
    sse,
    usage,
)
from strata_server.plan import Plan
from strata_server.protocol import encode


def plan(
    allowed_ids: tuple[int, ...] | None = None, top_n: int | None = 2, renormalize: bool = False, **kwargs
) -> Plan:
    base = {
        "prompts": [[104, 105]],
        "max_tokens": 3,
        "sampling": SamplingParams(allowed_token_ids=allowed_ids),
        "logprobs": LogprobParams(top_n=top_n, renormalize_over=allowed_ids if renormalize else None),
    }
    return Plan(**{**base, **kwargs})


def test_safe_logprob_never_lets_nan_or_inf_through(tokenizer) -> None:
    assert safe_logprob(-math.inf) == -9999.0
    assert safe_logprob(math.nan) == -9999.0
    assert safe_logprob(-1e30) == -9999.0
    assert safe_logprob(math.inf) == 0.0
    assert safe_logprob(-0.25) == -0.25
    row = LogprobRow(token_id=97, logprob=-math.inf, listed=((98, math.nan),))
    body = encode(legacy_top(row, plan(), tokenizer))
    assert b"NaN" not in body and b"Infinity" not in body
    assert msgspec.json.decode(body) == {"b": -9999.0, "a": -9999.0}


def test_legacy_top_is_the_engine_listing_plus_the_chosen_token(tokenizer) -> None:
    row = LogprobRow(token_id=99, logprob=-3.0, listed=((97, -0.1), (98, -0.2)))
    assert legacy_top(row, plan(top_n=2), tokenizer) == {"a": -0.1, "b": -0.2, "c": -3.0}
    chosen_in_top = LogprobRow(token_id=97, logprob=-0.1, listed=((97, -0.1), (98, -0.2)))
    assert legacy_top(chosen_in_top, plan(top_n=2), tokenizer) == {"a": -0.1, "b": -0.2}


def test_token_id_labels(tokenizer) -> None:
    row = LogprobRow(token_id=99, logprob=-3.0, listed=((97, -0.1),))
    assert legacy_top(row, plan(top_n=1, as_token_ids=True), tokenizer) == {
        "token_id:97": -0.1,
        "token_id:99": -3.0,
    }


def test_echo_offsets_index_the_returned_text(tokenizer) -> None:
    prompt = list("héllo".encode())  # é is two byte-tokens: both point at the é
    p = plan(prompts=[prompt], echo=True)
    builder = LegacyBuilder(p, tokenizer)
    rows = (None, *tuple(LogprobRow(token_id=t, logprob=-1.0) for t in prompt[1:]))
    text, offsets = decode_spans(tokenizer, prompt)
    text, frag = builder.prompt(prompt, PromptScores(rows, len(prompt), 0, text, offsets))
    assert text == "héllo"
    assert frag.text_offset == [0, 1, 1, 2, 3, 4]
    assert frag.token_logprobs[0] is None and frag.top_logprobs[0] is None
    step = builder.step(Step(token_id=33, text="!", logprobs=LogprobRow(33, -2.0), offset=0))
    stop = builder.step(Step(256, "", LogprobRow(256, -0.5), "stop", offset=1))
    merged = merge_legacy([frag, step, stop])
    returned = text + "!"
    assert merged.text_offset[-2:] == [5, 6]  # the stop token sits at the end of the text
    assert merged.tokens[-1] == "<eos>"
    lengths = {len(merged.tokens), len(merged.token_logprobs), len(merged.top_logprobs)}
    assert lengths == {len(merged.text_offset)}
    assert returned[merged.text_offset[-2] :] == "!"
    no_rows = LegacyBuilder(p, tokenizer).prompt(prompt, None)  # echo without logprobs: same text
    assert no_rows[0] == "héllo" and no_rows[1].text_offset == [0, 1, 1, 2, 3, 4]


def test_offsets_never_count_token_id_placeholders(tokenizer) -> None:
    builder = LegacyBuilder(plan(as_token_ids=True), tokenizer)
    first = builder.step(Step(token_id=97, text="a", logprobs=LogprobRow(97, -1.0), offset=0))
    second = builder.step(Step(token_id=98, text="b", logprobs=LogprobRow(98, -1.0), offset=1))
    assert first.tokens == ["token_id:97"]
    assert first.text_offset + second.text_offset == [0, 1]


def test_chat_entry_uses_renormalised_values_with_allowed_ids(tokenizer) -> None:
    renorm = {120: math.log(0.75), 121: math.log(0.25)}
    row = LogprobRow(token_id=120, logprob=-7.0, renormalized=renorm, listed=tuple(renorm.items()))
    entry = chat_entry(row, plan(top_n=2, allowed_ids=(120, 121), renormalize=True), tokenizer)
    assert entry.token == "x" and entry.bytes == [120]
    assert entry.logprob == math.log(0.75)
    assert [(t.token, t.logprob) for t in entry.top_logprobs] == [
        ("x", math.log(0.75)),
        ("y", math.log(0.25)),
    ]


def test_chat_entry_lists_exactly_the_listing(tokenizer) -> None:
    row = LogprobRow(token_id=99, logprob=-3.0, top=((97, -0.1), (98, -0.2)), listed=((97, -0.1), (98, -0.2)))
    entry = chat_entry(row, plan(top_n=2), tokenizer)
    assert entry.logprob == -3.0
    assert [t.token for t in entry.top_logprobs] == ["a", "b"]


def test_usage_counts_a_shared_prompt_once_and_every_generated_token() -> None:
    p = plan(prompts=[[1, 2, 3], [4, 5]], n=2)
    tallies = [ChoiceTally() for _ in range(4)]
    for i, tally in enumerate(tallies):
        for _k in range(i + 1):
            tally.see(
                Step(
                    token_id=1,
                    text="x",
                    logprobs=None,
                    num_cached_tokens=2 if i == 0 else 0,
                )
            )
    u = usage(p, tallies)
    assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (5, 10, 15)
    assert u.prompt_tokens_details.cached_tokens == 2


def test_sse_frame() -> None:
    assert sse({"a": 1}) == b'data: {"a":1}\n\n'
