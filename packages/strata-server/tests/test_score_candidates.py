"""`/v1/score_candidates` over the fake engine: request checks, the reply's arithmetic, limits;
with `json_schema`, the answers scored as the same texts given as `candidates` would be, each
with its parsed `value`.

Model values are checked against the real engine in tests/integration/server/test_candidates.py; here
the fake's made-up values (`fake_value`) are the independent reference for the formatting.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from litestar.testing import TestClient

from strata_server import ServerSettings, create_app


@pytest.fixture
def api(make_engine) -> Iterator[TestClient]:
    app = create_app(make_engine(), ServerSettings(max_logprobs=5, max_n=8))
    with TestClient(app) as client:
        yield client


def fake(position: int, token_id: int) -> float:
    """The fake engine's value, rounded to float32 as the engine's rows are."""
    value = -math.inf if token_id == 0 else -0.5 - ((token_id * 7 + position) % 50) / 10
    return float(np.float32(value))


def test_values_sums_and_shares_follow_the_rows(api) -> None:
    prompt = "hello"  # the byte tokenizer: one id per byte, no BOS
    reply = api.post(
        "/v1/score_candidates",
        json={"prompt": prompt, "candidates": [" a", " bc", [98, 99]], "top_logprobs": 2},
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    expected_ids = [[32, 97], [32, 98, 99], [98, 99]]
    totals = []
    for candidate, ids in zip(body["candidates"], expected_ids, strict=True):
        assert candidate["token_ids"] == ids
        values = [fake(len(prompt) + j, t) for j, t in enumerate(ids)]
        assert candidate["token_logprobs"] == values
        assert candidate["logprob"] == math.fsum(values)
        assert all(len(top) == 2 for top in candidate["top_logprobs"])
        totals.append(math.fsum(values))
    log_z = math.log(math.fsum(math.exp(t) for t in totals))
    for candidate, total in zip(body["candidates"], totals, strict=True):
        assert candidate["normalized_logprob"] == pytest.approx(total - log_z, abs=1e-12)
    assert [c["text"] for c in body["candidates"]] == [" a", " bc", "bc"]
    assert body["usage"]["prompt_tokens"] == 3 * len(prompt) + 2 + 3 + 2


def test_an_impossible_candidate_has_probability_zero(api) -> None:
    body = api.post("/v1/score_candidates", json={"prompt": [5, 6], "candidates": [[0], [7]]}).json()
    impossible, possible = body["candidates"]
    assert impossible["logprob"] == -9999.0 and impossible["probability"] == 0.0
    assert possible["probability"] == 1.0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "candidates": ["a"] * 9}, "candidates"),  # --max-n 8
        ({"prompt": "x", "candidates": ["a"], "top_logprobs": 6}, "top_logprobs"),  # --max-logprobs 5
        ({"prompt": "x", "candidates": ["a"], "top_logprobs": -1}, "top_logprobs"),
        ({"prompt": "x", "candidates": [[300]]}, "candidates"),
        ({"prompt": [300], "candidates": ["a"]}, "prompt"),
        ({"prompt": "x" * 60, "candidates": ["y" * 10]}, "prompt"),  # the fake's context is 64
        ({"prompt": {"a": 1}, "candidates": ["a"]}, "prompt"),
        ({"prompt": "x", "candidates": "a"}, "candidates"),
    ],
)
def test_refusals_name_the_field(api, body, param) -> None:
    reply = api.post("/v1/score_candidates", json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


# ---------------------------------------------------------------- json_schema answers

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
