"""`/v1/completions` on the real server and model, through the official `openai` SDK."""

from __future__ import annotations

import math

import httpx
import pytest
from openai import OpenAI

PROMPT = "The capital of France is"


def tokenize(server_url: str, text: str) -> list[int]:
    return httpx.post(f"{server_url}/tokenize", json={"prompt": text}).json()["tokens"]


def id_of(label: str) -> int:
    assert label.startswith("token_id:"), label
    return int(label.removeprefix("token_id:"))


def read(client: OpenAI, model: str, prompt, **kwargs):
    """A greedy read, labelled by token id: one token with 20 alternatives unless overridden."""
    extra = kwargs.pop("extra_body", {})
    options = {"max_tokens": 1, "temperature": 0, "logprobs": 20, **kwargs}
    return client.completions.create(
        model=model,
        prompt=prompt,
        extra_body={"return_tokens_as_token_ids": True, **extra},
        **options,
    )


def read_one(client: OpenAI, model: str, prompt, **kwargs):
    """The first choice of `read`."""
    return read(client, model, prompt, **kwargs).choices[0]


def test_text_prompt_logprobs_are_a_consistent_distribution(client: OpenAI, model: str) -> None:
    choice = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=5
    ).choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert 1 <= len(lp.tokens) <= 4
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert 5 <= len(top) <= 6
        assert top[token] == value  # the chosen token's value is the same float everywhere
        assert value == max(top.values())  # greedy picks the best (lm-eval's exact check)
        assert sum(math.exp(v) for v in top.values()) <= 1.0 + 1e-5
        assert all(v <= 0.0 for v in top.values())


def test_token_id_prompt_equals_text_prompt(client: OpenAI, model: str, server_url: str) -> None:
    ids = tokenize(server_url, PROMPT)
    by_text = read_one(client, model, PROMPT)
    by_ids = read_one(client, model, ids)
    assert by_ids.logprobs.top_logprobs[0] == by_text.logprobs.top_logprobs[0]
    assert by_ids.text == by_text.text


def test_batched_prompts_get_one_choice_each_in_order(client: OpenAI, model: str, server_url: str) -> None:
    prompts = [PROMPT, "1, 2, 3, 4,", "Water is made of"]
    alone = [read_one(client, model, p).logprobs.top_logprobs[0] for p in prompts]
    batched_text = read(client, model, prompts)
    batched_ids = read(client, model, [tokenize(server_url, p) for p in prompts])
    for batched in (batched_text, batched_ids):
        assert [c.index for c in batched.choices] == [0, 1, 2]
        assert [c.logprobs.top_logprobs[0] for c in batched.choices] == alone
        assert batched.usage.completion_tokens == 3


def test_echo_returns_prompt_rows_and_offsets_rebuild_the_text(
    client: OpenAI, model: str, server_url: str
) -> None:
    ids = tokenize(server_url, PROMPT)
    choice = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=3, temperature=0, logprobs=1, echo=True
    ).choices[0]
    lp = choice.logprobs
    assert choice.text.startswith(PROMPT)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v is not None for v in lp.token_logprobs[1:])
    assert len(lp.tokens) >= len(ids) + 1
    assert lp.text_offset[0] == 0
    ends = [*lp.text_offset[1:], len(choice.text)]
    pieces = [choice.text[a:b] for a, b in zip(lp.text_offset, ends, strict=True)]
    for token, piece in zip(lp.tokens, pieces, strict=True):
        if not token.startswith("bytes:") and token != "<|im_end|>":
            assert piece == token
    assert "".join(pieces) == choice.text


def test_echo_offsets_do_not_count_token_id_placeholders(client: OpenAI, model: str) -> None:
    kwargs = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": 2,
        "temperature": 0,
        "logprobs": 0,
        "echo": True,
    }
    plain = client.completions.create(**kwargs).choices[0]
    as_ids = client.completions.create(**kwargs, extra_body={"return_tokens_as_token_ids": True}).choices[0]
    assert as_ids.logprobs.text_offset == plain.logprobs.text_offset
    assert all(t.startswith("token_id:") for t in as_ids.logprobs.tokens)
    assert as_ids.logprobs.token_logprobs == plain.logprobs.token_logprobs


