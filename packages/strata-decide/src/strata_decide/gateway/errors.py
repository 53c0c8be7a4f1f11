"""The gateway's error bodies, one shape per kind of failure.

* validation failures: 422 ``{"detail": [{"type", "loc", "msg", "input"}]}``;
* every other refusal: 4xx ``{"detail": {"error_type", "message"}}``;
* upstream failures: 502 ``{"detail": {"error_type": "upstream_error", "message"}}``.

A bad request never gets a 5xx: typed-decision SDKs retry 5xx.
"""

from __future__ import annotations

import json
from typing import Any

from litestar import Response


class Refusal(Exception):
    """A request the gateway answers with ``{"detail": {"error_type", "message"}}``."""

    def __init__(self, status_code: int, error_type: str, message: str):
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type
        self.message = message


def json_response(body: Any, status_code: int = 200) -> Response:
    """A JSON response, UTF-8, never with NaN/inf (those raise: they would be a bug here)."""
    content = json.dumps(body, ensure_ascii=False, allow_nan=False, default=_jsonable)
    return Response(content=content.encode("utf-8"), status_code=status_code, media_type="application/json")


def refusal_response(refusal: Refusal) -> Response:
    detail = {"error_type": refusal.error_type, "message": refusal.message}
    return json_response({"detail": detail}, refusal.status_code)


def validation_response(detail: list[dict[str, Any]]) -> Response:
    return json_response({"detail": detail}, 422)


def _jsonable(value: Any) -> Any:
    """Validation inputs that JSON cannot hold (raw bytes of an unparsable body) as text."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return repr(value)
