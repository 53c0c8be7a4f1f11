"""Structured-output keywords reach the wire as given, and only when given (sync and async)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from strata_client import AsyncStrataClient

MODEL = "SmolLM2-135M-Instruct"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"team": {"enum": ["billing", "shipping"]}},
    "required": ["team"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "route", "schema": SCHEMA, "strict": True}}

# Each keyword with a value of its wire type; the server takes one constraint per request,
# but the client passes through whatever it is given.
FIELDS: list[tuple[str, Any]] = [
    ("response_format", RESPONSE_FORMAT),
    ("response_format", {"type": "json_object"}),
    ("structured_outputs", {"json": SCHEMA, "disable_any_whitespace": True}),
    ("structured_outputs", {"choice": ["yes", "no"]}),
    ("guided_json", SCHEMA),
    ("guided_json", json.dumps(SCHEMA)),
    ("guided_regex", r"\d{3}"),
    ("guided_choice", ["yes", "no"]),
    ("guided_grammar", 'root ::= "a" | "b"'),
    ("guided_whitespace_pattern", r"[ ]?"),
]
STRUCTURED = {name for name, _ in FIELDS}


def sent_body(route) -> dict[str, Any]:
    return json.loads(route.calls.last.request.content)


@pytest.mark.parametrize(("name", "value"), FIELDS)
def test_completions_send_the_field_as_given(client, mock, id_mode_completion, name, value) -> None:
    route = mock.post("/v1/completions").respond(200, json=id_mode_completion)
    client.completions.create(model=MODEL, prompt="Route:", max_tokens=4, **{name: value})
    assert sent_body(route) == {
        "model": MODEL,
        "prompt": "Route:",
        "max_tokens": 4,
        "stream": False,
        name: value,
    }


@pytest.mark.parametrize(("name", "value"), FIELDS)
def test_chat_sends_the_field_as_given(client, mock, chat_completion, name, value) -> None:
    route = mock.post("/v1/chat/completions").respond(200, json=chat_completion)
    messages = [{"role": "user", "content": "Route this."}]
    client.chat.completions.create(model=MODEL, messages=messages, **{name: value})
    assert sent_body(route) == {"model": MODEL, "messages": messages, "stream": False, name: value}


def test_no_structured_field_is_sent_unless_given(client, mock, id_mode_completion, chat_completion) -> None:
    completions = mock.post("/v1/completions").respond(200, json=id_mode_completion)
    chat = mock.post("/v1/chat/completions").respond(200, json=chat_completion)
    client.completions.create(model=MODEL, prompt="x")
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert STRUCTURED.isdisjoint(sent_body(completions))
    assert STRUCTURED.isdisjoint(sent_body(chat))


def test_extra_body_overrides_a_structured_keyword(client, mock, id_mode_completion) -> None:
    route = mock.post("/v1/completions").respond(200, json=id_mode_completion)
    client.completions.create(
        model=MODEL, prompt="x", guided_choice=["a"], extra_body={"guided_choice": ["b", "c"]}
    )
    assert sent_body(route)["guided_choice"] == ["b", "c"]


@pytest.mark.asyncio
async def test_async_clients_send_the_same_fields(
    base_url, mock, id_mode_completion, chat_completion
) -> None:
    completions = mock.post("/v1/completions").respond(200, json=id_mode_completion)
    chat = mock.post("/v1/chat/completions").respond(200, json=chat_completion)
    messages = [{"role": "user", "content": "x"}]
    async with AsyncStrataClient(base_url=base_url, max_retries=0) as aclient:
        await aclient.completions.create(model=MODEL, prompt="x", response_format=RESPONSE_FORMAT)
        await aclient.chat.completions.create(
            model=MODEL, messages=messages, guided_json=SCHEMA, guided_whitespace_pattern=" "
        )
    assert sent_body(completions)["response_format"] == RESPONSE_FORMAT
    assert sent_body(chat) == {
        "model": MODEL,
        "messages": messages,
        "stream": False,
        "guided_json": SCHEMA,
        "guided_whitespace_pattern": " ",
    }