def test_echo_prompt_rows_match_next_token_reads(client: OpenAI, model: str, server_url: str) -> None:
    """The echoed value of prompt token i is what a read of prompt[:i] gives that token."""
    ids = tokenize(server_url, PROMPT)
    echoed = client.completions.create(
        model=model,
        prompt=ids,
        max_tokens=0,
        echo=True,
        logprobs=0,
        extra_body={"return_tokens_as_token_ids": True},
    ).choices[0]
    assert len(echoed.logprobs.tokens) == len(ids)  # max_tokens 0: pure prompt scoring
    position = len(ids) - 1
    read = read_one(client, model, ids[:position], extra_body={"logprob_token_ids": [ids[position]]})
    assert read.logprobs.top_logprobs[0][f"token_id:{ids[position]}"] == pytest.approx(
        echoed.logprobs.token_logprobs[position], abs=1e-5
    )


def test_allowed_ids_report_raw_values_equal_to_an_unrestricted_read(client: OpenAI, model: str) -> None:
    free = read_one(client, model, PROMPT).logprobs.top_logprobs[0]
    ranked = sorted(free, key=free.get, reverse=True)
    labels = [ranked[3], ranked[7], ranked[15]]
    allowed = [id_of(label) for label in labels]
    restricted = read_one(
        client,
        model,
        PROMPT,
        logprobs=len(allowed),
        extra_body={"allowed_token_ids": allowed},
    )
    top = restricted.logprobs.top_logprobs[0]
    assert set(top) == set(labels)  # the listing is exactly the allowed ids
    for label in labels:
        assert top[label] == free[label]  # raw full-vocabulary values, not renormalised
    assert sum(math.exp(v) for v in top.values()) < 0.99
    assert restricted.logprobs.tokens[0] == ranked[3]  # greedy among the allowed ids


def test_allowed_ids_far_outside_the_top_are_still_listed(client: OpenAI, model: str) -> None:
    far = [17, 4000, 30000]  # ids very unlikely to be in the natural top-20
    labels = [f"token_id:{i}" for i in far]
    named = read_one(client, model, PROMPT, logprobs=1, extra_body={"logprob_token_ids": far})
    restricted = read_one(client, model, PROMPT, logprobs=3, extra_body={"allowed_token_ids": far})
    assert set(restricted.logprobs.top_logprobs[0]) == set(labels)
    for label in labels:
        assert restricted.logprobs.top_logprobs[0][label] == named.logprobs.top_logprobs[0][label]


def test_a_large_label_set_is_read_in_one_call(client: OpenAI, model: str) -> None:
    allowed = list(range(1000, 1255))  # 255 options, beyond --max-logprobs 20
    choice = read_one(client, model, PROMPT, logprobs=255, extra_body={"allowed_token_ids": allowed})
    top = choice.logprobs.top_logprobs[0]
    assert {id_of(label) for label in top} == set(allowed)
    values = list(top.values())
    assert values == sorted(values, reverse=True)


def test_return_tokens_as_token_ids_labels_everything(client: OpenAI, model: str) -> None:
    choice = read_one(client, model, PROMPT, max_tokens=3, logprobs=3)
    assert all(t.startswith("token_id:") for t in choice.logprobs.tokens)
    for top in choice.logprobs.top_logprobs:
        assert all(k.startswith("token_id:") for k in top)


def test_stop_token_is_listed_when_it_ends_generation(client: OpenAI, model: str) -> None:
    """Force an end-of-generation id: its row is the last entry, and the text omits it."""
    eog = 2  # <|im_end|> in SmolLM2
    choice = client.completions.create(
        model=model,
        prompt=PROMPT,
        max_tokens=5,
        temperature=0,
        logprobs=1,
        extra_body={"allowed_token_ids": [eog], "return_tokens_as_token_ids": True},
    ).choices[0]
    assert choice.finish_reason == "stop"
    assert choice.logprobs.tokens == [f"token_id:{eog}"]
    assert choice.text == ""
    assert choice.logprobs.text_offset == [0]


def test_logprobs_true_with_top_logprobs_is_accepted(client: OpenAI, model: str) -> None:
    choice = client.completions.create(
        model=model,
        prompt=PROMPT,
        max_tokens=1,
        temperature=0,
        logprobs=True,
        extra_body={"top_logprobs": 4},
    ).choices[0]
    assert len(choice.logprobs.top_logprobs[0]) in (4, 5)


