"""strata-client against the real server on the default model (the `server_url` fixture)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from strata_client import (
    BadRequestError,
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    StrataClient,
)

QUESTION = [
    {"role": "system", "content": "Answer with one word."},
    {"role": "user", "content": "Is the sky blue on a clear day? Answer yes or no."},
]


@pytest.fixture(scope="module")
def server(server_url: str) -> Iterator[StrataClient]:
    with StrataClient(base_url=server_url, timeout=120.0) as client:
        assert client.health()
        yield client


@pytest.fixture(scope="module")
def label_ids(server: StrataClient) -> list[int]:
    """One token id per label, read through the server's tokenizer."""
    ids = [server.tokenize(label, add_special_tokens=False).tokens[0] for label in ("yes", "no")]
    assert len(set(ids)) == 2
    return ids


@pytest.fixture(scope="module")
def prompt_ids(server: StrataClient) -> list[int]:
    rendered = server.tokenize(messages=QUESTION, add_generation_prompt=True)
    assert rendered.count == len(rendered.tokens) > 0
    return rendered.tokens


def test_label_read_parses_into_id_keyed_values(server, label_ids, prompt_ids):
    result = server.completions.create(
        prompt=prompt_ids,
        max_tokens=1,
        temperature=0.0,
        logprobs=len(label_ids),
        allowed_token_ids=label_ids,
        return_tokens_as_token_ids=True,
    )
    assert isinstance(result, Completion)
    logprobs = result.choices[0].logprobs
    assert logprobs is not None
    [chosen] = logprobs.token_ids()
    assert chosen in label_ids
    values = logprobs.values_of(0, label_ids)
    assert all(value is not None and value <= 0.0 for value in values.values())
    assert set(logprobs.top_by_id(0)) == set(label_ids)
    # Greedy over the allowed ids picks the larger value, reported identically in both places.
    assert logprobs.token_logprobs[0] == max(values.values()) == values[chosen]
    # Full-vocabulary values, not renormalised: the labels hold at most all of the mass.
    assert sum(math.exp(value) for value in values.values()) <= 1.0 + 1e-6
    assert server.detokenize([chosen]).prompt == result.choices[0].text


def test_label_values_match_an_unrestricted_read(server, label_ids, prompt_ids):
    restricted = server.completions.create(
        prompt=prompt_ids,
        max_tokens=1,
        temperature=0.0,
        logprobs=2,
        allowed_token_ids=label_ids,
        return_tokens_as_token_ids=True,
    )
    free = server.completions.create(
        prompt=prompt_ids,
        max_tokens=1,
        temperature=0.0,
        logprobs=20,
        return_tokens_as_token_ids=True,
    )
    restricted_values = restricted.choices[0].logprobs.top_by_id(0)
    free_values = free.choices[0].logprobs.top_by_id(0)
    shared = set(restricted_values) & set(free_values)
    assert shared, "neither label is in the unrestricted top-20; pick other labels"
    for token_id in shared:
        assert restricted_values[token_id] == pytest.approx(free_values[token_id], abs=1e-6)


def test_echo_offsets_rebuild_the_returned_text(server):
    result = server.completions.create(
        prompt="The capital of France is", max_tokens=2, temperature=0.0, logprobs=1, echo=True
    )
    choice = result.choices[0]
    assert choice.logprobs.token_logprobs[0] is None
    assert choice.logprobs.rebuild_text().startswith(choice.text)


def test_streamed_chat_with_logprobs_matches_the_unstreamed_answer(server, server_url):
    arguments = {"max_tokens": 6, "temperature": 0.0, "logprobs": True, "top_logprobs": 2}
    whole = server.chat.completions.create(messages=QUESTION, **arguments)
    assert isinstance(whole, ChatCompletion)
    with server.chat.completions.create(messages=QUESTION, **arguments, stream=True) as stream:
        chunks = list(stream)
    assert chunks and all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    entries = [
        entry
        for chunk in chunks
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content
        for entry in chunk.choices[0].logprobs.content
    ]
    assert entries, "no logprobs in the stream"
    for entry in entries:
        assert entry.logprob <= 0.0 and 1 <= len(entry.top_logprobs) <= 3
        assert entry.logprob == max(top.logprob for top in entry.top_logprobs)  # greedy
    assert text == whole.choices[0].message.content
    # the typed models carry the server's provenance: one fingerprint, the model's sha256
    version = httpx.get(f"{server_url}/version", timeout=30).json()
    assert whole.system_fingerprint == version["system_fingerprint"]
    assert {chunk.system_fingerprint for chunk in chunks} == {version["system_fingerprint"]}
    assert server.models.list().data[0].sha256 == version["model"]["sha256"]
    whole_entries = whole.choices[0].logprobs.content
    assert [(e.token, e.logprob) for e in entries] == [(e.token, e.logprob) for e in whole_entries]


def test_a_bad_request_is_a_typed_400_and_the_next_call_works(server, prompt_ids):
    with pytest.raises(BadRequestError) as info:
        server.completions.create(prompt=prompt_ids, max_tokens=1, allowed_token_ids=[10**9])
    assert str(10**9) in info.value.message
    assert server.models.list().data


def test_prompt_logprobs_parse_into_typed_entries(server):
    result = server.completions.create(
        prompt="The capital of France is", max_tokens=1, temperature=0.0, logprobs=1, echo=True,
        extra_body={"prompt_logprobs": 2},
    )  # fmt: skip
    choice = result.choices[0]
    rows = choice.prompt_logprobs
    assert rows is not None and rows[0] is None and len(rows) == len(choice.logprobs.tokens) - 1
    for position, row in enumerate(rows[1:], start=1):
        token_id = next(iter(row))  # the prompt token comes first
        assert isinstance(token_id, int) and row[token_id].logprob == choice.logprobs.token_logprobs[position]
        assert {entry.rank for entry in row.values()} >= {1, 2}
