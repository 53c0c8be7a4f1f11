"""What the sync and async clients share: settings, URLs, headers, request bodies.

Only the I/O (send, sleep, read) differs between ``StrataClient`` and
``AsyncStrataClient``; everything decided without I/O lives here, once.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from ._version import __version__

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 2
USER_AGENT = f"strata-client/{__version__}"

Timeout = float | httpx.Timeout

# Arguments of the ``create`` methods that configure the call instead of going on the wire.
_CALL_OPTIONS = ("self", "extra_body", "timeout")


def server_root(base_url: str | None) -> str:
    """The server's root URL: ``base_url``, else ``$STRATA_BASE_URL``, else the default.

    A trailing ``/v1`` is dropped: OpenAI routes get ``/v1/...`` added back, while
    ``/tokenize``, ``/detokenize``, ``/health`` and ``/tokenizer_info`` live at the root.
    """
    url = base_url or os.environ.get("STRATA_BASE_URL") or DEFAULT_BASE_URL
    return url.rstrip("/").removesuffix("/v1")


def wire_body(arguments: dict[str, Any]) -> dict[str, Any]:
    """The JSON body for a ``create`` call's arguments (its ``locals()``).

    Every keyword argument is a wire field of the same name; ``None`` means "not sent"
    (the server's default applies). ``extra_body`` is merged last, so it can add fields
    this client does not know and override known ones.
    """
    body = {
        name: value for name, value in arguments.items() if name not in _CALL_OPTIONS and value is not None
    }
    body.update(arguments.get("extra_body") or {})
    return body


def tokenize_body(
    prompt: str | None,
    messages: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    add_special_tokens: bool | None,
    model: str | None,
) -> dict[str, Any]:
    """The ``/tokenize`` body: either a text prompt or chat messages, never both."""
    if (prompt is None) == (messages is None):
        raise ValueError("tokenize needs exactly one of prompt or messages")
    body: dict[str, Any] = (
        {"prompt": prompt}
        if messages is None
        else {"messages": messages, "add_generation_prompt": add_generation_prompt}
    )
    if add_special_tokens is not None:
        body["add_special_tokens"] = add_special_tokens
    if model is not None:
        body["model"] = model
    return body


def detokenize_body(tokens: list[int], model: str | None) -> dict[str, Any]:
    """The ``/detokenize`` body."""
    return {"tokens": tokens} if model is None else {"tokens": tokens, "model": model}


class BaseClient:
    """Settings and request building common to both clients."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        timeout: Timeout,
        max_retries: int,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = server_root(base_url)
        self.api_key = api_key or os.environ.get("STRATA_API_KEY") or None
        self.timeout = timeout
        self.max_retries = max_retries
        self._default_model: str | None = None

    def _client_options(self) -> dict[str, Any]:
        """Keyword arguments for the underlying ``httpx.Client`` / ``httpx.AsyncClient``."""
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return {
            "base_url": self.base_url,
            "headers": headers,
            "timeout": self.timeout,
            "follow_redirects": True,
        }

    @staticmethod
    def _request_options(json: Any, timeout: Timeout | None) -> dict[str, Any]:
        """``build_request`` keywords: the body, and the call's own timeout if it has one."""
        options: dict[str, Any] = {"json": json}
        if timeout is not None:
            options["timeout"] = timeout
        return options
