"""The Ray Serve application's Ray-free parts: a forwarded request run through the app,
the prompt text the affinity router matches, and the per-replica `/metrics` merge.

The replicated server on the real model and a real Ray instance: tests/integration/server/test_ray_serve.py.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import msgspec
import pytest
from litestar.testing import TestClient

from strata_server import ServerSettings, create_app
from strata_server.ray.forward import ForwardedRequest, affinity_text, run_asgi
from strata_server.ray.metrics import labelled, merge_replica_metrics

HEADERS = [(b"content-type", b"application/json")]


def forwarded(path: str, body: Any, method: str = "POST") -> ForwardedRequest:
    raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
        "app": object(),  # not plain data: must not travel
    }
    return ForwardedRequest.of(scope, raw, HEADERS)


async def collect(app: Any, request: ForwardedRequest) -> tuple[int, dict[str, str], bytes]:
    status, headers, chunks = 0, {}, []
    async for message in run_asgi(app, request):
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            chunks.append(message.get("body", b""))
    return status, headers, b"".join(chunks)


def run(app: Any, request: ForwardedRequest, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Whole reply; a reply that never ends (the generator waiting forever) fails the test."""
    return asyncio.run(asyncio.wait_for(collect(app, request), timeout))


def without_ids(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("id", "created")}


def test_forwarded_scope_carries_plain_data_only() -> None:
    request = forwarded("/v1/completions", {"prompt": "hi"})
    assert "app" not in request.scope and request.scope["headers"] == HEADERS
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(request.scope))  # plain data


@pytest.mark.parametrize(
    "payload",
    [
        {"prompt": ["hi", "yo"], "max_tokens": 2, "logprobs": 1},
        {"prompt": [104, 105], "max_tokens": 3, "echo": True, "logprobs": 2},
    ],
)
def test_a_forwarded_request_gets_the_apps_own_reply(make_engine, payload) -> None:
    """The same body through run_asgi and through Litestar's test client: the same reply."""
    app = create_app(make_engine(), ServerSettings(max_logprobs=5))
    status, headers, body = run(app, forwarded("/v1/completions", payload))
    with TestClient(create_app(make_engine(), ServerSettings(max_logprobs=5))) as client:
        reference = client.post("/v1/completions", json=payload)
    assert status == reference.status_code == 200
    assert headers["x-request-id"]
    assert without_ids(msgspec.json.decode(body)) == without_ids(reference.json())


def test_a_streamed_reply_ends(make_engine) -> None:
    """Litestar's streams wait for a disconnect after their last chunk; the forwarder must
    report one, or the replica's generator (and the request in Ray) never ends."""
    engine = make_engine()
    app = create_app(engine, ServerSettings())
    payload = {"prompt": "hi", "max_tokens": 3, "stream": True}
    status, headers, body = run(app, forwarded("/v1/completions", payload))
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert body.endswith(b"data: [DONE]\n\n")
    assert engine.active == 0 and engine.aborted == 0 and engine.cancelled == 0


def test_closing_the_forwarder_aborts_the_generation(make_engine, wait_until) -> None:
    """The ingress going away (client gone, replica call cancelled) frees the engine."""
    engine = make_engine(step_delay=0.001, ctx_size=200_000)
    payload = {"prompt": "hi", "max_tokens": 100_000, "n": 2, "stream": True}  # only an abort ends it
    app = create_app(engine, ServerSettings())

    async def read_some() -> None:
        messages = run_asgi(app, forwarded("/v1/completions", payload))
        seen = 0
        async for message in messages:
            assert message.get("status", 200) == 200
            seen += message["type"] == "http.response.body"
            if seen == 3:
                break
        assert engine.active == 2
        await messages.aclose()  # type: ignore[attr-defined]
        await wait_until(lambda: engine.aborted == 2)  # seen while the loop still runs
        assert engine.active == 0 and engine.cancelled == 0

    asyncio.run(read_some())


@pytest.mark.parametrize("body", [b"{nope", b'{"prompt": "hi", "max_tokens": "3"}', b"[]"])
def test_bad_bodies_get_the_apps_envelope(make_engine, body) -> None:
    app = create_app(make_engine(), ServerSettings())
    status, _, reply = run(app, forwarded("/v1/completions", body))
    assert status == 400
    error = msgspec.json.decode(reply)["error"]
    assert set(error) == {"message", "type", "param", "code"}


