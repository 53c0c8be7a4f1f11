"""The gateway's contract on a fake upstream: answer shapes, formulas, errors, auth."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from litestar.testing import TestClient

from strata_decide.gateway import GatewayConfig, create_app

STATE = "I was charged twice. Please help."
QUESTIONS = {
    "tone": {
        "type": "choice",
        "instructions": "Tone?",
        "criteria": {"calm": None, "angry": "upset"},
    },
    "urgency": {
        "type": "score",
        "instructions": "How urgent?",
        "criteria": ["low", {"level": "mid"}, ["high"]],
    },
    "billing": {"type": "noul", "instructions": "Is this about billing?"},
}


@pytest.fixture
def gateway(fake):
    with TestClient(create_app(GatewayConfig(upstream=fake.url))) as client:
        yield client


def post(client, body, **kwargs):
    return client.post("/v1/systemone", json=body, **kwargs)


def test_every_question_type_answers_in_the_documented_shape(fake, gateway):
    fake.preference = {
        "calm": 0.0,
        "angry: upset": 1.0,
        "low": 0.0,
        '{"level": "mid"}': 2.0,
        '["high"]': 1.0,
    }
    response = post(gateway, {"model": "jev-latest", "state": STATE, "questions": QUESTIONS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "fake-model"
    tone, urgency, billing = (body["answers"][k] for k in ("tone", "urgency", "billing"))

    p = [1 / (1 + math.e), math.e / (1 + math.e)]
    assert tone["type"] == "choice" and tone["choice"] == "angry"
    assert tone["probabilities"] == pytest.approx({"calm": p[0], "angry": p[1]})
    assert tone["confidence"] == pytest.approx(2 * p[1] - 1)
    assert tone["x_label_mass"] == pytest.approx(0.8)

    z = 1 + math.e**2 + math.e
    q = [1 / z, math.e**2 / z, math.e / z]
    assert urgency["legend"] == {"0": "low", "1": {"level": "mid"}, "2": ["high"]}
    assert urgency["probabilities"] == pytest.approx({"0": q[0], "1": q[1], "2": q[2]})
    assert urgency["score"] == pytest.approx(q[1] + 2 * q[2])
    d = (1 + 0 + 1) / 3
    assert urgency["confidence"] == pytest.approx(1 - (q[0] + q[2]) / d)

    assert set(billing) == {"type", "noul", "x_label_mass"}
    assert billing["noul"] == pytest.approx(0.5)  # the fake prefers neither Yes nor No
    assert body["usage"]["output_tokens"] == 3
    assert isinstance(body["usage"]["input_tokens"], int) and body["usage"]["input_tokens"] > 0


def test_unicode_option_names_come_back_byte_for_byte(gateway):
    names = ["café", "日本語", "😀 emoji", "e\u0301"]  # the last one is not NFC-normalised
    question = {"type": "choice", "criteria": {name: None for name in names}}
    response = post(gateway, {"model": "jev-latest", "state": "x", "questions": {"q": question}})
    answer = response.json()["answers"]["q"]
    assert list(answer["probabilities"]) == names
    assert "e\u0301".encode() in response.content


def test_answers_do_not_depend_on_ids_order_or_other_questions(fake, gateway):
    fake.preference = {"calm": 0.3, "angry: upset": 0.1}
    alone = post(gateway, {"model": "jev", "state": STATE, "questions": {"a": QUESTIONS["tone"]}})
    crowd = {"zzz": QUESTIONS["billing"], "other id": QUESTIONS["tone"], "u": QUESTIONS["urgency"]}
    together = post(gateway, {"model": "jev", "state": STATE, "questions": crowd})
    assert alone.json()["answers"]["a"] == together.json()["answers"]["other id"]


def test_models_lists_the_served_model_and_aliases(gateway):
    body = gateway.get("/v1/models").json()
    names = [m["name"] for m in body["models"]]
    assert names[0] == "fake-model" and "jev-latest" in names
    assert all(set(m) == {"name", "description", "release_date"} for m in body["models"])


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"state": "x", "questions": {"q": QUESTIONS["billing"]}}, ["body", "model"]),
        (
            {"model": "jev", "state": 5, "questions": {"q": QUESTIONS["billing"]}},
            ["body", "state", "str"],
        ),
        ({"model": "jev", "state": "x", "questions": {}}, ["body", "questions"]),
        (
            {
                "model": "jev",
                "state": "x",
                "questions": {"q": {"type": "choice", "criteria": {"a": None}}},
            },
            ["body", "questions", "q", "choice", "criteria"],
        ),
        (
            {
                "model": "jev",
                "state": "x",
                "questions": {"q": {"type": "score", "criteria": list("abcdefghijk")}},
            },
            ["body", "questions", "q", "score", "criteria"],
        ),
        (
            {
                "model": "jev",
                "state": "x",
                "questions": {"q": {"type": "noul", "criteria": {"maybe": "?"}}},
            },
            ["body", "questions", "q", "noul", "criteria", "maybe"],
        ),
        (
            {"model": "jev", "state": "x", "questions": {"q": {"type": "box"}}},
            ["body", "questions", "q"],
        ),
        (
            {"model": "jev", "state": "x", "questions": {"q": {**QUESTIONS["billing"], "extra": 1}}},
            ["body", "questions", "q", "noul", "extra"],
        ),
    ],
)
def test_validation_failures_are_422_with_type_loc_msg_input(gateway, body, loc):
    response = post(gateway, body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail
    assert all(set(item) == {"type", "loc", "msg", "input"} for item in detail)
    assert loc in [item["loc"] for item in detail]


def test_unknown_top_level_fields_are_ignored(gateway):
    """The API ignores top-level fields it does not know; the answers are the same."""
    body = {"model": "jev-latest", "state": STATE, "questions": QUESTIONS}
    plain = post(gateway, body)
    extended = post(gateway, {**body, "stream": False, "x_trace": {"id": 7}, "temperature": 0.3})
    assert plain.status_code == extended.status_code == 200, extended.text
    assert extended.json()["answers"] == plain.json()["answers"]


def test_choice_with_256_options_is_refused_and_255_accepted(gateway):
    def ask(n):
        question = {"type": "choice", "criteria": {f"o{i}": None for i in range(n)}}
        return post(gateway, {"model": "jev", "state": "x", "questions": {"q": question}})

    assert ask(256).status_code == 422
    ok = ask(255)
    assert ok.status_code == 200
    assert len(ok.json()["answers"]["q"]["probabilities"]) == 255


def test_malformed_json_is_422_and_the_next_request_still_works(gateway):
    response = gateway.post(
        "/v1/systemone",
        content=b'{"model": "jev", "state": ',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"
    good = post(gateway, {"model": "jev", "state": "x", "questions": {"q": QUESTIONS["billing"]}})
    assert good.status_code == 200


def test_unknown_model_is_a_404_refusal(gateway):
    response = post(gateway, {"model": "gpt-4", "state": "x", "questions": {"q": QUESTIONS["billing"]}})
    assert response.status_code == 404
    assert response.json() == {
        "detail": {"error_type": "model_not_found", "message": response.json()["detail"]["message"]}
    }


def test_input_over_the_context_is_400_tokens_exceeded(fake, gateway):
    fake.max_model_len = 300
    response = post(
        gateway, {"model": "jev", "state": "word " * 200, "questions": {"q": QUESTIONS["billing"]}}
    )
    assert response.status_code == 400
    assert response.json()["detail"]["error_type"] == "tokens_exceeded"


def test_upstream_failure_is_a_502_upstream_error(fake, gateway):
    fake.fail_completions_with = 500
    response = post(gateway, {"model": "jev", "state": "x", "questions": {"q": QUESTIONS["billing"]}})
    assert response.status_code == 502
    assert response.json()["detail"]["error_type"] == "upstream_error"


def test_unreachable_upstream_is_a_502_without_hanging():
    config = GatewayConfig(upstream="http://127.0.0.1:9", upstream_timeout=2.0)
    with TestClient(create_app(config)) as client:
        response = post(client, {"model": "jev", "state": "x", "questions": {"q": QUESTIONS["billing"]}})
    assert response.status_code == 502
    assert response.json()["detail"]["error_type"] == "upstream_error"


def test_bearer_auth_when_a_key_is_set(fake):
    body = {"model": "jev", "state": "x", "questions": {"q": QUESTIONS["billing"]}}
    with TestClient(create_app(GatewayConfig(upstream=fake.url, api_key="sekret"))) as client:
        missing = post(client, body)
        wrong = post(client, body, headers={"Authorization": "Bearer nope"})
        right = post(client, body, headers={"Authorization": "Bearer sekret"})
        odd = client.post(
            "/v1/systemone", json=body, headers={"Authorization": "Bearer s\xe9kret".encode("latin-1")}
        )
        models = client.get("/v1/models")
    assert missing.status_code == wrong.status_code == models.status_code == odd.status_code == 401
    assert missing.json()["detail"]["error_type"] == "authentication_error"
    assert right.status_code == 200


def test_authorization_is_ignored_when_auth_is_off(gateway):
    body = {"model": "jev", "state": "x", "questions": {"q": QUESTIONS["billing"]}}
    assert post(gateway, body, headers={"Authorization": "Bearer anything"}).status_code == 200


def test_gzip_body_is_read_and_unknown_encodings_refused(gateway):
    raw = json.dumps({"model": "jev", "state": "x", "questions": {"q": QUESTIONS["billing"]}}).encode()
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    assert gateway.post("/v1/systemone", content=gzip.compress(raw), headers=headers).status_code == 200
    headers["content-encoding"] = "br"
    refused = gateway.post("/v1/systemone", content=raw, headers=headers)
    assert refused.status_code == 415
    assert refused.json()["detail"]["error_type"] == "unsupported_encoding"
    headers["content-encoding"] = "gzip"
    corrupt = gateway.post("/v1/systemone", content=b"not gzip", headers=headers)
    assert corrupt.status_code == 400


def test_unknown_route_and_method_use_the_refusal_shape(gateway):
    missing = gateway.get("/v1/nothing")
    assert missing.status_code == 404 and missing.json()["detail"]["error_type"] == "not_found"
    wrong = gateway.get("/v1/systemone")
    assert wrong.status_code == 405 and set(wrong.json()["detail"]) == {"error_type", "message"}


def test_zstd_body_is_read_when_zstd_is_available(gateway):
    zstd = pytest.importorskip("backports.zstd")
    raw = json.dumps({"model": "jev", "state": "x", "questions": {"q": QUESTIONS["billing"]}}).encode()
    headers = {"content-type": "application/json", "content-encoding": "zstd"}
    assert gateway.post("/v1/systemone", content=zstd.compress(raw), headers=headers).status_code == 200


def test_every_configured_key_is_accepted(fake):
    body = {"model": "jev", "state": "x", "questions": {"q": QUESTIONS["billing"]}}
    config = GatewayConfig(upstream=fake.url, api_key="one", api_keys=("two", "three"))
    with TestClient(create_app(config)) as client:
        for key in ("one", "two", "three"):
            assert post(client, body, headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert post(client, body, headers={"Authorization": "Bearer four"}).status_code == 401
        assert post(client, body, headers={"Authorization": "Basic two"}).status_code == 401
