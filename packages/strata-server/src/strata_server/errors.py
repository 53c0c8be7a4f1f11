"""One error type for every refusal, and the handlers that turn any failure into the envelope.

Every response that is not a success has the OpenAI shape
`{"error": {"message", "type", "param", "code"}}`, whatever raised it: our own checks, the
engine's `RequestError`, Litestar's routing/size errors, or a bug (500, still enveloped).
Clients retry 5xx, so a 5xx must only ever mean a server fault, never a bad request.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException

from strata_engine.api import EngineOutOfMemory, EngineUnavailable, RequestError, is_out_of_memory
from strata_server.request_log import current_request_id

log = logging.getLogger("strata_server")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


# The engine names fields by its own request types; the wire names them by the route's body.
# `None` means "the route's prompt field" (`prompt` for completions, `messages` for chat);
# `STRUCTURED` the field that carried the request's constraint (`guided_regex`, ...).
STRUCTURED = "<structured>"
WIRE_PARAMS: dict[str, str | None] = {
    "prompt_ids": None,
    "messages": "messages",
    "sampling.max_tokens": "max_tokens",
    "sampling.allowed_token_ids": "allowed_token_ids",
    "sampling.stop_token_ids": "stop_token_ids",
    "sampling.structured": STRUCTURED,
    "sampling.logit_bias": "logit_bias",
    "sampling.min_tokens": "min_tokens",
    "logprobs.top_within": "allowed_token_ids",
    "logprobs.renormalize_over": "allowed_token_ids",
    "logprobs.named_ids": "logprob_token_ids",
}


OUT_OF_MEMORY_RETRY_S = 2  # the memory a failed step wanted frees as the requests beside it end


class ApiError(Exception):
    """A request the server refuses: HTTP `status` with an OpenAI error envelope."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.headers = headers or {}


def engine_refusal(
    exc: RequestError, prompt_param: str = "prompt", structured_param: str = "response_format"
) -> ApiError:
    """An engine `RequestError` as a 400, its param renamed to the wire field (code kept)."""
    param = exc.param
    if param is not None and param in WIRE_PARAMS:
        wire = WIRE_PARAMS[param]
        param = prompt_param if wire is None else structured_param if wire == STRUCTURED else wire
    return ApiError(exc.message, param=param, code=exc.code)


def error_body(
    message: str,
    status: int,
    param: str | None = None,
    code: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """The envelope as plain data (used for responses and for in-stream SSE errors).

    The request id goes beside `error`, not in it, so the error object keeps OpenAI's four keys.
    """
    error_type = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body: dict[str, Any] = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    if request_id is not None:
        body["request_id"] = request_id
    return body


def error_response(
    message: str,
    status: int,
    param: str | None = None,
    code: str | None = None,
    request_id: str | None = None,
) -> Response:
    return Response(
        content=msgspec.json.encode(error_body(message, status, param, code, request_id)),
        status_code=status,
        media_type=MediaType.JSON,
    )


def handle_api_error(request: Request, exc: ApiError) -> Response:
    response = error_response(exc.message, exc.status, exc.param, exc.code, current_request_id())
    response.headers.update(exc.headers)
    return response


def handle_engine_refusal(_: Request, exc: RequestError) -> Response:
    """An engine refusal no route translated (the routes translate theirs with their prompt field)."""
    return handle_api_error(_, engine_refusal(exc))


def handle_engine_unavailable(request: Request, exc: EngineUnavailable) -> Response:
    """The engine can run nothing any more (a tensor-parallel rank died): 503, until a restart."""
    return handle_api_error(request, unavailable(exc))


def unavailable(exc: EngineUnavailable) -> ApiError:
    """A lost engine as a 503 in the envelope (clients retry it, e.g. on another replica)."""
    return ApiError(str(exc), status=503, code="engine_unavailable")


def out_of_memory(exc: BaseException) -> ApiError:
    """A step that could not allocate as a 503 with Retry-After: the server goes on serving, and
    the same request may fit once the requests beside it have ended."""
    reason = str(exc) if isinstance(exc, EngineOutOfMemory) else f"{type(exc).__name__}: {exc}"
    return ApiError(
        f"The server ran out of memory computing this request ({reason}). Retry after "
        f"{OUT_OF_MEMORY_RETRY_S} s, or send less at once (a shorter prompt, fewer prompts, a smaller n).",
        status=503,
        code="out_of_memory",
        headers={"Retry-After": str(OUT_OF_MEMORY_RETRY_S)},
    )


def handle_out_of_memory(request: Request, exc: EngineOutOfMemory) -> Response:
    return handle_api_error(request, out_of_memory(exc))


def server_fault(exc: BaseException) -> ApiError | None:
    """The server's passing or lasting faults (not the caller's, not a bug) as their 503s;
    None for anything else (a bug, a 500)."""
    if is_out_of_memory(exc):
        return out_of_memory(exc)
    return unavailable(exc) if isinstance(exc, EngineUnavailable) else None


def handle_http_exception(request: Request, exc: HTTPException) -> Response:
    """Litestar's own refusals (unknown route, wrong method, body too large) in our envelope."""
    status = exc.status_code
    detail = exc.detail or "Request refused"
    if status == 404:
        detail = "Not found: no such route"
    headers: dict[str, Any] = dict(exc.headers or {})
    response = error_response(detail, status, code=None, request_id=current_request_id())
    response.headers.update(headers)
    return response


def handle_unexpected(request: Request, exc: Exception) -> Response:
    """A server bug: log it (with the request id) and still answer in the envelope; memory the
    machine could not give is a 503 the client retries, as the engine's own."""
    fault = server_fault(exc)
    if fault is not None:
        log.warning("request %s: %s", current_request_id(), fault.message)
        return handle_api_error(request, fault)
    request_id = current_request_id()
    log.exception("unhandled error in request %s", request_id, exc_info=exc)
    return error_response(f"Internal server error: {type(exc).__name__}", 500, request_id=request_id)


EXCEPTION_HANDLERS: dict[int | type[Exception], Any] = {
    ApiError: handle_api_error,
    RequestError: handle_engine_refusal,
    EngineUnavailable: handle_engine_unavailable,
    EngineOutOfMemory: handle_out_of_memory,
    HTTPException: handle_http_exception,
    Exception: handle_unexpected,
}
