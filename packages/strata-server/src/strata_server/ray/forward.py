"""One HTTP request carried from the Ray Serve ingress to an engine replica, and run there.

The ingress reads the body once and sends it, with the request's ASGI scope, as a
`ForwardedRequest`; the replica runs it through the ordinary Litestar app (`create_app`),
so the replicated server has exactly the single server's routes, checks and envelopes.
`affinity` is what the prefix-affinity router matches on: the prompt as text, never parsed
strictly here (a body the app refuses routes like any other and gets the app's 4xx).

No Ray import: this module is tested without Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from strata_server.auth import accepted_key
from strata_server.errors import error_body
from strata_server.settings import ServerSettings

# ASGI as plain dicts (Litestar's TypedDicts are unions that plain forwarding code cannot narrow)
Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]  # Litestar, or any ASGI 3 callable

# ASGI scope keys that travel (plain data); the rest (app, state, extensions) stays behind.
FORWARDED_SCOPE_KEYS = (
    "type",
    "asgi",
    "http_version",
    "method",
    "scheme",
    "path",
    "raw_path",
    "query_string",
    "root_path",
    "headers",
    "client",
    "server",
)
GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})


@dataclass(frozen=True)
class ForwardedRequest:
    """An HTTP request as the replica needs it: the scope's plain keys and the whole body."""

    scope: dict[str, Any]
    body: bytes
    affinity: str  # the prompt as text for prefix routing ("" when there is none)

    @classmethod
    def of(
        cls, scope: Mapping[str, Any], body: bytes, headers: list[tuple[bytes, bytes]]
    ) -> ForwardedRequest:
        plain = {key: scope[key] for key in FORWARDED_SCOPE_KEYS if key in scope}
        plain["headers"] = headers
        return cls(plain, body, affinity_text(str(scope.get("path", "")), body))


def key_refusal(scope: Mapping[str, Any], settings: ServerSettings, request_id: str) -> bytes | None:
    """The 401 envelope for a request that needs a key and lacks it, or None: the ingress asks
    before reading the body, so a keyless client cannot make it hold one."""
    path = str(scope.get("path", ""))
    if not settings.needs_key(path):
        return None
    given = next((v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), b"")
    if accepted_key(given, [f"Bearer {key}".encode() for key in settings.keys]):
        return None
    message = "Missing or invalid API key: send `Authorization: Bearer <key>`."
    return msgspec.json.encode(error_body(message, 401, code="invalid_api_key", request_id=request_id))


class BodyTooSlow(Exception):
    """The body did not arrive within --body-timeout."""


async def read_body(receive: Receive, most: int, timeout_s: float) -> bytes:
    """The request's body, cut at `most` bytes, within `timeout_s` seconds (`BodyTooSlow`)."""
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        while size < most:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if not message.get("more_body", False):
                break

    try:
        await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        raise BodyTooSlow(
            f"The request body did not arrive within {timeout_s:g} s (--body-timeout)."
        ) from None
    return b"".join(chunks)[:most]


def affinity_text(path: str, body: bytes) -> str:
    """The prompt of a generation request as one string whose prefixes follow the prompt's.

    Text prompts and chat message contents are used as they are; token-id prompts become
    `"1,2,3,"` (a shared id prefix is a shared string prefix). The first prompt of a batch
    stands for the batch. Anything else (other routes, bodies that are not JSON) is "".
    """
    if path not in GENERATION_PATHS:
        return ""
    try:
        body_value = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return ""
    if not isinstance(body_value, dict):
        return ""
    if path == "/v1/chat/completions":
        return _messages_text(body_value.get("messages"))
    return _prompt_text(body_value.get("prompt"))


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(i, int) for i in prompt):
            return "".join(f"{i}," for i in prompt)
        return _prompt_text(prompt[0])
    return ""


def _messages_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    parts = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str):
            parts.append(f"{message.get('role', '')}:{content}\n")
    return "".join(parts)


async def run_asgi(app: ASGIApp, request: ForwardedRequest) -> AsyncIterator[Message]:
    """Run `request` through `app`, yielding the ASGI messages it sends.

    The app reads the body once; after that `receive` reports a disconnect when the reply is
    complete (Litestar's streams wait for it) or when the caller goes away: this generator
    closed or cancelled, the app's task is cancelled with it (its cleanup aborts the engine
    request), as a client disconnect does.
    """
    messages: asyncio.Queue[Message | None] = asyncio.Queue()
    body_sent = False
    gone = asyncio.Event()

    async def receive() -> Message:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await messages.put(message)

    async def serve() -> None:
        try:
            await app({**request.scope, "state": {}}, receive, send)
        finally:
            await messages.put(None)

    task = asyncio.create_task(serve())
    try:
        while (message := await messages.get()) is not None:
            yield message
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                gone.set()  # the reply is complete; an HTTP server now reports the disconnect
        await task  # re-raises what the app raised (its handlers answer nearly everything)
    finally:
        gone.set()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
