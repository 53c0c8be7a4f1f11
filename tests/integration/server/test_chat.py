"""`/v1/chat/completions` on the real server and model, through the official `openai` SDK."""

from __future__ import annotations

import math

import httpx
import pytest
from openai import OpenAI

MESSAGES = [
    {"role": "system", "content": "Answer with one word."},
    {"role": "user", "content": "Is the sky blue on a clear day? Answer yes or no."},
]


@pytest.fixture(scope="module")
def chat_ids(server_url: str) -> list[int]:
    body = {"messages": MESSAGES, "add_generation_prompt": True}
    return httpx.post(f"{server_url}/tokenize", json=body).json()["tokens"]


def greedy_chat(client: OpenAI, model: str, max_tokens: int, top_logprobs: int, **kwargs):
    """A greedy reply to MESSAGES listing `top_logprobs` alternatives per token."""
    return client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=max_tokens,
        temperature=0,
        logprobs=True,
        top_logprobs=top_logprobs,
        **kwargs,
    )


def test_chat_logprobs_shape(client: OpenAI, model: str) -> None:
    reply = greedy_chat(client, model, max_tokens=5, top_logprobs=4)
    choice = reply.choices[0]
    content = choice.logprobs.content
    assert 1 <= len(content) <= 5
    for entry in content:
        assert len(entry.top_logprobs) == 4
        assert entry.logprob == entry.top_logprobs[0].logprob  # greedy
        assert bytes(entry.bytes).decode(errors="replace") == entry.token or entry.token.startswith("bytes:")
        values = [t.logprob for t in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
    assert reply.usage.completion_tokens == len(content)


def test_chat_without_max_tokens_ends_on_its_own(client: OpenAI, model: str) -> None:
    reply = client.chat.completions.create(
        model=model, messages=MESSAGES, temperature=0, logprobs=True, top_logprobs=0
    )
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert all(entry.top_logprobs == [] for entry in choice.logprobs.content)
    if choice.finish_reason == "stop":
        assert choice.logprobs.content[-1].token in ("<|im_end|>", "<|endoftext|>")


def test_chat_text_and_token_id_prompts_agree(
    client: OpenAI, model: str, server_url: str, chat_ids: list[int]
) -> None:
    """The same next token gets the same value through all three routes to it."""
    chat = greedy_chat(client, model, max_tokens=1, top_logprobs=5).choices[0]
    rendered = httpx.post(f"{server_url}/detokenize", json={"tokens": chat_ids}).json()["prompt"]
    kwargs = {"model": model, "max_tokens": 1, "temperature": 0, "logprobs": 5}
    by_ids = client.completions.create(prompt=chat_ids, **kwargs).choices[0]
    by_text = client.completions.create(prompt=rendered, **kwargs).choices[0]
    entry = chat.logprobs.content[0]
    for legacy in (by_ids, by_text):
        assert legacy.logprobs.tokens[0] == entry.token
        assert legacy.logprobs.token_logprobs[0] == entry.logprob
        top = legacy.logprobs.top_logprobs[0]
        for alt in entry.top_logprobs:
            assert top[alt.token] == alt.logprob


def test_chat_allowed_ids_are_renormalised(
    client: OpenAI, model: str, server_url: str, chat_ids: list[int]
) -> None:
    labels = [" yes", " no", "yes", "no", "Yes", "No"]
    ids = [httpx.post(f"{server_url}/tokenize", json={"prompt": t}).json()["tokens"] for t in labels]
    allowed = sorted({i[0] for i in ids if len(i) == 1})
    assert len(allowed) >= 2
    chat = greedy_chat(
        client, model, max_tokens=1, top_logprobs=len(allowed), extra_body={"allowed_token_ids": allowed}
    ).choices[0]
    entry = chat.logprobs.content[0]
    assert len(entry.top_logprobs) == len(allowed)
    assert sum(math.exp(t.logprob) for t in entry.top_logprobs) == pytest.approx(1.0, abs=1e-4)
    assert entry.logprob == max(t.logprob for t in entry.top_logprobs)

    raw = (
        client.completions.create(
            model=model,
            prompt=chat_ids,
            max_tokens=1,
            temperature=0,
            logprobs=len(allowed),
            extra_body={
                "allowed_token_ids": allowed,
                "return_tokens_as_token_ids": True,
            },
        )
        .choices[0]
        .logprobs.top_logprobs[0]
    )
    raw_values = {int(k.removeprefix("token_id:")): v for k, v in raw.items()}
    log_mass = math.log(sum(math.exp(v) for v in raw_values.values()))
    renormalised = {t.token: t.logprob for t in entry.top_logprobs}
    for token_id, value in raw_values.items():
        text = httpx.post(f"{server_url}/detokenize", json={"tokens": [token_id]}).json()["prompt"]
        assert renormalised[text] == pytest.approx(value - log_mass, abs=1e-4)


def test_chat_streaming_with_logprobs_matches_the_whole_reply(client: OpenAI, model: str) -> None:
    kwargs = {
        "model": model,
        "messages": MESSAGES,
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
    }
    whole = client.chat.completions.create(**kwargs).choices[0]
    text, entries, usage, roles = "", [], None, []
    stream = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            roles.append(c.delta.role)
            text += c.delta.content or ""
            if c.logprobs is not None and c.logprobs.content:
                entries += c.logprobs.content
    assert roles[0] == "assistant"
    assert text == whole.message.content
    assert [(e.token, e.logprob) for e in entries] == [(e.token, e.logprob) for e in whole.logprobs.content]
    assert usage is not None and usage.completion_tokens == len(whole.logprobs.content)


def test_chat_content_parts_are_accepted(client: OpenAI, model: str) -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "Say hi."}]}]
    plain = [{"role": "user", "content": "Say hi."}]
    a = client.chat.completions.create(model=model, messages=parts, max_tokens=4, temperature=0)
    b = client.chat.completions.create(model=model, messages=plain, max_tokens=4, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content
