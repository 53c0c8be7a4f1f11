"""Structured output on the wire: `response_format` and vLLM's fields -> one engine constraint.

OpenAI's `response_format` (`json_schema`, `json_object`, `text`), vLLM's
`structured_outputs` object (`json`, `regex`, `choice`, `grammar`, `json_object`) and the
older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar` fields all reduce
to one `StructuredSpec`, compiled and checked here, so a bad schema, regex or grammar is a
400 naming the field that carried it before anything is queued. One constraint per request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from strata_engine.api import StructuredSpec
from strata_engine.structured import (
    GrammarError,
    choice_spec,
    grammar_spec,
    json_object_spec,
    json_schema_spec,
    regex_spec,
)
from strata_server.errors import ApiError
from strata_server.protocol import GenerationRequest, ResponseFormat, StructuredOutputs

INVALID = "invalid_structured_output"
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")

Build = Callable[[], StructuredSpec]


def structured_spec(body: GenerationRequest) -> StructuredSpec | None:
    """The request's one output constraint (None: free text), or a 400 naming the field."""
    asked = [(param, build) for param, build in _constraints(body) if build is not None]
    if not asked:
        return None
    if len(asked) > 1:
        names = ", ".join(f"`{param}`" for param, _ in asked)
        raise ApiError(f"Give one structured output constraint, not several ({names}).", param=asked[1][0])
    param, build = asked[0]
    if body.allowed_token_ids is not None:
        raise ApiError(
            f"`allowed_token_ids` cannot be combined with structured output (`{param}`).",
            param="allowed_token_ids",
        )
    try:
        return build()
    except GrammarError as exc:
        raise ApiError(f"Invalid `{param}`: {exc}", param=param, code=INVALID) from None


def _constraints(body: GenerationRequest) -> list[tuple[str, Build | None]]:
    return [
        ("response_format", _from_response_format(body.response_format)),
        ("structured_outputs", _from_structured_outputs(body.structured_outputs)),
        ("guided_json", _json(body.guided_json, "guided_json", pattern=body.guided_whitespace_pattern)),
        ("guided_regex", None if body.guided_regex is None else lambda: regex_spec(body.guided_regex or "")),
        (
            "guided_choice",
            None if body.guided_choice is None else lambda: choice_spec(body.guided_choice or []),
        ),
        (
            "guided_grammar",
            None if body.guided_grammar is None else lambda: grammar_spec(body.guided_grammar or ""),
        ),
    ]


def _from_response_format(fmt: ResponseFormat | None) -> Build | None:
    """OpenAI's `response_format`: `text` is no constraint; `json_schema` needs its `schema`."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json_object_spec
    if fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema is None:
            raise ApiError(
                "`response_format` of type `json_schema` needs `json_schema.schema`.",
                param="response_format",
            )
        return _json(fmt.json_schema.schema, "response_format")
    raise ApiError(
        f"`response_format.type` must be one of {', '.join(RESPONSE_FORMAT_TYPES)}; got `{fmt.type}`.",
        param="response_format",
        code="unsupported",
    )


def _from_structured_outputs(so: StructuredOutputs | None) -> Build | None:
    """vLLM's `structured_outputs`: exactly one of its constraint fields."""
    if so is None:
        return None
    if so.structural_tag is not None:
        raise ApiError(
            "`structured_outputs.structural_tag` is not supported by this server.",
            param="structured_outputs",
            code="unsupported",
        )
    any_whitespace, pattern = not so.disable_any_whitespace, so.whitespace_pattern
    given: list[Build] = []
    if so.json is not None:
        schema = _schema_value(so.json, "structured_outputs")
        if so.disable_additional_properties:
            schema = _closed_objects(schema)
        given.append(
            lambda: json_schema_spec(schema, any_whitespace=any_whitespace, whitespace_pattern=pattern)
        )
    if so.json_object is not None:
        given.append(lambda: json_object_spec(any_whitespace=any_whitespace, whitespace_pattern=pattern))
    if so.regex is not None:
        given.append(lambda: regex_spec(so.regex or ""))
    if so.choice is not None:
        given.append(lambda: choice_spec(so.choice or []))
    if so.grammar is not None:
        given.append(lambda: grammar_spec(so.grammar or ""))
    if len(given) != 1:
        raise ApiError(
            "`structured_outputs` needs exactly one of `json`, `regex`, `choice`, `grammar`, "
            f"`json_object`; got {len(given)}.",
            param="structured_outputs",
        )
    return given[0]


def _json(value: dict[str, Any] | bool | str | None, param: str, pattern: str | None = None) -> Build | None:
    if value is None:
        return None
    schema = _schema_value(value, param)
    return lambda: json_schema_spec(schema, whitespace_pattern=pattern)


def _schema_value(value: dict[str, Any] | bool | str, param: str) -> dict[str, Any] | bool:
    """A schema given as an object, a boolean, or (vLLM allows it) a JSON string of one."""
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ApiError(
            f"Invalid `{param}`: the schema string is not JSON ({exc}).", param=param, code=INVALID
        ) from None
    if not isinstance(parsed, dict | bool):
        raise ApiError(
            f"Invalid `{param}`: a JSON schema must be an object or a boolean.", param=param, code=INVALID
        )
    return parsed


def _closed_objects(schema: Any) -> Any:
    """vLLM's `disable_additional_properties`: every object schema with `properties` and no
    `additionalProperties` gets `additionalProperties: false` (nested ones too)."""
    if isinstance(schema, list):
        return [_closed_objects(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed_objects(value) for key, value in schema.items()}
    if "properties" in closed and "additionalProperties" not in closed:
        closed["additionalProperties"] = False
    return closed
