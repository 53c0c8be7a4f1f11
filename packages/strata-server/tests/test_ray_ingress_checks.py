"""What Ray's ingress checks before a replica sees a request (no Ray needed): the key before the
body is read, and the body within --body-timeout."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from strata_server import ServerSettings
from strata_server.ray.forward import BodyTooSlow, key_refusal, read_body


def scope(path: str, key: str | None = None) -> dict:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    return {"type": "http", "path": path, "headers": headers}


def test_the_key_is_checked_before_the_body() -> None:
    keyed = ServerSettings(api_key="sekrit")
    refused = key_refusal(scope("/v1/completions"), keyed, "r1")
    assert refused is not None and msgspec.json.decode(refused)["error"]["code"] == "invalid_api_key"
    assert key_refusal(scope("/v1/completions", "wrong"), keyed, "r1") is not None
    assert key_refusal(scope("/v1/completions", "sekrit"), keyed, "r1") is None
    assert key_refusal(scope("/tokenize"), keyed, "r1") is None  # keyless unless asked
    everywhere = ServerSettings(api_key="sekrit", key_on_every_route=True)
    assert key_refusal(scope("/tokenize"), everywhere, "r1") is not None
    assert key_refusal(scope("/health"), everywhere, "r1") is None
    assert key_refusal(scope("/v1/completions"), ServerSettings(), "r1") is None  # no keys set


def test_a_body_must_arrive_within_the_timeout() -> None:
    async def trickle() -> dict:
        await asyncio.sleep(0.05)
        return {"type": "http.request", "body": b"x", "more_body": True}

    async def whole() -> dict:
        return {"type": "http.request", "body": b'{"a": 1}', "more_body": False}

    with pytest.raises(BodyTooSlow, match="--body-timeout"):
        asyncio.run(read_body(trickle, 1000, 0.3))
    assert asyncio.run(read_body(whole, 1000, 0.3)) == b'{"a": 1}'
    assert asyncio.run(read_body(whole, 3, 0.3)) == b'{"a'  # cut one byte past the app's limit
