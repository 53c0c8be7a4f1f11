# Generated from strata_client/_async/client.py by scripts/unasync.py: do not edit.
# Regenerate: python packages/strata-client/scripts/unasync.py
"""``StrataClient``: one HTTP connection pool, with retries.

Its surface: ``completions``, ``chat.completions``, ``models``, ``candidates``, ``tokenize``,
``detokenize``, ``tokenizer_info``, ``health``; settings and request bodies are in
``_base_client`` (no I/O there).
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from .._base_client import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    BaseClient,
    Timeout,
    detokenize_body,
    tokenize_body,
)
from .._exceptions import StrataError, error_from_response, error_from_transport
from .._models import DetokenizeResponse, TokenizeResponse, TokenizerInfo
from .._retry import is_retryable_error, is_retryable_status, retry_delay
from .._streaming import ChunkT
from .candidates import Candidates
from .closing import Closing
from .resources import Chat, Completions, Models
from .streaming import Stream

ResponseT = TypeVar("ResponseT", bound=BaseModel)


class StrataClient(BaseClient, Closing):
    """Synchronous client for a Strata (or any OpenAI/vLLM-compatible) server.

    ``base_url`` defaults to ``$STRATA_BASE_URL``, then ``http://127.0.0.1:8000``; with or
    without a trailing ``/v1``. ``api_key`` defaults to ``$STRATA_API_KEY`` and is sent as
    a bearer token. ``timeout`` (seconds) applies to each request unless the call passes
    its own. ``max_retries`` bounds the retries of connection failures, 429 and 503.
    Use it as a context manager, or call ``close()``, to release its connections.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        super().__init__(base_url, api_key, timeout, max_retries)
        self._http = httpx.Client(**self._client_options())
        self.completions = Completions(self)
        self.chat = Chat(self)
        self.models = Models(self)
        self.candidates = Candidates(self)

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        timeout: Timeout | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Send with retries; return a success response or raise the typed error."""
        request = self._http.build_request(method, path, **self._request_options(json, timeout))
        attempt = 0
        while True:
            retries_left = attempt < self.max_retries
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                if not (retries_left and is_retryable_error(exc)):
                    raise error_from_transport(exc, request) from exc
                time.sleep(retry_delay(attempt))
            else:
                if not response.is_error:
                    return response
                if not (retries_left and is_retryable_status(response.status_code)):
                    response.read()
                    response.close()
                    raise error_from_response(response)
                response.close()
                time.sleep(retry_delay(attempt, response))
            attempt += 1

    def _get(self, path: str, response_type: type[ResponseT]) -> ResponseT:
        response = self._send("GET", path)
        return response_type.model_validate(response.json())

    def _post(self, path: str, body: dict[str, Any], response_type: type[ResponseT]) -> ResponseT:
        response = self._send("POST", path, json=body)
        return response_type.model_validate(response.json())

    def _create(
        self,
        path: str,
        body: dict[str, Any],
        timeout: Timeout | None,
        response_type: type[ResponseT],
        chunk_type: type[ChunkT],
    ) -> ResponseT | Stream[ChunkT]:
        """POST a generation request; a stream of chunks when ``body["stream"]`` is true."""
        if "model" not in body:
            body["model"] = self._model_id()
        stream = bool(body.get("stream"))
        response = self._send("POST", path, json=body, timeout=timeout, stream=stream)
        if stream:
            return Stream(response, chunk_type)
        return response_type.model_validate(response.json())

    def _model_id(self) -> str:
        """The first model the server lists, fetched once and remembered."""
        if self._default_model is None:
            listed = self.models.list()
            if not listed.data:
                raise StrataError("the server lists no models; pass model=...")
            self._default_model = listed.data[0].id
        return self._default_model

    def tokenize(
        self,
        prompt: str | None = None,
        *,
        messages: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        add_special_tokens: bool | None = None,
        model: str | None = None,
    ) -> TokenizeResponse:
        """Token ids of a text prompt, or of chat ``messages`` rendered by the model's template.

        With ``messages`` the server renders its chat template (with the assistant turn's
        opening when ``add_generation_prompt``), so callers need no tokenizer of their own.
        """
        body = tokenize_body(prompt, messages, add_generation_prompt, add_special_tokens, model)
        return self._post("/tokenize", body, TokenizeResponse)

    def detokenize(self, tokens: list[int], model: str | None = None) -> DetokenizeResponse:
        """The text of a list of token ids."""
        return self._post("/detokenize", detokenize_body(tokens, model), DetokenizeResponse)

    def tokenizer_info(self) -> TokenizerInfo:
        """Special tokens and the chat template, as ``GET /tokenizer_info`` reports them."""
        return self._get("/tokenizer_info", TokenizerInfo)

    def health(self) -> bool:
        """True when ``GET /health`` answers 200; False for any other answer or none at all.

        Not retried: a probe should answer now.
        """
        try:
            response = self._http.get("/health")
        except httpx.TransportError:
            return False
        return response.status_code == 200

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()
