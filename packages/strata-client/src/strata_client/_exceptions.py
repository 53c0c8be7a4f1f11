"""One exception hierarchy for everything the client can raise.

    StrataError
    ├── APIStatusError            the server answered with an error status (or an error event)
    │   ├── BadRequestError            400
    │   ├── AuthenticationError        401
    │   ├── PermissionDeniedError      403
    │   ├── NotFoundError              404
    │   ├── UnprocessableEntityError   422
    │   ├── RateLimitError             429
    │   └── InternalServerError        >= 500
    └── APIConnectionError        no answer at all (refused, reset, DNS, ...)
        └── APITimeoutError            the answer did not come in time

The server's message is read from whichever error shape it sent, so callers never parse
bodies themselves: the OpenAI envelope ``{"error": {"message", "type", "param", "code"}}``,
the typed-decision ``{"detail": {"error_type", "message"}}``, a validation list
``{"detail": [{"type", "loc", "msg", "input"}]}`` or a plain ``{"detail": "..."}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx


class StrataError(Exception):
    """Base class of every error raised by strata_client."""


class APIConnectionError(StrataError):
    """The request got no HTTP answer (connection refused or reset, DNS failure, ...)."""

    def __init__(self, message: str = "Connection error.", *, request: httpx.Request | None = None):
        super().__init__(message)
        self.message = message
        self.request = request


class APITimeoutError(APIConnectionError):
    """The request did not complete within its timeout."""

    def __init__(self, message: str = "Request timed out.", *, request: httpx.Request | None = None):
        super().__init__(message, request=request)


@dataclass(frozen=True)
class ErrorDetails:
    """What the client could read out of an error body, whatever its shape."""

    message: str
    error_type: str | None = None
    param: str | None = None
    code: str | int | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)


class APIStatusError(StrataError):
    """The server answered with an error.

    Attributes: ``status_code``, ``message`` (the server's own words), ``error_type``
    (``type`` / ``error_type`` of the body), ``param`` (the offending field when the server
    named one), ``code``, ``errors`` (the item list of a 422 validation body), ``body`` (the
    decoded JSON, or the text when it was not JSON) and ``response`` (the httpx response).
    """

    def __init__(self, status_code: int, details: ErrorDetails, *, body: Any, response: httpx.Response):
        super().__init__(f"Error code: {status_code} - {details.message}")
        self.status_code = status_code
        self.message = details.message
        self.error_type = details.error_type
        self.param = details.param
        self.code = details.code
        self.errors = details.errors
        self.body = body
        self.response = response


class BadRequestError(APIStatusError):
    """400: the request is malformed or asks for something the server refuses."""


class AuthenticationError(APIStatusError):
    """401: missing or wrong API key."""


class PermissionDeniedError(APIStatusError):
    """403: the key is valid but not allowed to do this."""


class NotFoundError(APIStatusError):
    """404: unknown route or model."""


class UnprocessableEntityError(APIStatusError):
    """422: the body is well-formed JSON but fails validation."""


class RateLimitError(APIStatusError):
    """429: too many requests (retried automatically before it is raised)."""


class InternalServerError(APIStatusError):
    """>= 500: the server failed (503 is retried automatically before it is raised)."""


_ERROR_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def error_class_for(status_code: int) -> type[APIStatusError]:
    """The exception class that stands for an HTTP error status."""
    if status_code >= 500:
        return InternalServerError
    return _ERROR_BY_STATUS.get(status_code, APIStatusError)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _validation_details(items: list[Any]) -> ErrorDetails:
    """A 422 list ``[{"type", "loc", "msg", "input"}]``: one message naming each field."""
    errors = [item for item in items if isinstance(item, dict)]
    parts = []
    for item in errors:
        loc = ".".join(str(part) for part in item.get("loc", []))
        msg = str(item.get("msg", "invalid"))
        parts.append(f"{loc}: {msg}" if loc else msg)
    first = errors[0] if errors else {}
    first_loc = first.get("loc")
    return ErrorDetails(
        message="; ".join(parts) or "Validation failed.",
        error_type=_text_or_none(first.get("type")),
        param=".".join(str(part) for part in first_loc) if first_loc else None,
        errors=errors,
    )


def details_from_body(body: Any, fallback: str) -> ErrorDetails:
    """Read message, type and param from any of the error shapes the module doc lists."""
    if not isinstance(body, dict):
        return ErrorDetails(message=str(body) if body else fallback)
    error = body.get("error")
    if isinstance(error, dict):
        return ErrorDetails(
            message=str(error.get("message") or fallback),
            error_type=_text_or_none(error.get("type")),
            param=_text_or_none(error.get("param")),
            code=error.get("code"),
        )
    if isinstance(error, str):
        return ErrorDetails(message=error)
    detail = body.get("detail")
    if isinstance(detail, dict):
        return ErrorDetails(
            message=str(detail.get("message") or fallback),
            error_type=_text_or_none(detail.get("error_type") or detail.get("type")),
            param=_text_or_none(detail.get("param")),
        )
    if isinstance(detail, list):
        return _validation_details(detail)
    if isinstance(detail, str):
        return ErrorDetails(message=detail)
    message = body.get("message")
    return ErrorDetails(message=str(message) if message else fallback)


def decode_body(response: httpx.Response) -> Any:
    """The response body as JSON when it is JSON, else as text (the body must be read)."""
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text


def error_from_response(response: httpx.Response) -> APIStatusError:
    """The typed exception for an error response whose body has been read."""
    body = decode_body(response)
    details = details_from_body(body, fallback=response.reason_phrase or "HTTP error")
    cls = error_class_for(response.status_code)
    return cls(response.status_code, details, body=body, response=response)


# Error ``type`` names (OpenAI's and vLLM's) that say which status an in-stream error stands for.
_STATUS_BY_ERROR_TYPE = {
    "invalid_request_error": 400,
    "BadRequestError": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "NotFoundError": 404,
    "rate_limit_error": 429,
}


# Strata's error ``code`` strings that a stream can end with, by the status the same failure
# has as a whole reply (docs/DETAILS.md's error table): a timed-out stream is a 504, not a 500.
_STATUS_BY_ERROR_CODE = {
    "timeout": 504,
    "engine_unavailable": 503,
    "out_of_memory": 503,
    "replica_unavailable": 503,
    "shutting_down": 503,
    "queue_full": 429,
}


def error_from_event(event: dict[str, Any], response: httpx.Response) -> APIStatusError:
    """The exception for a stream event ``{"error": {...}}`` sent after a 200 status.

    The status is the event's ``code`` when that is an HTTP error code (vLLM puts it
    there), else the one Strata's string ``code`` stands for (``timeout`` -> 504,
    ``engine_unavailable`` -> 503, ...), else the one its ``type`` names
    (``invalid_request_error`` -> 400, ...), else 500: the stream failed after it started.
    """
    details = details_from_body(event, fallback="Error in stream.")
    code = details.code
    if isinstance(code, int) and 400 <= code <= 599:
        status = code
    elif isinstance(code, str) and code in _STATUS_BY_ERROR_CODE:
        status = _STATUS_BY_ERROR_CODE[code]
    else:
        status = _STATUS_BY_ERROR_TYPE.get(details.error_type or "", 500)
    return error_class_for(status)(status, details, body=event, response=response)


def error_from_transport(exc: httpx.TransportError, request: httpx.Request) -> APIConnectionError:
    """The client's exception for an httpx transport failure: timeouts apart from the rest."""
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"Request timed out: {exc!r}", request=request)
    return APIConnectionError(f"Connection error: {exc!r}", request=request)
