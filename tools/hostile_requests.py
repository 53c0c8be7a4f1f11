"""The request rows of tools/hostile.py: each a name and a function that sends one hostile request
(or connection) to a live strata-server's URL and returns what came back (status, bytes).

The table they replay is docs/server.md#limits; tools/hostile.py runs them with /health polled.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx


def post(url: str, path: str, body: dict[str, Any] | bytes, timeout: float = 600.0) -> tuple[str, int]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        reply = httpx.post(
            f"{url}{path}", content=content, headers={"content-type": "application/json"}, timeout=timeout
        )
    except httpx.HTTPError as exc:
        return type(exc).__name__, 0
    status = str(reply.status_code)
    if reply.status_code >= 400:
        try:
            status += f" ({reply.json()['error']['param']})"
        except (ValueError, KeyError, TypeError):
            pass
    return status, len(reply.content)


def alive(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=10.0).status_code == 200
    except httpx.HTTPError:
        return False


def trickle(
    url: str, head: bytes, rest: bytes, pause_s: float = 0.5, give_up_s: float = 120.0
) -> tuple[str, int]:
    """Send `head`, then `rest` a byte per `pause_s`; what happened and how long it took."""
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=give_up_s) as sock:
        sock.settimeout(pause_s)
        if head:
            sock.sendall(head)
        for byte in rest:
            try:
                chunk = sock.recv(65536)
                elapsed = time.monotonic() - started
                if not chunk:
                    return f"closed after {elapsed:.1f} s", 0
                return f"{chunk.split(b' ', 2)[1].decode()} after {elapsed:.1f} s", len(chunk)
            except TimeoutError:
                pass
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return f"closed after {time.monotonic() - started:.1f} s", 0
            if time.monotonic() - started > give_up_s:
                break
    return f"still open after {give_up_s:.0f} s", 0


def idle(seconds: float) -> tuple[str, int]:
    time.sleep(seconds)
    return "-", 0


def nested_schema(levels: int) -> str:
    schema = '{"type": "string"}'
    for _ in range(levels // 2):
        schema = '{"type": "object", "properties": {"a": ' + schema + "}}"
    return schema


def request_rows() -> list[tuple[str, Callable[[str], tuple[str, int]]]]:
    body = json.dumps({"prompt": "Hello " * 50, "max_tokens": 1}).encode()
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    return [
        ("idle (no request, 2 s): the machine's own noise", lambda u: idle(2.0)),
        ("/tokenize, 9.9 MB prompt", lambda u: post(u, "/tokenize", {"prompt": "hello world " * 825_000})),
        (
            "/tokenize, 960 KB prompt (under the limit)",
            lambda u: post(u, "/tokenize", {"prompt": "hello world " * 80_000}),
        ),
        (
            "1000 prompts x n=4",
            lambda u: post(u, "/v1/completions", {"prompt": [[1, 2, 3]] * 1000, "n": 4, "max_tokens": 1}),
        ),
        (
            "49,152 logprob_token_ids + echo",
            lambda u: post(
                u,
                "/v1/completions",
                {
                    "prompt": list(range(1, 101)),
                    "max_tokens": 1,
                    "echo": True,
                    "logprobs": 0,
                    "logprob_token_ids": list(range(49_152)),
                },
            ),
        ),
        (
            "allowed_token_ids lifting logprobs to 5,000",
            lambda u: post(
                u,
                "/v1/completions",
                {
                    "prompt": list(range(1, 101)),
                    "max_tokens": 1,
                    "echo": True,
                    "logprobs": 5000,
                    "allowed_token_ids": list(range(5000)),
                },
            ),
        ),
        (
            "2,000 stop strings x 1,000 chars",
            lambda u: post(
                u,
                "/v1/completions",
                {"prompt": "Hello", "max_tokens": 2, "stop": [f"{i:04d}" + "x" * 996 for i in range(2000)]},
            ),
        ),
        (
            "guided_choice 30,000 options",
            lambda u: post(
                u,
                "/v1/completions",
                {"prompt": "Pick:", "max_tokens": 4, "guided_choice": [f"o{i}" for i in range(30_000)]},
            ),
        ),
        (
            "guided_choice 3,000 options x n=64",
            lambda u: post(
                u,
                "/v1/completions",
                {
                    "prompt": "Pick:",
                    "max_tokens": 4,
                    "n": 64,
                    "guided_choice": [f"o{i}" for i in range(3_000)],
                },
            ),
        ),
        (
            "guided_choice 1,000 options x n=64 (under the limits)",
            lambda u: post(
                u,
                "/v1/completions",
                {
                    "prompt": "Pick:",
                    "max_tokens": 4,
                    "n": 64,
                    "guided_choice": [f"o{i}" for i in range(1_000)],
                },
            ),
        ),
        (
            "guided_grammar past llguidance's row limit",
            lambda u: post(
                u,
                "/v1/completions",
                {
                    "prompt": "Pick:",
                    "max_tokens": 4,
                    "guided_grammar": "start: " + " | ".join(f'"zq{i}"' for i in range(3000)),
                },
            ),
        ),
        (
            "logit_bias key of 5,000 digits",
            lambda u: post(
                u, "/v1/completions", {"prompt": "Hi", "max_tokens": 1, "logit_bias": {"1" * 5000: 1}}
            ),
        ),
        (
            "guided_json string nested 3,000 deep",
            lambda u: post(
                u,
                "/v1/completions",
                {"prompt": "Hi", "max_tokens": 1, "guided_json": "[" * 3000 + "]" * 3000},
            ),
        ),
        (
            "schema nested 900 deep + disable_additional_properties",
            lambda u: post(
                u,
                "/v1/completions",
                (
                    '{"prompt": "Hi", "max_tokens": 1, "structured_outputs": {"json": '
                    + nested_schema(900)
                    + ', "disable_additional_properties": true}}'
                ).encode(),
            ),
        ),
        (
            "headers a byte every 0.5 s",
            lambda u: trickle(
                u,
                b"",
                b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 400 + b"\r\n\r\n",
            ),
        ),
        ("body a byte every 0.5 s", lambda u: trickle(u, head, body)),
        # round two (issue 43): templates, open routes, sizes before tokenising, browsers,
        # connections; the server trusts request templates, so they are attacked too
        *(
            (f"/tokenize chat_template {template[:40]}", lambda u, t=template: chat_template_row(u, t))
            for template in HOSTILE_TEMPLATES
        ),
        ("8 x /tokenize 150k CJK + a 1-token completion", open_routes_row),
        (
            "prompt: 1,000,000 one-character prompts",
            lambda u: post(u, "/v1/completions", {"prompt": ["a"] * 1_000_000, "max_tokens": 1}),
        ),
        (
            "prompt: 10 x 999,999 characters",
            lambda u: post(u, "/v1/completions", {"prompt": ["ab " * 333_333] * 10, "max_tokens": 1}),
        ),
        (
            "prompt_logprobs 20 on 2,000 tokens (the answer, under 16 MiB)",
            lambda u: post(
                u,
                "/v1/completions",
                {"prompt": list(range(1000, 3000)), "max_tokens": 1, "prompt_logprobs": 20},
            ),
        ),
        ("text/plain POST with Origin: https://evil.example", cross_site_row),
        (
            "Host: attacker.example (DNS rebinding)",
            lambda u: get_with(u, "/health", {"host": "attacker.example"}),
        ),
        ("1,030 idle connections, then /health from 127.0.0.2", idle_connections_row),
    ]


HOSTILE_TEMPLATES = [
    "{{ (7**12000000) % 10 }}",
    "{{ 2**100000 }}",
    '{% if messages|length > 5 %}{{ "a" * 10**8 }}{% endif %}',
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
]


def chat_template_row(url: str, template: str) -> tuple[str, int]:
    messages = [{"role": "user", "content": "hi"}] * 6
    return post(url, "/tokenize", {"messages": messages, "chat_template": template}, timeout=120)


def open_routes_row(url: str) -> tuple[str, int]:
    """Eight keyless /tokenize requests at once, then a one-token completion: its latency."""
    text = "漢字仮名交じり文" * 18_750
    with ThreadPoolExecutor(8) as pool:
        tokenizing = [pool.submit(post, url, "/tokenize", {"prompt": text}) for _ in range(8)]
        time.sleep(0.3)
        started = time.perf_counter()
        status, size = post(url, "/v1/completions", {"prompt": "Hello", "max_tokens": 1})
        took = time.perf_counter() - started
        codes = sorted({f.result()[0] for f in tokenizing})
    return f"{status} in {took:.2f} s (tokenize {','.join(codes)})", size


def cross_site_row(url: str) -> tuple[str, int]:
    body = json.dumps({"prompt": "Hello", "max_tokens": 1}).encode()
    headers = {"content-type": "text/plain", "origin": "https://evil.example"}
    reply = httpx.post(f"{url}/v1/completions", content=body, headers=headers, timeout=60)
    return str(reply.status_code), len(reply.content)


def get_with(url: str, path: str, headers: dict[str, str]) -> tuple[str, int]:
    reply = httpx.get(f"{url}{path}", headers=headers, timeout=30)
    return str(reply.status_code), len(reply.content)


def idle_connections_row(url: str) -> tuple[str, int]:
    """1,030 connections that send nothing, then another client's /health (127.0.0.2 is loopback)."""
    host, port = url.removeprefix("http://").split(":")
    idle = []
    try:
        for _ in range(1030):
            try:
                idle.append(socket.create_connection((host, int(port)), timeout=5))
            except OSError:
                break
        time.sleep(0.3)
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30) as other:
            reply = other.get(f"{url}/health")
        return f"{reply.status_code} ({len(idle)} opened)", len(reply.content)
    finally:
        for sock in idle:
            sock.close()
