"""``client.candidates.score``: the body sent, the typed reply, errors (sync and async)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from strata_client import AsyncStrataClient, BadRequestError, CandidateScores

MODEL = "SmolLM2-135M-Instruct"


def reply_body() -> dict[str, Any]:
    """Shaped like Strata's answer for " billing" / " shipping" / " technical support"."""
    totals = [-9.590997695922852, -6.456639289855957, -15.941283702850342]
    log_z = math.log(math.fsum(math.exp(t) for t in totals))
    tokens = [[38971], [12497], [5289, 1199]]
    values = [[totals[0]], [totals[1]], [-11.908156394958496, -4.033127307891846]]
    return {
        "id": "score-1",
        "object": "candidate_scores",
        "created": 1796049805,
        "model": MODEL,
        "candidates": [
            {
                "index": i,
                "text": text,
                "token_ids": tokens[i],
                "tokens": [f"token_id:{t}" for t in tokens[i]],
                "token_logprobs": values[i],
                "top_logprobs": None,
                "logprob": totals[i],
                "normalized_logprob": totals[i] - log_z,
                "probability": math.exp(totals[i] - log_z),
                "cached_tokens": 0 if i == 0 else 32,
            }
            for i, text in enumerate([" billing", " shipping", " technical support"])
        ],
        "usage": {
            "prompt_tokens": 112,
            "completion_tokens": 0,
            "total_tokens": 112,
            "prompt_tokens_details": {"cached_tokens": 64},
        },
    }


def test_score_sends_the_wire_fields_and_parses_the_reply(client, mock) -> None:
    route = mock.post("/v1/score_candidates").respond(200, json=reply_body())
    scores = client.candidates.score(
        model=MODEL,
        prompt="The team that should handle this is",
        candidates=[" billing", " shipping", [5289, 1199]],
        return_tokens_as_token_ids=True,
    )
    sent = json.loads(route.calls.last.request.content)
    assert sent == {
        "model": MODEL,
        "prompt": "The team that should handle this is",
        "candidates": [" billing", " shipping", [5289, 1199]],
        "return_tokens_as_token_ids": True,
    }
    assert isinstance(scores, CandidateScores)
    assert scores.best.text == " shipping"
    assert scores.candidates[2].token_ids == [5289, 1199]
    assert scores.probabilities == [c["probability"] for c in reply_body()["candidates"]]
    assert scores.usage is not None and scores.usage.prompt_tokens_details is not None
    assert scores.usage.prompt_tokens_details.cached_tokens == 64


def test_a_refusal_is_a_typed_error(client, mock) -> None:
    error = {
        "error": {
            "message": "`candidates` must hold between 1 and 128 entries, got 0.",
            "type": "invalid_request_error",
            "param": "candidates",
            "code": None,
        }
    }
    mock.post("/v1/score_candidates").respond(400, json=error)
    with pytest.raises(BadRequestError) as raised:
        client.candidates.score(model=MODEL, prompt="x", candidates=[])
    assert raised.value.param == "candidates"


@pytest.mark.asyncio
async def test_async_score_looks_up_the_model_and_parses(base_url, mock, models_body) -> None:
    mock.get("/v1/models").respond(200, json=models_body)
    route = mock.post("/v1/score_candidates").respond(200, json=reply_body())
    async with AsyncStrataClient(base_url=base_url, max_retries=0) as aclient:
        scores = await aclient.candidates.score(prompt=[1, 2, 3], candidates=["a", "b"], top_logprobs=2)
    sent = json.loads(route.calls.last.request.content)
    assert sent["model"] == models_body["data"][0]["id"]
    assert sent["top_logprobs"] == 2 and sent["prompt"] == [1, 2, 3]
    assert [c.index for c in scores.candidates] == [0, 1, 2]


def test_score_a_json_schema_sends_it_instead_of_candidates(client, mock) -> None:
    answers = reply_body()
    for candidate, (text, value) in zip(
        answers["candidates"], [('"billing"', "billing"), ("null", None), ("true", True)], strict=True
    ):
        candidate["text"], candidate["value"] = text, value
    route = mock.post("/v1/score_candidates").respond(200, json=answers)
    schema = {"enum": ["billing", None, True]}
    scores = client.candidates.score(model=MODEL, prompt="Team:", json_schema=schema)
    assert json.loads(route.calls.last.request.content) == {
        "model": MODEL,
        "prompt": "Team:",
        "json_schema": schema,
    }
    assert [c.value for c in scores.candidates] == ["billing", None, True]
    assert scores.best.value is None
