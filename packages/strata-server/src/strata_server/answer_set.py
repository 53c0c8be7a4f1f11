"""The finite answer set of a JSON schema, for `/v1/score_candidates` with `json_schema`.

A decision typed as an enum, a boolean or a small object of those has finitely many answers,
so each can be scored whole instead of sampled. This module lists them: an `enum` or `const`
of strings, numbers, booleans or null; `"type": "boolean"` (true, false) or `"null"`; and an
object whose properties are all finite, all required, in schema order, with
`"additionalProperties": false` (the product of its properties' answers). Anything else
(a free string, an unbounded number, an array, an optional or extra property) has no finite
list and is a 400 naming `json_schema` and saying why.

Each answer's text is its compact JSON (separators `,` and `:`, keys in schema order,
non-ASCII kept): exactly what the structured-output path generates for that schema with
`disable_any_whitespace`, and one of the texts it accepts by default (its whitespace between
tokens is optional), so every scored answer is one the constrained generator could produce.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

from strata_engine.structured import GrammarError, json_schema_spec
from strata_server.errors import ApiError

PARAM = "json_schema"

# Keywords that describe a schema without constraining its values.
ANNOTATIONS = frozenset({"title", "description", "$schema", "$id", "$comment", "default", "examples"})
SCALAR_TYPES = {"string": str, "boolean": bool, "null": type(None)}


@dataclass(frozen=True)
class Answer:
    """One answer: its parsed `value` and the compact JSON `text` that is scored."""

    value: Any
    text: str


def finite_answers(schema: Any, most: int) -> list[Answer]:
    """Every answer `schema` allows, in schema order (at most `most`), or a 400 saying why not."""
    if not isinstance(schema, dict):
        raise _refuse("must be a JSON Schema object with a finite set of answers")
    try:
        json_schema_spec(schema)  # the structured-output path must accept it too
    except GrammarError as exc:
        raise ApiError(
            f"Invalid `json_schema`: {exc}", param=PARAM, code="invalid_structured_output"
        ) from None
    values = _values(schema, "", most)
    if len(values) > most:
        raise _refuse(f"has {len(values)} answers; the server scores at most {most}")
    answers = [Answer(value, render(value)) for value in values]
    _check_distinct(answers)
    return answers


def render(value: Any) -> str:
    """The compact JSON text of an answer (as llguidance emits it without free whitespace)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _values(schema: Any, path: str, most: int) -> list[Any]:
    """The values the (sub)schema at `path` allows, in order."""
    where = f" at `{path}`" if path else ""
    if not isinstance(schema, dict):
        raise _refuse(f"has a schema{where} that is not an object")
    keywords = set(schema) - ANNOTATIONS
    if "const" in schema:
        _only(keywords, {"const", "type"}, where)
        return _typed([schema["const"]], schema.get("type"), where)
    if "enum" in schema:
        _only(keywords, {"enum", "type"}, where)
        if not isinstance(schema["enum"], list) or not schema["enum"]:
            raise _refuse(f"has an `enum`{where} that is not a non-empty list")
        return _typed(schema["enum"], schema.get("type"), where)
    kind = schema.get("type")
    if kind == "boolean":
        _only(keywords, {"type"}, where)
        return [True, False]
    if kind == "null":
        _only(keywords, {"type"}, where)
        return [None]
    if kind == "object":
        return _object_values(schema, keywords, path, where, most)
    what = f"`type: {json.dumps(kind)}`" if kind is not None else "no `enum`, `const` or finite `type`"
    raise _refuse(
        f"allows infinitely many answers{where} ({what}); use an `enum`, a `const`, a boolean, "
        "or an object of those"
    )


def _object_values(schema: dict[str, Any], keywords: set[str], path: str, where: str, most: int) -> list[Any]:
    """An object's answers: the product of its properties' answers, keys in schema order."""
    _only(keywords, {"type", "properties", "required", "additionalProperties"}, where)
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise _refuse(f"has an object{where} without `properties`")
    if schema.get("additionalProperties") is not False:
        raise _refuse(f'has an object{where} without `"additionalProperties": false` (extra keys)')
    required = schema.get("required")
    if not isinstance(required, list) or set(required) != set(properties):
        raise _refuse(f"has an object{where} whose properties are not all `required` (optional keys)")
    names = list(properties)
    columns = [_values(properties[name], f"{path}.{name}" if path else name, most) for name in names]
    count = math.prod(len(column) for column in columns)
    if count > most:
        raise _refuse(f"has {count} answers{where}; the server scores at most {most}")
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*columns)]


def _typed(values: list[Any], kind: Any, where: str) -> list[Any]:
    """`enum`/`const` values: scalars only, and of the schema's `type` when it names one."""
    for value in values:
        if isinstance(value, dict | list):
            raise _refuse(f"lists an object or array value{where}; only scalar answers are enumerated")
        if isinstance(value, float) and not math.isfinite(value):
            raise _refuse(f"lists a non-finite number{where}")
    if kind is None:
        return values
    kept = [value for value in values if _has_type(value, kind)]
    if not kept:
        raise _refuse(f"allows no answer{where}: no listed value is of `type: {json.dumps(kind)}`")
    return kept


def _has_type(value: Any, kind: Any) -> bool:
    kinds = kind if isinstance(kind, list) else [kind]
    for name in kinds:
        if name in SCALAR_TYPES and type(value) is SCALAR_TYPES[name]:
            return True
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if name == "number" and is_number:
            return True
        if name == "integer" and is_number and float(value).is_integer():
            return True
    return False


def _only(keywords: set[str], allowed: set[str], where: str) -> None:
    extra = sorted(keywords - allowed)
    if extra:
        names = ", ".join(f"`{k}`" for k in extra)
        raise _refuse(f"uses {names}{where}, which this route does not enumerate")


def _check_distinct(answers: list[Answer]) -> None:
    """Answers must be distinct, and none the start of another (`1` and `10`): the scores of
    overlapping texts are not shares of one distribution."""
    texts = [answer.text for answer in answers]
    for i, text in enumerate(texts):
        for other in texts[i + 1 :]:
            if text == other:
                raise _refuse(f"lists the answer {text} twice")
            if other.startswith(text) or text.startswith(other):
                short, long = sorted((text, other), key=len)
                raise _refuse(
                    f"has answers {short} and {long}: the first is the start of the second, so their "
                    "scores overlap; give them as `candidates` with an ending"
                )


def _refuse(why: str) -> ApiError:
    return ApiError(f"`json_schema` {why}.", param=PARAM, code="unsupported")
