"""``/upstream/<route>``: the server's own routes, forwarded as they are.

The playground page shows what the typed-decision answer is made of (each word answer's
tokens, the structured-output tab, the server's kernels and model), which only the server's
routes say. Forwarding them through the gateway keeps one origin and one API key for the
page: no CORS, and a browser needs to reach only the gateway, never the server behind it.

Only the routes in ``FORWARDED`` pass (one handler each); any other path is a 404. The caller authenticates
with the gateway's key (as for ``/v1/systemone``); the upstream call carries the gateway's
``--upstream-api-key``, never the caller's header. Bodies and statuses come back unchanged
(the server's error envelope included; a compressed body is sent decompressed), read
whole: a ``"stream": true`` request gets its
events in one reply. An unreachable server is a 502 in the gateway's error shape.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from litestar import Request, Response, route
from litestar.handlers import HTTPRouteHandler
from litestar.types import Method

from .browsers import require_json
from .encoding import decode_body
from .errors import Refusal
from .request_id import HEADER, current_request_id

PREFIX = "/upstream"
FORWARDED: frozenset[tuple[Method, str]] = frozenset(
    {
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/score_candidates"),
        ("GET", "/v1/models"),
        ("POST", "/tokenize"),
        ("POST", "/detokenize"),
        ("GET", "/tokenizer_info"),
        ("GET", "/health"),
        ("GET", "/version"),
    }
)


class Passthrough:
    """One HTTP client to the upstream server, for the forwarded routes."""

    def __init__(self, upstream: str, api_key: str | None, timeout: float):
        self._upstream = upstream.rstrip("/")
        self._api_key = api_key
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None

    async def start(self) -> None:
        self._http = httpx.AsyncClient(base_url=self._upstream, timeout=self._timeout)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    def routes(self, check_auth: Callable[[Request], None]) -> list[HTTPRouteHandler]:
        """One handler per forwarded route, each checking the gateway's key first."""

        def handler(method: Method, path: str) -> HTTPRouteHandler:
            @route(PREFIX + path, http_method=[method], include_in_schema=False)
            async def forward(request: Request) -> Response:
                check_auth(request)
                require_json(request)
                return await self.forward(request, path)

            return forward

        return [handler(method, path) for method, path in sorted(FORWARDED)]

    async def forward(self, request: Request, route: str) -> Response:
        """The server's reply to the same method, route and body."""
        if self._http is None:
            raise RuntimeError("the gateway is not started")
        body = decode_body(await request.body(), request.headers.get("content-encoding"))
        headers = {"Content-Type": request.headers.get("content-type", "application/json")}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request_id = current_request_id()
        if request_id is not None:
            headers[HEADER] = request_id
        try:
            reply = await self._http.request(
                request.method, route, content=body if request.method == "POST" else None, headers=headers
            )
        except httpx.HTTPError as error:
            raise Refusal(502, "upstream_error", f"the server did not answer {route}: {error}") from error
        return Response(
            content=reply.content,
            status_code=reply.status_code,
            media_type=reply.headers.get("content-type", "application/json"),
        )
