"""The typed-decision gateway on the real server and model, spoken to by the official SDK.

The gateway runs in-process on a free port in front of the `server_url` fixture's server.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import httpx
import pytest
from typesafe_sdk import (
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAuthenticationError,
    TypeSafeBadRequestError,
    TypeSafeClient,
    TypeSafeUnprocessableEntityError,
)

from strata_decide.gateway import GatewayConfig
from strata_decide.gateway.serve import background

STATE = (
    "Subject: charged twice\n\nHello, I ordered running shoes on Monday and my bank shows two "
    "identical charges of $89.99. Please refund the duplicate as soon as possible. Dana"
)
TONE = Choice(
    instructions="What is the tone of the message?",
    criteria={"calm": "Neutral or polite", "angry": "Upset or hostile", "excited": None},
)
URGENCY = Score(instructions="How urgent is it?", criteria=["Can wait", "This week", "Today"])
BILLING = Noul(instructions="Is the message about billing?", criteria={"true": "Payments or refunds"})
NO_RETRY = RetryPolicy(max_retries=0)


@pytest.fixture(scope="module")
def gateway(server_url: str) -> Iterator[str]:
    with background(GatewayConfig(upstream=server_url, upstream_timeout=300)) as url:
        yield url


@pytest.fixture(scope="module")
def served_model(server_url: str) -> str:
    return httpx.get(f"{server_url}/v1/models").json()["data"][0]["id"]


def sdk(url: str, api_key: str = "ignored-when-auth-is-off") -> TypeSafeClient:
    return TypeSafeClient(base_url=url, api_key=api_key, timeout=600, retry=NO_RETRY)


def raw(url: str, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/systemone", json=body, headers=headers, timeout=600)


def yes_no_body(state: str, instructions: str = "?", model: str = "jev-latest") -> dict:
    """A wire body asking one yes/no (`noul`) question about `state`."""
    return {
        "model": model,
        "state": state,
        "questions": {"q": {"type": "noul", "instructions": instructions}},
    }


def confidence_of_choice(p: list[float]) -> float:
    return (len(p) * max(p) - 1) / (len(p) - 1)


def confidence_of_score(p: list[float]) -> float:
    k, mode = len(p), max(range(len(p)), key=lambda i: p[i])
    d = sum(abs(i - (k - 1) / 2) for i in range(k)) / k
    return max(0.0, 1 - sum(pi * abs(i - mode) for i, pi in enumerate(p)) / d)


def test_every_question_type_through_the_sdk(gateway: str, served_model: str):
    with sdk(gateway) as client:
        result = client.system_one(STATE, {"tone": TONE, "urgency": URGENCY, "billing": BILLING})
    assert result.model == served_model
    tone, urgency, billing = (
        result.choices["tone"],
        result.scores["urgency"],
        result.nouls["billing"],
    )

    assert list(tone.probabilities) == ["calm", "angry", "excited"]
    assert math.fsum(tone.probabilities.values()) == pytest.approx(1.0, abs=1e-12)
    assert tone.choice == max(tone.probabilities, key=tone.probabilities.get)
    assert tone.confidence == pytest.approx(confidence_of_choice(list(tone.probabilities.values())))

    p = [urgency.probabilities[i] for i in range(3)]
    assert math.fsum(p) == pytest.approx(1.0, abs=1e-12)
    assert urgency.score == pytest.approx(sum(i * pi for i, pi in enumerate(p)), abs=1e-12)
    assert urgency.legend == {0: "Can wait", 1: "This week", 2: "Today"}
    assert urgency.confidence == pytest.approx(confidence_of_score(p))

    assert 0.0 <= billing.noul <= 1.0
    assert isinstance(result.usage.input_tokens, int) and result.usage.input_tokens > 0
    assert result.usage.output_tokens == 3
    extras = result.raw_http_response.json()["answers"]
    assert all(0 < extras[k]["x_label_mass"] <= 1 for k in ("tone", "urgency", "billing"))
    assert "confidence" not in extras["billing"]


def test_unknown_top_level_fields_from_the_sdk_are_ignored(gateway: str):
    """Fields a newer client adds at the top level (`extra_body`) change nothing."""
    with sdk(gateway) as client:
        plain = client.system_one(STATE, {"tone": TONE, "billing": BILLING})
        extended = client.system_one(
            STATE,
            {"tone": TONE, "billing": BILLING},
            extra_body={"x_trace": {"id": 7}, "temperature": 0.2, "stream": False},
        )
    assert extended.raw_http_response.json()["answers"] == plain.raw_http_response.json()["answers"]


def test_255_options_and_10_levels(gateway: str):
    names = [f"option {i}" for i in range(255)]
    many = Choice(instructions="Which option number is lucky?", criteria={n: None for n in names})
    levels = Score(instructions="Rate it.", criteria=[f"level {i}" for i in range(10)])
    with sdk(gateway) as client:
        result = client.system_one(STATE, {"many": many, "levels": levels})
    probabilities = result.choices["many"].probabilities
    assert list(probabilities) == names
    assert math.fsum(probabilities.values()) == pytest.approx(1.0, abs=1e-12)
    assert sorted(result.scores["levels"].probabilities) == list(range(10))
    assert result.scores["levels"].legend[9] == "level 9"


def test_unicode_option_names_round_trip_byte_for_byte(gateway: str):
    names = ["café", "日本語", "emoji 😀", "e\u0301", "Ω"]
    body = {
        "model": "jev-latest",
        "state": STATE,
        "questions": {"q": {"type": "choice", "criteria": {n: None for n in names}}},
    }
    response = raw(gateway, body)
    assert response.status_code == 200
    assert list(response.json()["answers"]["q"]["probabilities"]) == names
    for name in names:
        assert json.dumps(name, ensure_ascii=False).encode() in response.content


def test_answers_are_bit_identical_whatever_the_ids_order_and_company(gateway: str):
    tone, urgency, billing = (q.model_dump(mode="json") for q in (TONE, URGENCY, BILLING))
    alone = raw(gateway, {"model": "jev-latest", "state": STATE, "questions": {"tone": tone}})
    crowded = raw(
        gateway,
        {
            "model": "jev-latest",
            "state": STATE,
            "questions": {
                "billing": billing,
                "another name": tone,
                "urgency": urgency,
                "dup": tone,
            },
        },
    )
    reordered = raw(
        gateway,
        {"model": "jev-latest", "state": STATE, "questions": {"urgency": urgency, "x": tone}},
    )
    a = alone.json()["answers"]["tone"]
    assert crowded.json()["answers"]["another name"] == a
    assert crowded.json()["answers"]["dup"] == a
    assert reordered.json()["answers"]["x"] == a
    assert reordered.json()["answers"]["urgency"] == crowded.json()["answers"]["urgency"]


def test_json_state_is_read_as_its_json_text(gateway: str):
    state = {"subject": "charged twice", "amounts": [89.99, 89.99]}
    tone = TONE.model_dump(mode="json")
    as_object = raw(gateway, {"model": "jev-latest", "state": state, "questions": {"t": tone}})
    as_text = raw(
        gateway,
        {
            "model": "jev-latest",
            "state": json.dumps(state, ensure_ascii=False),
            "questions": {"t": tone},
        },
    )
    assert as_object.status_code == 200
    assert as_object.json()["answers"] == as_text.json()["answers"]


def test_models_through_the_sdk(gateway: str, served_model: str):
    with sdk(gateway) as client:
        names = [m.name for m in client.models.list().models]
    assert names[0] == served_model and "jev-latest" in names


@pytest.mark.parametrize(
    "question",
    [
        {"type": "choice", "criteria": {"only one": None}},
        {"type": "score", "criteria": [f"l{i}" for i in range(11)]},
        {"type": "noul", "instructions": "?", "criteria": {"maybe": "x"}},
        {"type": "choice", "criteria": {"a": 1, "b": None}},
        {"type": "box", "instructions": "the dog"},
    ],
)
def test_invalid_questions_get_422_with_items_and_the_sdk_raises(gateway: str, question: dict):
    response = raw(gateway, {"model": "jev-latest", "state": STATE, "questions": {"q": question}})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail and all(set(item) == {"type", "loc", "msg", "input"} for item in detail)
    assert all(item["loc"][:3] == ["body", "questions", "q"] for item in detail)
    with sdk(gateway) as client, pytest.raises(TypeSafeUnprocessableEntityError):
        client.system_one(STATE, {"q": question})


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"model": "jev-latest", "state": 3, "questions": {}}',
        b'{"model": "jev-latest", "state": null, "questions": {"q": {"type": "noul", "instructions": "?"}}}',
        b"[]",
        b'{"model": 1}',
    ],
)
def test_malformed_bodies_get_422_and_the_next_request_works(gateway: str, body: bytes):
    response = httpx.post(
        f"{gateway}/v1/systemone",
        content=body,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], list)
    good = raw(
        gateway,
        yes_no_body("hi", "Is it a greeting?"),
    )
    assert good.status_code == 200


def test_unknown_model_is_refused_with_the_refusal_shape(gateway: str):
    response = raw(
        gateway,
        yes_no_body("x", model="gpt-4o"),
    )
    assert response.status_code == 404
    assert set(response.json()["detail"]) == {"error_type", "message"}


def test_input_over_the_context_is_400_tokens_exceeded(gateway: str, server_url: str):
    limit = httpx.post(f"{server_url}/tokenize", json={"prompt": "x"}).json()["max_model_len"]
    state = "lorem ipsum " * limit  # well over the context in tokens
    response = raw(
        gateway,
        yes_no_body(state, "Is it Latin?"),
    )
    assert response.status_code == 400
    assert response.json()["detail"]["error_type"] == "tokens_exceeded"
    with sdk(gateway) as client, pytest.raises(TypeSafeBadRequestError):
        client.system_one(state, {"q": BILLING})


def test_bearer_auth_when_a_key_is_set(server_url: str):
    with background(GatewayConfig(upstream=server_url, api_key="s3cret", upstream_timeout=300)) as url:
        with sdk(url, api_key="wrong") as client, pytest.raises(TypeSafeAuthenticationError):
            client.system_one(STATE, {"b": BILLING})
        with sdk(url, api_key="s3cret") as client:
            assert 0 <= client.system_one(STATE, {"b": BILLING}).nouls["b"].noul <= 1


def test_upstream_down_is_a_quick_502():
    with background(GatewayConfig(upstream="http://127.0.0.1:9", upstream_timeout=5)) as url:
        response = raw(
            url,
            yes_no_body("x"),
        )
    assert response.status_code == 502
    assert response.json()["detail"]["error_type"] == "upstream_error"
