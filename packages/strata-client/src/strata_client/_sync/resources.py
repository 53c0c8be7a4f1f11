# Generated from strata_client/_async/resources.py by scripts/unasync.py: do not edit.
# Regenerate: python packages/strata-client/scripts/unasync.py
"""The route groups: ``completions``, ``chat.completions`` and ``models`` (see ``_resources``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._base_client import Timeout, wire_body
from .._models import ChatCompletion, ChatCompletionChunk, Completion, CompletionChunk, ModelList
from .._resources import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    MODELS_PATH,
    JsonSchema,
    Message,
    Prompt,
    Stop,
)
from .streaming import Stream

if TYPE_CHECKING:
    from .client import StrataClient


class Completions:
    """``POST /v1/completions``."""

    def __init__(self, client: StrataClient) -> None:
        self._client = client

    def create(
        self,
        *,
        prompt: Prompt,
        model: str | None = None,
        max_tokens: int | None = 16,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        n: int | None = None,
        seed: int | None = None,
        stop: Stop | None = None,
        stop_token_ids: list[int] | None = None,
        ignore_eos: bool | None = None,
        logprobs: int | bool | None = None,
        top_logprobs: int | None = None,
        echo: bool | None = None,
        allowed_token_ids: list[int] | None = None,
        logprob_token_ids: list[int] | None = None,
        return_tokens_as_token_ids: bool | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        logit_bias: dict[str, float] | None = None,
        min_tokens: int | None = None,
        include_stop_str_in_output: bool | None = None,
        skip_special_tokens: bool | None = None,
        spaces_between_special_tokens: bool | None = None,
        truncate_prompt_tokens: int | None = None,
        prompt_logprobs: int | None = None,
        add_special_tokens: bool | None = None,
        request_id: str | None = None,
        response_format: dict[str, Any] | None = None,
        structured_outputs: dict[str, Any] | None = None,
        guided_json: JsonSchema | str | None = None,
        guided_regex: str | None = None,
        guided_choice: list[str] | None = None,
        guided_grammar: str | None = None,
        guided_whitespace_pattern: str | None = None,
        stream: bool = False,
        stream_options: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        timeout: Timeout | None = None,
    ) -> Completion | Stream[CompletionChunk]:
        """Complete ``prompt`` (text, token ids, or a batch of either: one choice each).

        ``top_k``, ``stop_token_ids`` and ``ignore_eos`` are vLLM's sampling extensions.
        ``logprobs=N`` (or ``True`` with ``top_logprobs=N``) returns the legacy logprob
        object per choice; ``echo`` adds the prompt's tokens first; ``allowed_token_ids``
        restricts sampling (Strata then lists those ids with full-vocabulary values);
        ``return_tokens_as_token_ids`` makes every token string ``"token_id:<id>"``.
        Penalties and ``logit_bias`` (keys: token ids as strings) change sampling only;
        ``min_tokens``, ``include_stop_str_in_output``, ``skip_special_tokens``,
        ``spaces_between_special_tokens``, ``truncate_prompt_tokens``, ``prompt_logprobs``
        (each prompt token's value, rank and top N), ``add_special_tokens`` and ``request_id``
        are vLLM's.
        Structured output, one constraint per call: OpenAI's ``response_format``
        (``{"type": "json_schema", "json_schema": {"name", "schema"}}`` or ``json_object``),
        vLLM's ``structured_outputs`` (``{"json" | "regex" | "choice" | "grammar": ...}``) or
        its older ``guided_*`` fields; logprobs stay the model's raw values.
        ``stream=True`` returns a ``Stream`` of ``CompletionChunk``.
        """
        body = wire_body(locals())
        return self._client._create(COMPLETIONS_PATH, body, timeout, Completion, CompletionChunk)


class ChatCompletions:
    """``POST /v1/chat/completions``."""

    def __init__(self, client: StrataClient) -> None:
        self._client = client

    def create(
        self,
        *,
        messages: list[Message],
        model: str | None = None,
        max_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        n: int | None = None,
        seed: int | None = None,
        stop: Stop | None = None,
        stop_token_ids: list[int] | None = None,
        ignore_eos: bool | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        allowed_token_ids: list[int] | None = None,
        logprob_token_ids: list[int] | None = None,
        return_tokens_as_token_ids: bool | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        logit_bias: dict[str, float] | None = None,
        min_tokens: int | None = None,
        include_stop_str_in_output: bool | None = None,
        skip_special_tokens: bool | None = None,
        spaces_between_special_tokens: bool | None = None,
        truncate_prompt_tokens: int | None = None,
        prompt_logprobs: int | None = None,
        add_special_tokens: bool | None = None,
        request_id: str | None = None,
        response_format: dict[str, Any] | None = None,
        structured_outputs: dict[str, Any] | None = None,
        guided_json: JsonSchema | str | None = None,
        guided_regex: str | None = None,
        guided_choice: list[str] | None = None,
        guided_grammar: str | None = None,
        guided_whitespace_pattern: str | None = None,
        add_generation_prompt: bool | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        chat_template: str | None = None,
        documents: list[dict[str, Any]] | None = None,
        stream: bool = False,
        stream_options: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        timeout: Timeout | None = None,
    ) -> ChatCompletion | Stream[ChatCompletionChunk]:
        """Answer ``messages`` (rendered by the model's chat template).

        ``logprobs=True`` with ``top_logprobs=N`` returns ``choices[i].logprobs.content``;
        ``allowed_token_ids`` restricts sampling (on chat, values are renormalised over the
        allowed ids; ``logprob_token_ids`` cannot be combined with it). ``add_generation_prompt``,
        ``chat_template_kwargs`` and ``documents`` go to the template; ``chat_template`` replaces
        it (when the server trusts request templates); ``prompt_logprobs`` gives the rendered
        prompt's values. Structured output as for
        ``Completions.create``. ``stream=True`` returns a ``Stream`` of ``ChatCompletionChunk``.
        """
        body = wire_body(locals())
        return self._client._create(
            CHAT_COMPLETIONS_PATH,
            body,
            timeout,
            ChatCompletion,
            ChatCompletionChunk,
        )


class Chat:
    """Namespace so that calls read ``client.chat.completions.create(...)``."""

    def __init__(self, client: StrataClient) -> None:
        self.completions = ChatCompletions(client)


class Models:
    """``GET /v1/models``."""

    def __init__(self, client: StrataClient) -> None:
        self._client = client

    def list(self) -> ModelList:
        """The models the server serves (``.data[i].id``)."""
        return self._client._get(MODELS_PATH, ModelList)
