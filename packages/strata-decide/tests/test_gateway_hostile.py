"""The gateway under hostile bodies, on the fake upstream: each refused with a small reply."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
import respx
from litestar.testing import TestClient

from strata_decide.gateway import GatewayConfig, create_app
from strata_decide.gateway.browsers import allowed_hosts
from strata_decide.operations import upstream_key


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


def test_every_upstream_call_carries_the_key_from_the_environment(monkeypatch) -> None:
    """With STRATA_API_KEY set and no --server-api-key, /v1/models worked (the client read the
    environment) but /upstream/v1/models was a 401 (the passthrough sent no key)."""
    monkeypatch.setenv("STRATA_API_KEY", "from-env")
    seen: list[str | None] = []

    def models(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(
            200, json={"object": "list", "data": [{"id": "m", "object": "model", "created": 0}]}
        )

    with respx.mock(base_url="http://keyed.test", assert_all_called=False) as mock:
        mock.get("/v1/models").mock(side_effect=models)
        with TestClient(create_app(GatewayConfig(upstream="http://keyed.test"))) as client:
            assert client.get("/v1/models").status_code == 200
            assert client.get("/upstream/v1/models").status_code == 200
    assert seen == ["Bearer from-env", "Bearer from-env"]


def test_the_upstream_key_comes_from_the_flag_the_file_or_the_environment(tmp_path, monkeypatch) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("# the server's key\n\nfrom-file\n")
    monkeypatch.setenv("STRATA_API_KEY", "from-env")
    assert upstream_key("from-flag", str(key_file)) == "from-flag"
    assert upstream_key(None, str(key_file)) == "from-file"
    assert upstream_key(None, None) == "from-env"
    monkeypatch.delenv("STRATA_API_KEY")
    assert upstream_key(None, None) is None
