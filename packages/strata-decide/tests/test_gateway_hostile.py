"""The gateway under hostile bodies, on the fake upstream: each refused with a small reply."""

from __future__ import annotations

import gzip
import json

import pytest
from litestar.testing import TestClient

from strata_decide.gateway import GatewayConfig, create_app
from strata_decide.gateway.browsers import allowed_hosts


@pytest.fixture
def gateway(fake):
    with TestClient(create_app(GatewayConfig(upstream=fake.url))) as client:
        yield client


def test_two_layers_of_content_encoding_are_refused(gateway) -> None:
    body = gzip.compress(gzip.compress(b'"' + b"x" * 16_000_000 + b'"'))  # about 16 MB from 157 bytes
    headers = {"content-type": "application/json", "content-encoding": "gzip, gzip"}
    reply = gateway.post("/v1/systemone", content=body, headers=headers)
    assert reply.status_code == 415, reply.text[:300]
    assert len(reply.content) < 1000
    one = gzip.compress(json.dumps({"model": "jev-latest", "state": "s", "questions": {}}).encode())
    reply = gateway.post(
        "/v1/systemone", content=one, headers={**headers, "content-encoding": "identity, gzip"}
    )
    assert reply.status_code == 422  # one layer (identity is none) is read


@pytest.mark.parametrize(
    "body",
    [
        b'"' + b"x" * 10_000_000 + b'"',  # not an object: the whole body was the input
        json.dumps(
            {"model": "m", "state": "s", "questions": {f"q{i}": {"type": "nope"} for i in range(20_000)}}
        ).encode(),
        json.dumps(
            {"model": "m", "state": "s", "questions": {"q": {"type": "choice", "x": "y" * 5_000_000}}}
        ).encode(),
    ],
)
def test_validation_errors_never_echo_the_body(gateway, body: bytes) -> None:
    reply = gateway.post("/v1/systemone", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 422
    assert len(reply.content) < 20_000, len(reply.content)
    detail = reply.json()["detail"]
    assert 1 <= len(detail) <= 20 and all({"type", "loc", "msg", "input"} <= item.keys() for item in detail)


@pytest.mark.parametrize("path", ["/v1/systemone", "/upstream/v1/completions", "/upstream/tokenize"])
def test_a_post_that_is_not_json_is_a_415(gateway, path: str) -> None:
    body = b'{"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}}'
    for headers in ({"content-type": "text/plain", "origin": "https://evil.example"}, {}):
        reply = gateway.post(path, content=body, headers=headers)
        assert reply.status_code == 415, (path, reply.text)
        assert reply.json()["detail"]["error_type"] == "unsupported_media_type"


def test_a_loopback_gateway_answers_only_loopback_names(fake) -> None:
    config = GatewayConfig(upstream=fake.url, allowed_hosts=allowed_hosts("127.0.0.1", []))
    with TestClient(create_app(config)) as client:
        refused = client.get("/health", headers={"host": "attacker.example:8100"})
        assert refused.status_code == 400 and refused.json()["detail"]["error_type"] == "invalid_host"
        assert client.get("/health", headers={"host": "localhost:8100"}).status_code == 200
    assert allowed_hosts("0.0.0.0", []) == () and allowed_hosts("127.0.0.1", ["*"]) == ()

