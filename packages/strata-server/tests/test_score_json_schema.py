"""`/v1/score_candidates` with `json_schema` over the fake engine: the answers are scored as
the same texts given as `candidates` would be, each with its parsed `value`; refusals are 400s.

Model values are checked against the real engine in tests/integration/server/test_candidates_schema.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from litestar.testing import TestClient

from strata_server import ServerSettings, create_app

SCHEMA = {
    "type": "object",
    "properties": {"team": {"enum": ["billing", "shipping"]}, "urgent": {"type": "boolean"}},
    "required": ["team", "urgent"],
    "additionalProperties": False,
}
TEXTS = [
    '{"team":"billing","urgent":true}',
    '{"team":"billing","urgent":false}',
    '{"team":"shipping","urgent":true}',
    '{"team":"shipping","urgent":false}',
]


@pytest.fixture
def api(make_engine) -> Iterator[TestClient]:
    app = create_app(make_engine(), ServerSettings(max_logprobs=5, max_n=8))
    with TestClient(app) as client:
        yield client


def test_answers_score_as_their_texts_and_carry_their_values(api) -> None:
    by_schema = api.post("/v1/score_candidates", json={"prompt": "Route: ", "json_schema": SCHEMA})
    by_text = api.post("/v1/score_candidates", json={"prompt": "Route: ", "candidates": TEXTS})
    assert by_schema.status_code == by_text.status_code == 200, by_schema.text
    answers = by_schema.json()["candidates"]
    plain = by_text.json()["candidates"]
    assert [a["value"] for a in answers] == [
        {"team": t, "urgent": u} for t in ("billing", "shipping") for u in (True, False)
    ]
    assert all("value" not in c for c in plain)  # only schema answers carry a value
    for answer, candidate in zip(answers, plain, strict=True):
        answer.pop("value")
        assert answer == candidate


def test_a_null_answer_has_a_null_value(api) -> None:
    reply = api.post("/v1/score_candidates", json={"prompt": "x", "json_schema": {"enum": [None, "a"]}})
    assert reply.status_code == 200, reply.text
    assert [(c["text"], c["value"]) for c in reply.json()["candidates"]] == [("null", None), ('"a"', "a")]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x"}, "candidates"),
        ({"prompt": "x", "candidates": ["a"], "json_schema": {"enum": ["a"]}}, "json_schema"),
        ({"prompt": "x", "json_schema": {"type": "string"}}, "json_schema"),
        ({"prompt": "x", "json_schema": {"type": "bogus"}}, "json_schema"),
        ({"prompt": "x", "json_schema": "not a schema"}, "json_schema"),
        ({"prompt": "x", "json_schema": {"enum": list(range(9))}}, "json_schema"),  # max_n 8
    ],
)
def test_refusals_are_400s_naming_the_field_and_the_next_request_is_served(api, body, param) -> None:
    reply = api.post("/v1/score_candidates", json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
    after = api.post("/v1/score_candidates", json={"prompt": "x", "json_schema": {"type": "boolean"}})
    assert after.status_code == 200
    assert [c["value"] for c in after.json()["candidates"]] == [True, False]
