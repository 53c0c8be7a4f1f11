"""Structured output on the real server and model: every output parses and validates.

Schemas cover nested objects, arrays with bounds, enums, numbers with bounds, optional
fields and string patterns; each output is checked with `jsonschema` (an independent
validator, not llguidance). The reported logprobs are the model's raw values, so the first
row of a constrained read equals an unconstrained or `allowed_token_ids` read.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema
import pytest
from openai import OpenAI

OBJ = {"type": "object", "additionalProperties": False}
SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "person": (
        "Describe a person as JSON.",
        {
            **OBJ,
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
            },
            "required": ["name", "age"],
        },
    ),
    "reading": (
        "Give a temperature reading as JSON.",
        {
            **OBJ,
            "properties": {"celsius": {"type": "number", "minimum": -50, "maximum": 60}},
            "required": ["celsius"],
        },
    ),
    "colors": (
        "List some colors.",
        {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 2, "maxItems": 3},
    ),
    "order": (
        "Describe an order as JSON.",
        {
            **OBJ,
            "properties": {
                "id": {"type": "integer", "minimum": 1, "maximum": 999},
                "customer": {
                    **OBJ,
                    "properties": {"name": {"type": "string", "maxLength": 10}, "vip": {"type": "boolean"}},
                    "required": ["name", "vip"],
                },
            },
            "required": ["id", "customer"],
        },
    ),
    "code": (
        "Give a product code.",
        {
            **OBJ,
            "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}},
            "required": ["code"],
        },
    ),
    "book": (
        "Describe a book.",
        {
            **OBJ,
            "properties": {
                "title": {"type": "string", "maxLength": 16},
                "year": {"type": "integer", "minimum": 1450, "maximum": 2030},
                "subtitle": {"type": "string", "maxLength": 10},
            },
            "required": ["title"],
        },
    ),
    "verdict": (
        "Was the parcel on time? Answer as JSON.",
        {
            **OBJ,
            "properties": {"ok": {"type": "boolean"}, "reason": {"enum": ["late", "early", "none"]}},
            "required": ["ok", "reason"],
        },
    ),
    "points": (
        "Give one or two points as JSON.",
        {
            "type": "array",
            "items": {
                **OBJ,
                "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}},
                "required": ["x"],
            },
            "minItems": 1,
            "maxItems": 2,
        },
    ),
    "middle_name": (
        "Does Ann have a middle name? Answer as JSON.",
        {
            **OBJ,
            "properties": {"middle": {"type": ["string", "null"], "maxLength": 8}},
            "required": ["middle"],
        },
    ),
    "count_or_none": (
        "How many moons has Mars?",
        {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 10}, {"enum": ["none"]}]},
    ),
    "date": ("When did the war end?", {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}),
    "ratings": (
        "Rate three films from 1 to 5 as JSON.",
        {
            **OBJ,
            "properties": {
                "scores": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1, "maximum": 5},
                    "minItems": 3,
                    "maxItems": 3,
                }
            },
            "required": ["scores"],
        },
    ),
    "sentiment": (
        "What is the sentiment of 'I love it'? Answer as JSON.",
        {
            **OBJ,
            "properties": {
                "sentiment": {"enum": ["positive", "negative", "neutral"]},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            },
            "required": ["sentiment", "confidence"],
        },
    ),
}
MAX_TOKENS = 64


def response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def chat_json(http: httpx.Client, name: str) -> dict[str, Any]:
    prompt, schema = SCHEMAS[name]
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "response_format": response_format(name, schema),
    }
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


@pytest.fixture(scope="module")
def http(server_url: str) -> httpx.Client:
    with httpx.Client(base_url=server_url, timeout=600) as client:
        yield client


@pytest.fixture(scope="module")
def batched(http: httpx.Client) -> dict[str, dict[str, Any]]:
    """Every schema's greedy chat reply, all sent at once (the engine batches them)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(SCHEMAS, pool.map(lambda name: chat_json(http, name), SCHEMAS), strict=True))


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_output_parses_and_validates(batched: dict[str, dict[str, Any]], name: str) -> None:
    choice = batched[name]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMAS[name][1])


def test_batched_equals_alone(http: httpx.Client, batched: dict[str, dict[str, Any]]) -> None:
    """Each sequence has its own matcher: alone it gives what it gave in the batch."""
    for name in ("order", "ratings"):
        assert chat_json(http, name)["message"] == batched[name]["message"]


def test_json_object_on_completions(client: OpenAI, model: str) -> None:
    choice = client.completions.create(
        model=model,
        prompt="A JSON object describing a dog:",
        max_tokens=MAX_TOKENS,
        temperature=0,
        extra_body={"response_format": {"type": "json_object"}},
    ).choices[0]
    if choice.finish_reason == "stop":
        assert isinstance(json.loads(choice.text), dict)
    else:  # a free-form object may run long: then it is a valid prefix of one
        assert choice.finish_reason == "length" and choice.text.lstrip().startswith("{")


