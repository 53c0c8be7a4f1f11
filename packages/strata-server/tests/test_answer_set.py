"""The finite answer set of a JSON schema (`answer_set.finite_answers`): each schema kind,
the texts scored, and the 400s for schemas without a finite list.

References are independent of the code: expected values written out by hand from the schema's
meaning, texts parsed back with `json.loads`, every answer validated with `jsonschema`.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest

from strata_server.answer_set import finite_answers
from strata_server.errors import ApiError

MOST = 128
TEAMS = {"enum": ["billing", "shipping", "technical support"]}
OBJECT = {
    "type": "object",
    "properties": {"team": TEAMS, "urgent": {"type": "boolean"}, "tier": {"const": 2}},
    "required": ["urgent", "team", "tier"],
    "additionalProperties": False,
}


def values(schema: Any, most: int = MOST) -> list[Any]:
    answers = finite_answers(schema, most)
    for answer in answers:
        assert json.loads(answer.text) == answer.value  # the text is the value's JSON
        assert ", " not in answer.text and ": " not in answer.text  # compact
        jsonschema.validate(answer.value, schema)
    return [answer.value for answer in answers]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (TEAMS, ["billing", "shipping", "technical support"]),
        ({"enum": ["a", 1, 2.5, True, None]}, ["a", 1, 2.5, True, None]),
        ({"type": "string", "enum": ["a", 1, "b"]}, ["a", "b"]),
        ({"type": ["integer", "null"], "enum": [1, "x", None, 2.5]}, [1, None]),
        ({"const": "yes", "title": "t", "description": "d"}, ["yes"]),
        ({"type": "boolean"}, [True, False]),
        ({"type": "null"}, [None]),
        ({"enum": ["café", "naïve"]}, ["café", "naïve"]),
    ],
)
def test_scalar_answer_sets(schema, expected) -> None:
    got = values(schema)
    assert got == expected
    assert [type(v) for v in got] == [type(v) for v in expected]  # True is not 1


def test_non_ascii_is_kept_as_is() -> None:
    assert [a.text for a in finite_answers({"enum": ["café"]}, MOST)] == ['"café"']


def test_an_object_is_the_product_of_its_properties_in_schema_order() -> None:
    got = values(OBJECT)
    expected = [
        {"team": team, "urgent": urgent, "tier": 2}
        for team, urgent in itertools.product(TEAMS["enum"], [True, False])
    ]
    assert got == expected
    assert [list(v) for v in got] == [["team", "urgent", "tier"]] * 6  # key order of `properties`
    assert finite_answers(OBJECT, MOST)[0].text == '{"team":"billing","urgent":true,"tier":2}'


def test_nested_objects_are_enumerated() -> None:
    schema = {
        "type": "object",
        "properties": {"route": OBJECT, "ok": {"type": "boolean"}},
        "required": ["route", "ok"],
        "additionalProperties": False,
    }
    got = values(schema)
    assert len(got) == 12
    assert {json.dumps(v, sort_keys=True) for v in got} == {
        json.dumps({"route": r, "ok": ok}, sort_keys=True) for r in values(OBJECT) for ok in (True, False)
    }


def test_the_count_is_capped() -> None:
    wide = {
        "type": "object",
        "properties": {f"p{i}": {"type": "boolean"} for i in range(8)},
        "required": [f"p{i}" for i in range(8)],
        "additionalProperties": False,
    }
    assert len(values(wide, most=256)) == 256
    with pytest.raises(ApiError, match=r"256 answers.*at most 255"):
        finite_answers(wide, 255)
    with pytest.raises(ApiError, match=r"3 answers.*at most 2"):
        finite_answers(TEAMS, 2)


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "string"}, "infinitely many"),
        ({"type": "number", "minimum": 0, "maximum": 1}, "infinitely many"),
        ({"type": "integer"}, "infinitely many"),
        ({"type": "array", "items": TEAMS, "maxItems": 1}, "infinitely many"),
        ({}, "infinitely many"),
        (True, "JSON Schema object"),
        ({"type": "object", "properties": {"a": TEAMS}, "required": ["a"]}, "additionalProperties"),
        (
            {
                "type": "object",
                "properties": {"a": TEAMS, "b": TEAMS},
                "required": ["a"],
                "additionalProperties": False,
            },
            "not all `required`",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a"],
                "additionalProperties": False,
            },
            "at `a`",
        ),
        ({"type": "object", "additionalProperties": False}, "without `properties`"),
        ({"enum": [[1], [2]]}, "object or array"),
        ({"enum": ["a", "b"], "minLength": 1}, "`minLength`"),
        ({"anyOf": [TEAMS, {"type": "boolean"}]}, "infinitely many|`anyOf`"),
        ({"enum": [1, 10]}, "start of the second"),
        ({"enum": ["a", "a"]}, "twice"),
    ],
)
def test_schemas_without_a_finite_list_are_refused(schema, why) -> None:
    with pytest.raises(ApiError, match=why) as refused:
        finite_answers(schema, MOST)
    assert refused.value.status == 400 and refused.value.param == "json_schema"
    assert refused.value.message.startswith("`json_schema`")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "#/nope"}}},
        {"enum": []},
        {"type": "string", "enum": [1, 2]},
    ],
)
def test_a_schema_the_structured_output_path_rejects_is_invalid(schema) -> None:
    with pytest.raises(ApiError) as refused:
        finite_answers(schema, MOST)
    assert refused.value.param == "json_schema" and refused.value.code == "invalid_structured_output"
