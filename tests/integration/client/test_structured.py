"""Structured output through strata-client against the real server on the default model:
the JSON a schema-constrained request returns validates with `jsonschema` (sync and async)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from strata_client import AsyncStrataClient, StrataClient

SCHEMA = {
    "type": "object",
    "properties": {
        "team": {"enum": ["billing", "shipping", "technical support"]},
        "urgent": {"type": "boolean"},
        "days": {"type": "integer", "minimum": 0, "maximum": 30},
    },
    "required": ["team", "urgent", "days"],
    "additionalProperties": False,
}
MESSAGES = [
    {"role": "system", "content": "Route support tickets. Reply in JSON."},
    {"role": "user", "content": "My parcel never arrived and it has been nine days."},
]


def test_a_json_schema_reply_validates(server_url: str) -> None:
    with StrataClient(base_url=server_url, timeout=120.0, max_retries=0) as client:
        chat = client.chat.completions.create(
            messages=MESSAGES,
            max_tokens=40,
            temperature=0.0,
            logprobs=True,
            response_format={"type": "json_schema", "json_schema": {"name": "route", "schema": SCHEMA}},
        )
        text = client.completions.create(
            prompt="Ticket: my parcel never arrived.\nRouting as JSON: ",
            max_tokens=40,
            seed=7,
            temperature=1.0,
            structured_outputs={"json": SCHEMA, "disable_any_whitespace": True},
        )
    choice = chat.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content or ""), SCHEMA)
    assert choice.logprobs is not None and choice.logprobs.content  # raw values still reported
    assert text.choices[0].finish_reason == "stop"
    compact = text.choices[0].text
    jsonschema.validate(json.loads(compact), SCHEMA)
    assert " " not in compact.replace("technical support", "")  # no free whitespace


@pytest.mark.asyncio
async def test_async_guided_choice_is_one_of_the_choices(server_url: str) -> None:
    choices = ["billing", "shipping", "technical support"]
    async with AsyncStrataClient(base_url=server_url, timeout=120.0, max_retries=0) as client:
        reply = await client.chat.completions.create(
            messages=MESSAGES, max_tokens=8, temperature=1.0, seed=3, n=4, guided_choice=choices
        )
    assert {c.message.content for c in reply.choices} <= set(choices)
