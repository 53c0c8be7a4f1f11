"""Cross-site requests a browser may send without asking (a non-JSON POST) get 415, and a
server bound to loopback answers only loopback Host names (DNS rebinding)."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient

from strata_server import ServerSettings, create_app
from strata_server.browsers import LOOPBACK_NAMES, allowed_hosts, host_name


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"content-type": "text/plain", "origin": "https://evil.example"}, 415),
        ({"content-type": "application/x-www-form-urlencoded"}, 415),
        ({"content-type": "multipart/form-data; boundary=x"}, 415),
        ({}, 415),  # no Content-Type: a browser's simple request too
        ({"content-type": "application/json; charset=utf-8"}, 200),
        ({"content-type": "Application/JSON"}, 200),
    ],
)
def test_post_bodies_must_say_json(make_engine, headers: dict[str, str], status: int) -> None:
    body = b'{"prompt": "hi", "max_tokens": 1}'
    with TestClient(create_app(make_engine(), ServerSettings())) as client:
        for path in ("/v1/completions", "/tokenize"):
            reply = client.post(
                path, content=body if path != "/tokenize" else b'{"prompt": "hi"}', headers=headers
            )
            assert reply.status_code == status, (path, reply.text)
            if status == 415:
                assert reply.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.parametrize(
    ("host", "status"),
    [("attacker.example", 400), ("attacker.example:8000", 400), ("localhost:8000", 200), ("[::1]:8000", 200)],
)
def test_a_loopback_server_answers_only_loopback_names(make_engine, host: str, status: int) -> None:
    with TestClient(create_app(make_engine(), ServerSettings(allowed_hosts=LOOPBACK_NAMES))) as client:
        for path in ("/health", "/v1/models"):
            reply = client.get(path, headers={"host": host})
            assert reply.status_code == status, reply.text
            if status == 400:
                assert reply.json()["error"]["code"] == "invalid_host"


def test_which_hosts_are_answered() -> None:
    assert allowed_hosts("127.0.0.1", []) == LOOPBACK_NAMES
    assert allowed_hosts("::1", []) == LOOPBACK_NAMES
    assert allowed_hosts("0.0.0.0", []) == ()  # bound to every interface: any name
    assert allowed_hosts("127.0.0.1", ["Proxy.Example"]) == ("proxy.example",)
    assert allowed_hosts("127.0.0.1", ["*"]) == ()
    assert [host_name(h) for h in ("localhost:8000", "[::1]:80", "::1", "a.example")] == [
        "localhost",
        "::1",
        "::1",
        "a.example",
    ]
