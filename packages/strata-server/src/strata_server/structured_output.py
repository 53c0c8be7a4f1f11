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
    first_line,
    grammar_spec,
    json_object_spec,
    json_schema_spec,
    regex_spec,
)
from strata_server.errors import ApiError
from strata_server.limits import RequestLimits
from strata_server.protocol import GenerationRequest, ResponseFormat, StructuredOutputs

INVALID = "invalid_structured_output"
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")

Build = Callable[[], StructuredSpec]


def structured_spec(body: GenerationRequest, limits: RequestLimits) -> StructuredSpec | None:
    """The request's one output constraint (None: free text), or a 400 naming the field.

    Sizes are checked (--max-grammar-chars, --max-choice-options, --max-schema-depth) before
    anything is parsed or compiled, so the work is bounded by the limits, not by the body.
    """
    asked = [(param, build) for param, build in _constraints(body, limits) if build is not None]
    if not asked:
        return None
    if len(asked) > 1:
        names = ", ".join(f"`{param}`" for param, _ in asked)
        raise ApiError(f"Give one structured output constraint, not several ({names}).", param=asked[1][0])
    param, build = asked[0]
    try:
        return build()
    except GrammarError as exc:
        raise ApiError(f"Invalid `{param}`: {first_line(str(exc))}", param=param, code=INVALID) from None


def structured_param(body: GenerationRequest) -> str:
    """The wire field that carries the request's constraint (for the engine's refusals)."""
    for param, value in (
        ("structured_outputs", body.structured_outputs),
        ("guided_json", body.guided_json),
        ("guided_regex", body.guided_regex),
        ("guided_choice", body.guided_choice),
        ("guided_grammar", body.guided_grammar),
    ):
        if value is not None:
            return param
    return "response_format"


def _constraints(body: GenerationRequest, limits: RequestLimits) -> list[tuple[str, Build | None]]:
    def text(value: str | None, param: str, spec: Callable[[str], StructuredSpec]) -> Build | None:
        if value is None:
            return None
        _check_chars(len(value), param, limits)
        return lambda: spec(value)

    return [
        ("response_format", _from_response_format(body.response_format, limits)),
        ("structured_outputs", _from_structured_outputs(body.structured_outputs, limits)),
        (
            "guided_json",
            _json(body.guided_json, "guided_json", limits, pattern=body.guided_whitespace_pattern),
        ),
        ("guided_regex", text(body.guided_regex, "guided_regex", regex_spec)),
        ("guided_choice", _choice(body.guided_choice, "guided_choice", limits)),
        ("guided_grammar", text(body.guided_grammar, "guided_grammar", grammar_spec)),
    ]


def _check_chars(size: int, param: str, limits: RequestLimits) -> None:
    if size > limits.max_grammar_chars:
        raise ApiError(
            f"`{param}` has {size} characters; the server allows at most {limits.max_grammar_chars} "
            "(--max-grammar-chars).",
            param=param,
        )


def _choice(choices: list[str] | None, param: str, limits: RequestLimits) -> Build | None:
    """`guided_choice` within --max-choice-options options and --max-grammar-chars characters."""
    if choices is None:
        return None
    if len(choices) > limits.max_choice_options:
        raise ApiError(
            f"`{param}` has {len(choices)} options; the server allows at most "
            f"{limits.max_choice_options} (--max-choice-options).",
            param=param,
        )
    _check_chars(sum(len(c) for c in choices), param, limits)
    return lambda: choice_spec(choices)


def _from_response_format(fmt: ResponseFormat | None, limits: RequestLimits) -> Build | None:
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
        return _json(fmt.json_schema.schema, "response_format", limits)
    raise ApiError(
        f"`response_format.type` must be one of {', '.join(RESPONSE_FORMAT_TYPES)}; got `{fmt.type}`.",
        param="response_format",
        code="unsupported",
    )


def _from_structured_outputs(so: StructuredOutputs | None, limits: RequestLimits) -> Build | None:
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
        schema = _schema_value(so.json, "structured_outputs", limits)
        if so.disable_additional_properties:
            schema = _closed_objects(schema)
        given.append(
            lambda: json_schema_spec(schema, any_whitespace=any_whitespace, whitespace_pattern=pattern)
        )
    if so.json_object is not None:
        given.append(lambda: json_object_spec(any_whitespace=any_whitespace, whitespace_pattern=pattern))
    if so.regex is not None:
        _check_chars(len(so.regex), "structured_outputs", limits)
        given.append(lambda: regex_spec(so.regex or ""))
    if (choice := _choice(so.choice, "structured_outputs", limits)) is not None:
        given.append(choice)
    if so.grammar is not None:
        _check_chars(len(so.grammar), "structured_outputs", limits)
        given.append(lambda: grammar_spec(so.grammar or ""))
    if len(given) != 1:
        raise ApiError(
            "`structured_outputs` needs exactly one of `json`, `regex`, `choice`, `grammar`, "
            f"`json_object`; got {len(given)}.",
            param="structured_outputs",
        )
    return given[0]


def _json(
    value: dict[str, Any] | bool | str | None, param: str, limits: RequestLimits, pattern: str | None = None
) -> Build | None:
    if value is None:
        return None
    schema = _schema_value(value, param, limits)
    return lambda: json_schema_spec(schema, whitespace_pattern=pattern)


def _schema_value(
    value: dict[str, Any] | bool | str, param: str, limits: RequestLimits
) -> dict[str, Any] | bool:
    """A schema given as an object, a boolean, or (vLLM allows it) a JSON string of one,
    within --max-grammar-chars characters and --max-schema-depth levels."""
    if isinstance(value, str):
        _check_chars(len(value), param, limits)
        try:
            parsed = json.loads(value)
        except RecursionError:
            raise _too_deep(param, limits) from None
        except ValueError as exc:
            raise ApiError(
                f"Invalid `{param}`: the schema string is not JSON ({exc}).", param=param, code=INVALID
            ) from None
        if json_depth(parsed) > limits.max_schema_depth:
            raise _too_deep(param, limits)
        if not isinstance(parsed, dict | bool):
            raise ApiError(
                f"Invalid `{param}`: a JSON schema must be an object or a boolean.", param=param, code=INVALID
            )
        value = parsed
    if json_depth(value) > limits.max_schema_depth:
        raise _too_deep(param, limits)
    _check_chars(len(json.dumps(value)), param, limits)
    return value


def _too_deep(param: str, limits: RequestLimits) -> ApiError:
    return ApiError(
        f"`{param}` is nested more than {limits.max_schema_depth} levels deep (--max-schema-depth).",
        param=param,
    )


def json_depth(value: Any) -> int:
    """How deeply objects and arrays nest in `value` (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


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