def stream_text(client: OpenAI, model: str, route: str, **kwargs: Any) -> tuple[str, list[Any], str | None]:
    """(text, logprob entries, finish reason) of a streamed reply."""
    create = client.chat.completions.create if route == "chat" else client.completions.create
    text, entries, finish = "", [], None
    for chunk in create(model=model, stream=True, **kwargs):
        for choice in chunk.choices:
            if route == "chat":
                text += choice.delta.content or ""
                entries += choice.logprobs.content if choice.logprobs and choice.logprobs.content else []
            else:
                text += choice.text
                entries += [list(choice.logprobs.top_logprobs)] if choice.logprobs else []
            finish = choice.finish_reason or finish
    return text, entries, finish


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_streamed_equals_whole_for_the_same_seed(client: OpenAI, model: str, route: str) -> None:
    name = "person"
    prompt, schema = SCHEMAS[name]
    common: dict[str, Any] = {"max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": 11}
    extra = {"response_format": response_format(name, schema)}
    if route == "chat":
        kwargs = {
            **common,
            "messages": [{"role": "user", "content": prompt}],
            "logprobs": True,
            "top_logprobs": 2,
        }
        whole = client.chat.completions.create(model=model, extra_body=extra, **kwargs).choices[0]
        text, entries, finish = stream_text(client, model, route, extra_body=extra, **kwargs)
        assert (text, finish) == (whole.message.content, whole.finish_reason)
        assert entries == whole.logprobs.content
    else:
        kwargs = {**common, "prompt": "A person as JSON:", "logprobs": 2}
        whole = client.completions.create(model=model, extra_body=extra, **kwargs).choices[0]
        text, entries, finish = stream_text(client, model, route, extra_body=extra, **kwargs)
        assert (text, finish) == (whole.text, whole.finish_reason)
        assert [row for rows in entries for row in rows] == whole.logprobs.top_logprobs
    if finish == "stop":
        jsonschema.validate(json.loads(text), schema)


def test_enum_first_token_values_equal_an_allowed_ids_read(
    client: OpenAI, model: str, server_url: str
) -> None:
    """The reported values are raw: the enum read's first row lists the same floats as an
    `allowed_token_ids` read of the same choices and as an unconstrained read."""
    choices = [3, 5, 7]
    ids = [
        httpx.post(f"{server_url}/tokenize", json={"prompt": str(c)}).json()["tokens"][-1] for c in choices
    ]
    prompt = "The number of days in a week is"

    def read(**extra: Any):
        return client.completions.create(
            model=model,
            prompt=prompt,
            max_tokens=1,
            temperature=0,
            logprobs=3,
            extra_body={"return_tokens_as_token_ids": True, **extra},
        ).choices[0]

    enum = read(
        structured_outputs={"json": {"enum": choices}, "disable_any_whitespace": True}, logprob_token_ids=ids
    )
    allowed = read(allowed_token_ids=ids)
    free = read()
    assert enum.finish_reason == "stop"  # one digit completes the enum
    assert enum.logprobs.tokens == allowed.logprobs.tokens
    assert enum.logprobs.token_logprobs == allowed.logprobs.token_logprobs
    assert enum.logprobs.top_logprobs[0] == allowed.logprobs.top_logprobs[0]  # the three ids, raw values
    assert enum.text in {str(c) for c in choices}
    first = enum.logprobs.tokens[0]
    if first in free.logprobs.top_logprobs[0]:  # the unconstrained read lists it: the same float
        assert free.logprobs.top_logprobs[0][first] == enum.logprobs.token_logprobs[0]


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_max_tokens_cuts_json_short_with_length(client: OpenAI, model: str, route: str) -> None:
    prompt, schema = SCHEMAS["order"]
    extra = {"response_format": response_format("order", schema)}
    if route == "chat":
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=3,
            temperature=0,
            extra_body=extra,
        ).choices[0]
        text = reply.message.content
    else:
        reply = client.completions.create(
            model=model, prompt=prompt, max_tokens=3, temperature=0, extra_body=extra
        ).choices[0]
        text = reply.text
    assert reply.finish_reason == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_regex_choice_and_grammar_on_both_routes(client: OpenAI, model: str) -> None:
    regex = r"[0-9]{3}-[0-9]{4}"
    text = (
        client.completions.create(
            model=model,
            prompt="Call me at",
            max_tokens=16,
            temperature=0,
            extra_body={"structured_outputs": {"regex": regex}},
        )
        .choices[0]
        .text
    )
    assert re.fullmatch(regex, text), text
    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Is the sky blue?"}],
        max_tokens=8,
        temperature=0,
        extra_body={"guided_choice": ["yes", "no"]},  # vLLM's older field name
    ).choices[0]
    assert chat.message.content in {"yes", "no"} and chat.finish_reason == "stop"
    gbnf = client.completions.create(
        model=model,
        prompt="Answer loudly:",
        max_tokens=8,
        temperature=0,
        extra_body={"structured_outputs": {"grammar": 'root ::= ("yes" | "no") "!"'}},
    ).choices[0]
    assert gbnf.text in {"yes!", "no!"} and gbnf.finish_reason == "stop"
    lark = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Pick a side."}],
        max_tokens=8,
        temperature=0,
        extra_body={"structured_outputs": {"grammar": 'start: "left" | "right"'}},
    ).choices[0]
    assert lark.message.content in {"left", "right"}


def test_n_choices_each_follow_the_schema(client: OpenAI, model: str) -> None:
    prompt, schema = SCHEMAS["verdict"]
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        n=3,
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        seed=5,
        extra_body={"response_format": response_format("verdict", schema)},
    )
    assert len(reply.choices) == 3
    for choice in reply.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), schema)


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_a_bad_schema_is_a_400_and_the_next_request_is_served(http: httpx.Client, route: str) -> None:
    base = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in route else {"prompt": "hi"}
    bad = {
        **base,
        "max_tokens": 4,
        "response_format": response_format("x", {"type": "object", "minProperties": "two"}),
    }
    response = http.post(route, json=bad)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "response_format" and "minProperties" in error["message"]
    regex = http.post(route, json={**base, "max_tokens": 4, "structured_outputs": {"regex": "[a-"}})
    assert regex.status_code == 400 and regex.json()["error"]["param"] == "structured_outputs"
    good = http.post(route, json={**base, "max_tokens": 2})
    assert good.status_code == 200
