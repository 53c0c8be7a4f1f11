"""`/v1/score_candidates` with a finite `json_schema` on the real server and model.

References: the same route scoring the answers' texts as plain `candidates` (bit for bit),
and the structured-output path generating under the same schema (its outputs are answers).

Not asserted: that the most probable answer equals temperature-0 constrained generation. It
does not hold by construction: greedy decoding picks the best next token, not the best whole
answer (an answer with a likely first token and an unlikely rest loses to another), and the
constrained generator may spell an answer with other tokens than the text's own tokenization.
"""

from __future__ import annotations

import json
import math

import httpx
import jsonschema
import pytest

from strata_client import StrataClient

PROMPT = (
    "Ticket: my parcel never arrived and the tracking page has said 'pending' for nine days.\n"
    "Routing decision as JSON: "
)
ROUTE = {
    "type": "object",
    "properties": {
        "team": {"enum": ["billing", "shipping", "technical support"]},
        "urgent": {"type": "boolean"},
    },
    "required": ["team", "urgent"],
    "additionalProperties": False,
}
SCHEMAS = [ROUTE, {"enum": ["billing", "shipping", "technical support"]}, {"type": "boolean"}]


def post(server_url: str, path: str, body: dict) -> dict:
    reply = httpx.post(f"{server_url}{path}", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize("schema", SCHEMAS)
def test_answers_are_a_distribution_scored_as_plain_candidates(server_url: str, schema) -> None:
    answers = post(server_url, "/v1/score_candidates", {"prompt": PROMPT, "json_schema": schema})[
        "candidates"
    ]
    for answer in answers:
        assert json.loads(answer["text"]) == answer["value"]
        jsonschema.validate(answer["value"], schema)
    assert len({a["text"] for a in answers}) == len(answers)
    assert math.fsum(a["probability"] for a in answers) == pytest.approx(1.0, abs=1e-12)
    texts = [a["text"] for a in answers]
    plain = post(server_url, "/v1/score_candidates", {"prompt": PROMPT, "candidates": texts})["candidates"]
    for answer, candidate in zip(answers, plain, strict=True):
        assert answer["token_ids"] == candidate["token_ids"]
        assert answer["token_logprobs"] == candidate["token_logprobs"]  # bit for bit
        assert answer["logprob"] == candidate["logprob"]
        assert answer["probability"] == candidate["probability"]


def test_constrained_generation_only_produces_scored_answers(server_url: str) -> None:
    """Compact structured output under the schema yields exactly the texts scored; with the
    default free whitespace, the same values."""
    scored = post(server_url, "/v1/score_candidates", {"prompt": PROMPT, "json_schema": ROUTE})["candidates"]
    texts = {a["text"] for a in scored}
    compact = post(
        server_url,
        "/v1/completions",
        {
            "prompt": PROMPT,
            "max_tokens": 24,
            "temperature": 1.5,
            "seed": 11,
            "n": 8,
            "structured_outputs": {"json": ROUTE, "disable_any_whitespace": True},
        },
    )["choices"]
    assert {c["finish_reason"] for c in compact} == {"stop"}
    assert {c["text"] for c in compact} <= texts
    free = post(
        server_url,
        "/v1/completions",
        {"prompt": PROMPT, "max_tokens": 40, "temperature": 1.0, "seed": 5, "n": 4, "guided_json": ROUTE},
    )["choices"]
    values = [json.dumps(a["value"], sort_keys=True) for a in scored]
    for choice in free:
        if choice["finish_reason"] == "stop":
            assert json.dumps(json.loads(choice["text"]), sort_keys=True) in values


def test_strata_client_scores_a_schema(server_url: str) -> None:
    with StrataClient(base_url=server_url, timeout=120.0, max_retries=0) as client:
        scores = client.candidates.score(prompt=PROMPT, json_schema={"type": "boolean"})
    assert [c.value for c in scores.candidates] == [True, False]
    assert [c.text for c in scores.candidates] == ["true", "false"]
    assert math.fsum(scores.probabilities) == pytest.approx(1.0, abs=1e-12)
    assert scores.best.value in (True, False)


def test_a_schema_without_a_finite_answer_set_is_a_400_and_the_server_goes_on(server_url: str) -> None:
    reply = httpx.post(
        f"{server_url}/v1/score_candidates",
        json={
            "prompt": PROMPT,
            "json_schema": {"type": "object", "properties": {"note": {"type": "string"}}},
        },
        timeout=120,
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "json_schema" and "additionalProperties" in error["message"]
    assert post(server_url, "/v1/score_candidates", {"prompt": PROMPT, "json_schema": {"const": "yes"}})