def test_affinity_text_keeps_prefixes() -> None:
    """Requests that share a prompt prefix get texts that share a prefix (the router's key)."""
    state = "State: the door is open and the light is off.\n"
    a = affinity_text("/v1/completions", msgspec.json.encode({"prompt": state + "Is it dark?"}))
    b = affinity_text("/v1/completions", msgspec.json.encode({"prompt": state + "Is it safe?"}))
    assert a.startswith(state) and b.startswith(state) and a != b
    ids_a = affinity_text("/v1/completions", msgspec.json.encode({"prompt": [1, 22, 333, 4]}))
    ids_b = affinity_text("/v1/completions", msgspec.json.encode({"prompt": [1, 22, 333, 5]}))
    ids_c = affinity_text("/v1/completions", msgspec.json.encode({"prompt": [1, 2]}))
    assert ids_a.startswith("1,22,333,") and ids_b.startswith("1,22,333,")
    assert not ids_a.startswith(ids_c)  # [1, 2] is no prefix of [1, 22, ...]
    batch = affinity_text("/v1/completions", msgspec.json.encode({"prompt": [[7, 8], [9]]}))
    assert batch == "7,8,"
    chat = {"messages": [{"role": "system", "content": state}, {"role": "user", "content": "Dark?"}]}
    text = affinity_text("/v1/chat/completions", msgspec.json.encode(chat))
    assert text.startswith(f"system:{state}") and text.endswith("user:Dark?\n")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/tokenize", b'{"prompt": "hi"}'),
        ("/v1/completions", b"{nope"),
        ("/v1/completions", b'["hi"]'),
        ("/v1/completions", b'{"prompt": 5}'),
        ("/v1/chat/completions", b'{"messages": "hi"}'),
    ],
)
def test_affinity_text_is_empty_without_a_prompt(path, body) -> None:
    assert affinity_text(path, body) == ""


REPLICA_TEXT = """\
# HELP strata_requests_total HTTP requests by route and status.
# TYPE strata_requests_total counter
strata_requests_total{route="/v1/completions",status="200"} 3
# HELP strata_prompt_tokens_total Prompt tokens processed.
# TYPE strata_prompt_tokens_total counter
strata_prompt_tokens_total 70
# HELP strata:time_to_first_token_seconds From arrival to a choice's first token.
# TYPE strata:time_to_first_token_seconds histogram
strata:time_to_first_token_seconds_bucket{model="strata",le="0.005"} 0
strata:time_to_first_token_seconds_count{model="strata"} 2
"""

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{replica="([^"]*)"(,[^}]*)?\} (\S+)$')


def test_labelled_puts_the_replica_first() -> None:
    assert labelled("x 1", "r1") == 'x{replica="r1"} 1'
    assert labelled('x{a="b"} 1', "r1") == 'x{replica="r1",a="b"} 1'
    assert labelled("x{} 1", "r1") == 'x{replica="r1"} 1'


def test_merged_metrics_keep_one_header_per_family() -> None:
    texts = {"b": REPLICA_TEXT, "a": REPLICA_TEXT.replace(" 70", " 5")}
    merged = merge_replica_metrics(
        texts, ["# TYPE strata:replicas_running gauge", "strata:replicas_running 2"]
    )
    lines = merged.splitlines()
    assert lines[:2] == ["# TYPE strata:replicas_running gauge", "strata:replicas_running 2"]
    types = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(types) == len(set(types)) == 4
    samples = [SAMPLE.match(line) for line in lines[2:] if not line.startswith("#")]
    assert all(samples) and len(samples) == 8
    by_family: dict[str, list[str]] = {}
    current = ""
    for line in lines[2:]:
        if line.startswith("# TYPE"):
            current = line.split()[2]
        elif not line.startswith("#"):
            by_family.setdefault(current, []).append(line)
    assert by_family["strata_prompt_tokens_total"] == [
        'strata_prompt_tokens_total{replica="a"} 5',
        'strata_prompt_tokens_total{replica="b"} 70',
    ]
    assert all(line.startswith("strata:time_to_first_token_seconds_") for line in by_family[types[-1]])
