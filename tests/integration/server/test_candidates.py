"""`POST /v1/score_candidates` on the real server and model, over HTTP.

The reference for every value is the server's other route: `/v1/completions` echoing
`prompt + candidate` alone (`max_tokens: 0`, `echo`, `logprobs`), whose prompt token values
must be the candidate's values bit for bit (JSON floats round-trip exactly).

With a finite `json_schema`: the same route scoring the answers' texts as plain `candidates`
(bit for bit), and the structured-output path generating under the same schema (its outputs
are answers). Not asserted: that the most probable answer equals temperature-0 constrained
generation. It does not hold by construction: greedy decoding picks the best next token, not
the best whole answer (an answer with a likely first token and an unlikely rest loses to
another), and the constrained generator may spell an answer with other tokens than the text's
own tokenization.
"""

from __future__ import annotations

import json
import math
import uuid

import httpx
import jsonschema
import pytest

from strata_client import StrataClient

WORDS = [" billing", " shipping", " technical support"]


def prompt_text() -> str:
    """A prompt no earlier request has cached (its first candidate computes it)."""
    return (
        f"Ticket {uuid.uuid4().hex[:8]}. The customer wrote: my parcel never arrived and the "
        "tracking page has said 'pending' for nine days. The team that should handle this is"
    )


def tokenize(server_url: str, text: str) -> list[int]:
    return httpx.post(f"{server_url}/tokenize", json={"prompt": text}).json()["tokens"]


def score(server_url: str, **body) -> httpx.Response:
    return httpx.post(f"{server_url}/v1/score_candidates", json=body, timeout=120)


def echo_values(server_url: str, ids: list[int]) -> list[float]:
    """The prompt token values of echoing `ids` alone on /v1/completions (None at position 0)."""
    reply = httpx.post(
        f"{server_url}/v1/completions",
        json={"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["logprobs"]["token_logprobs"]


def test_each_candidate_equals_echoing_it_alone(server_url: str) -> None:
    text = prompt_text()
    prompt_ids = tokenize(server_url, text)
    reply = score(server_url, prompt=text, candidates=WORDS)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "candidate_scores"
    assert [c["text"] for c in body["candidates"]] == WORDS
    assert any(len(c["token_ids"]) > 1 for c in body["candidates"])
    for candidate in body["candidates"]:
        ids = candidate["token_ids"]
        assert prompt_ids + ids == tokenize(server_url, text + candidate["text"])  # continuation rule
        expected = echo_values(server_url, prompt_ids + ids)[len(prompt_ids) :]
        assert candidate["token_logprobs"] == expected  # bit for bit
        assert candidate["logprob"] == pytest.approx(sum(expected), abs=1e-12)


def test_the_prompt_is_computed_once(server_url: str) -> None:
    text = prompt_text()
    prompt_ids = tokenize(server_url, text)
    body = score(server_url, prompt=text, candidates=WORDS).json()
    shared = (len(prompt_ids) - 1) // 16 * 16
    assert shared > 0
    assert [c["cached_tokens"] for c in body["candidates"]] == [0] + [shared] * (len(WORDS) - 1)
    usage = body["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == shared * (len(WORDS) - 1)
    assert usage["prompt_tokens"] == sum(len(prompt_ids) + len(c["token_ids"]) for c in body["candidates"])


def test_renormalised_values_are_a_distribution_over_the_candidates(server_url: str) -> None:
    body = score(server_url, prompt=prompt_text(), candidates=WORDS, top_logprobs=3).json()
    totals = [c["logprob"] for c in body["candidates"]]
    log_z = math.log(math.fsum(math.exp(t) for t in totals))
    for candidate, total in zip(body["candidates"], totals, strict=True):
        assert candidate["normalized_logprob"] == pytest.approx(total - log_z, abs=1e-12)
        assert candidate["probability"] == pytest.approx(math.exp(total - log_z), rel=1e-12)
        for value, top in zip(candidate["token_logprobs"], candidate["top_logprobs"], strict=True):
            assert len(top) == 3 and value <= max(top.values())
    assert math.fsum(c["probability"] for c in body["candidates"]) == pytest.approx(1.0, abs=1e-12)


def test_token_id_prompt_and_candidates(server_url: str) -> None:
    """Ids are used as given; text after an id prompt is the candidate tokenized alone."""
    prompt_ids = tokenize(server_url, prompt_text())
    alone = httpx.post(
        f"{server_url}/tokenize", json={"prompt": "shipping", "add_special_tokens": False}
    ).json()["tokens"]
    body = score(server_url, prompt=prompt_ids, candidates=["shipping", alone]).json()
    first, second = body["candidates"]
    assert first["token_ids"] == second["token_ids"] == alone
    assert first["token_logprobs"] == second["token_logprobs"]
    assert first["token_logprobs"] == echo_values(server_url, prompt_ids + alone)[len(prompt_ids) :]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x"}, "candidates"),
        ({"candidates": ["a"]}, "prompt"),
        ({"prompt": "x", "candidates": []}, "candidates"),
        ({"prompt": "x", "candidates": [""]}, "candidates"),
        ({"prompt": "x", "candidates": [[]]}, "candidates"),
        ({"prompt": "x", "candidates": [[10**9]]}, "candidates"),
        ({"prompt": "x", "candidates": [3]}, "candidates"),
        ({"prompt": "", "candidates": ["a"]}, "prompt"),
        ({"prompt": [], "candidates": ["a"]}, "prompt"),
        ({"prompt": [-1], "candidates": ["a"]}, "prompt"),
        ({"prompt": "x", "candidates": ["a"], "top_logprobs": 10**6}, "top_logprobs"),
        ({"prompt": "x", "candidates": ["a"], "model": "nope"}, "model"),
        ({"prompt": "x", "candidates": ["a"] * 10_000}, "candidates"),
        ({"prompt": "word " * 9000, "candidates": ["a"]}, "prompt"),
    ],
)
def test_bad_bodies_are_4xx_and_the_next_request_is_served(server_url: str, body, param) -> None:
    reply = score(server_url, **body)
    assert 400 <= reply.status_code < 500, reply.text
    assert reply.json()["error"]["param"] == param
    good = score(server_url, prompt="The sky is", candidates=[" blue", " green"])
    assert good.status_code == 200, good.text


# ---------------------------------------------------------------- json_schema answers

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