def test_no_logprobs_gives_null(client: OpenAI, model: str) -> None:
    choice = client.completions.create(model=model, prompt=PROMPT, max_tokens=2).choices[0]
    assert choice.logprobs is None


def test_streaming_with_logprobs_matches_the_whole_reply(client: OpenAI, model: str) -> None:
    kwargs = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": 3,
        "echo": True,
    }
    whole = client.completions.create(**kwargs)
    stream = client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    text, tokens, values, tops, offsets, usage, finish = "", [], [], [], [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
            if c.logprobs is not None:
                tokens += c.logprobs.tokens
                values += c.logprobs.token_logprobs
                tops += c.logprobs.top_logprobs
                offsets += c.logprobs.text_offset
    expected = whole.choices[0]
    assert text == expected.text
    assert tokens == expected.logprobs.tokens
    assert values == expected.logprobs.token_logprobs
    assert tops == expected.logprobs.top_logprobs
    assert offsets == expected.logprobs.text_offset
    assert finish == expected.finish_reason
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_stop_strings_and_usage(client: OpenAI, model: str) -> None:
    free = client.completions.create(model=model, prompt="1, 2, 3, 4,", max_tokens=8, temperature=0)
    text = free.choices[0].text
    assert len(text) > 3
    stop = text[2:4]
    stopped = client.completions.create(
        model=model, prompt="1, 2, 3, 4,", max_tokens=8, temperature=0, stop=[stop], logprobs=0
    ).choices[0]
    assert stopped.finish_reason == "stop"
    assert stop not in stopped.text and text.startswith(stopped.text)
    # offsets stay exact up to the stop, though the engine held text back to look for it
    lp = stopped.logprobs
    ends = [*lp.text_offset[1:], None]
    for token, start, end in zip(lp.tokens, lp.text_offset, ends, strict=True):
        if end is not None and end <= len(stopped.text):
            assert stopped.text[start:end] == token
    assert free.usage.total_tokens == free.usage.prompt_tokens + free.usage.completion_tokens


def test_n_with_seed_gives_reproducible_choices(client: OpenAI, model: str) -> None:
    kwargs = {
        "model": model,
        "prompt": "Once upon a time",
        "max_tokens": 8,
        "temperature": 1.0,
        "n": 3,
        "seed": 7,
    }
    first = [c.text for c in client.completions.create(**kwargs).choices]
    second = [c.text for c in client.completions.create(**kwargs).choices]
    assert first == second
    assert len(set(first)) > 1  # each choice gets its own seed (seed + i)
    single = client.completions.create(**{**kwargs, "n": 1, "seed": 8}).choices[0].text
    assert single == first[1]


def test_lm_eval_loglikelihood_payload(client: OpenAI, model: str, server_url: str) -> None:
    """lm-evaluation-harness sends a batch of id lists with echo and reads prompt rows."""
    context = tokenize(server_url, "Question: What is the capital of France?\nAnswer:")
    continuation = tokenize(server_url, " Paris")
    ids = context + continuation
    reply = client.completions.create(
        model=model,
        prompt=[ids],
        max_tokens=1,
        logprobs=1,
        echo=True,
        temperature=0,
        seed=1234,
        extra_body={"return_tokens_as_token_ids": True},
    )
    lp = reply.choices[0].logprobs
    assert len(lp.tokens) == len(ids) + 1  # every prompt token, then the generated one
    assert [id_of(t) for t in lp.tokens[: len(ids)]] == ids
    for i in range(len(context), len(ids)):
        top = lp.top_logprobs[i]
        assert top[lp.tokens[i]] == lp.token_logprobs[i]
        is_greedy = lp.token_logprobs[i] == max(top.values())
        assert is_greedy == (len(top) == 1)  # an echoed non-argmax token is added beside the top 1


def test_a_repeated_prompt_reports_cached_tokens(client: OpenAI, model: str) -> None:
    prompt = "Cache me: " + "the quick brown fox jumps over the lazy dog. " * 12
    first = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
    second = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
    assert second.usage.prompt_tokens == first.usage.prompt_tokens
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < second.usage.prompt_tokens
    assert second.choices[0].text == first.choices[0].text
