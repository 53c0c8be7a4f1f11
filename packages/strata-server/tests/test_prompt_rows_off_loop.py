"""An echoed prompt's rows grow with the prompt and the listing (labels, `top_logprobs`
objects, offsets, the stream's JSON): the server formats them on worker threads, never on
the event loop that answers every other request (`/health` included) meanwhile.

Each test records the thread of every call to the formatting functions that make the wire
objects, and the thread the app's handlers run on (the engine's `submit` is called there),
and asserts the two never meet.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec
import pytest
from litestar.testing import TestClient

from strata_server import ServerSettings, create_app, envelope, formatting

PROMPT = "The quick brown fox jumps over the lazy dog. " * 6  # 270 byte-tokens
MAX_LOGPROBS = 20


@dataclass
class Threads:
    loop: set[int] = field(default_factory=set)  # where the handlers run
    formatting: list[int] = field(default_factory=list)  # each label or decoded span made
    frames: list[tuple[int, int]] = field(default_factory=list)  # (thread, bytes) per SSE frame


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Threads:
    seen = Threads()

    def recorded(real):
        def call(*args, **kwargs):
            seen.formatting.append(threading.get_ident())
            return real(*args, **kwargs)

        return call

    # the formatting module looks these up when it formats a row or an echoed prompt
    monkeypatch.setattr(formatting, "token_label", recorded(formatting.token_label))
    monkeypatch.setattr(formatting, "decode_spans", recorded(formatting.decode_spans))
    real_sse = envelope.sse

    def sse(payload):
        frame = real_sse(payload)
        seen.frames.append((threading.get_ident(), len(frame)))
        return frame

    monkeypatch.setattr(envelope, "sse", sse)
    return seen


@pytest.fixture
def client(make_engine, threads: Threads) -> Iterator[TestClient]:
    class LoopRecordingEngine(make_engine):
        def submit(self, requests, *, checked=False):
            threads.loop.add(threading.get_ident())  # called by the handler, on the loop
            return super().submit(requests, checked=checked)

    app = create_app(LoopRecordingEngine(ctx_size=512), ServerSettings(max_logprobs=MAX_LOGPROBS))
    with TestClient(app) as c:
        yield c


def assert_formatted_off_the_loop(threads: Threads) -> None:
    assert len(threads.loop) == 1
    assert threads.formatting, "nothing was formatted: the test would prove nothing"
    on_loop = sum(1 for ident in threads.formatting if ident in threads.loop)
    assert on_loop == 0, f"{on_loop} of {len(threads.formatting)} formatting calls ran on the event loop"


def test_a_whole_echo_with_logprobs_is_formatted_off_the_loop(client, threads: Threads) -> None:
    body = {"prompt": PROMPT, "echo": True, "logprobs": MAX_LOGPROBS, "max_tokens": 0, "n": 2}
    reply = client.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    for choice in reply.json()["choices"]:
        assert choice["text"] == PROMPT
        assert choice["logprobs"]["tokens"] == list(PROMPT)
        assert choice["logprobs"]["text_offset"] == list(range(len(PROMPT)))
        assert all(len(top) >= MAX_LOGPROBS for top in choice["logprobs"]["top_logprobs"][1:])
    assert_formatted_off_the_loop(threads)


def test_a_streamed_echo_is_formatted_and_encoded_off_the_loop(client, threads: Threads) -> None:
    body = {"prompt": PROMPT, "echo": True, "logprobs": MAX_LOGPROBS, "max_tokens": 0, "stream": True}
    with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    first = msgspec.json.decode(lines[0].removeprefix("data: "))["choices"][0]
    assert first["text"] == PROMPT and len(first["logprobs"]["tokens"]) == len(PROMPT)
    assert_formatted_off_the_loop(threads)
    echo_frame = len(lines[0].encode()) + len("\n\n")  # the echoed prompt's chunk, encoded
    encoded_on = [ident for ident, size in threads.frames if size == echo_frame]
    assert encoded_on and not set(encoded_on) & threads.loop


def test_an_echo_without_logprobs_is_decoded_off_the_loop(client, threads: Threads) -> None:
    for stream in (False, True):
        body = {"prompt": PROMPT, "echo": True, "max_tokens": 0, "n": 3, "stream": stream}
        reply = client.post("/v1/completions", json=body)
        assert reply.status_code == 200 and PROMPT in reply.text
    assert_formatted_off_the_loop(threads)


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/completions", {"prompt": PROMPT}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
    ],
)
def test_prompt_logprobs_are_formatted_off_the_loop(client, threads: Threads, route: str, body: dict) -> None:
    reply = client.post(route, json={**body, "prompt_logprobs": MAX_LOGPROBS, "max_tokens": 1})
    assert reply.status_code == 200, reply.text
    data = reply.json()
    rows = data["prompt_logprobs"] if "messages" in body else data["choices"][0]["prompt_logprobs"]
    assert rows[0] is None and len(rows) >= len(PROMPT) and all(rows[1:])  # a row per later token
    assert_formatted_off_the_loop(threads)
