"""The API key guard: `Authorization: Bearer <key>` on the routes that need one."""

from __future__ import annotations

import hmac

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from strata_server.errors import ApiError
from strata_server.settings import ServerSettings


def accepted_key(given: bytes, keys: list[bytes]) -> bool:
    """Constant-time comparison against every key (no early exit that would time the match)."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key)
    return found


class ApiKeyGuard:
    """A Litestar guard: 401 unless the route needs no key (`ServerSettings.needs_key`) or the
    request sends one of the accepted keys."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.keys = [f"Bearer {key}".encode() for key in settings.keys]

    def __call__(self, connection: ASGIConnection, _: BaseRouteHandler) -> None:
        if not self.settings.needs_key(connection.scope["path"]):
            return
        given = connection.headers.get("authorization", "").encode()
        if not accepted_key(given, self.keys):
            raise ApiError(
                "Missing or invalid API key: send `Authorization: Bearer <key>`.",
                status=401,
                code="invalid_api_key",
            )
