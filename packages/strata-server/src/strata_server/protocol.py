"""Wire types of the OpenAI/vLLM-compatible routes, decoded strictly with msgspec.

Requests are decoded from the raw body by `decode_request` (never by Litestar's lenient
converter), so `"max_tokens": "5"` or `true` for an integer is a 400, not a silent coercion.
Unknown fields are ignored, as OpenAI and vLLM do, so newer clients keep working.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec

from strata_server.errors import ApiError

T = TypeVar("T")

TokenIds = list[int]
PromptInput = str | list[str | int | list[int]]


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class JsonSchemaFormat(msgspec.Struct, kw_only=True):
    """`response_format.json_schema`: OpenAI's named schema (always enforced, `strict` or not)."""

    name: str | None = None
    schema: dict[str, Any] | bool | None = None
    strict: bool | None = None
    description: str | None = None


class ResponseFormat(msgspec.Struct, kw_only=True):
    """`response_format`: `{"type": "text" | "json_object" | "json_schema", "json_schema": ...}`."""

    type: str
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(msgspec.Struct, kw_only=True):
    """vLLM's `structured_outputs`: one of `json`, `regex`, `choice`, `grammar`, `json_object`."""

    json: dict[str, Any] | bool | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: Any = None  # refused with a 400 (not supported)


class GenerationRequest(msgspec.Struct, kw_only=True):
    """The fields `/v1/completions` and `/v1/chat/completions` share: sampling, penalties and
    bias, stops and text options, prompt truncation, streaming and the logprob id lists.

    Keyword-only so each route's required field (`prompt`, `messages`) can follow them.
    """

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    top_logprobs: int | None = None
    prompt_logprobs: int | None = None  # vLLM's: per prompt token, its value, rank and the top N
    allowed_token_ids: list[int] | None = None
    logprob_token_ids: list[int] | None = None
    return_tokens_as_token_ids: bool = False
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    min_tokens: int = 0
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True  # only true (checks.NOT_IMPLEMENTED)
    truncate_prompt_tokens: int | None = None
    user: str | None = None
    # structured output (see structured_output.py): OpenAI's field, vLLM's, vLLM's older ones
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | bool | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None
    best_of: int | None = None  # only n (or none): one sample per choice
    request_id: str | None = None  # vLLM's: the reply's id (`cmpl-<id>`), header and log line
    # vLLM's fields this server does not implement: parsed so that a value other than the
    # neutral one is a 400 naming it (checks.NOT_IMPLEMENTED), never silently dropped
    min_p: float | None = None
    use_beam_search: bool = False
    length_penalty: float = 1.0
    guided_decoding_backend: str | None = None
    priority: int = 0
    logits_processors: list[Any] | None = None
    cache_salt: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None


class CompletionRequest(GenerationRequest):
    """`POST /v1/completions` body (OpenAI legacy completions plus vLLM extensions)."""

    prompt: PromptInput
    max_tokens: int | None = 16
    logprobs: bool | int | None = None
    echo: bool = False
    suffix: str | None = None
    add_special_tokens: bool = True  # vLLM's: BOS on text prompts when the model wants one
    prompt_embeds: Any = None  # not implemented (see GenerationRequest)


class TextPart(msgspec.Struct):
    type: str
    text: str | None = None


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[TextPart] | None = None
    name: str | None = None


class ChatCompletionRequest(GenerationRequest):
    """`POST /v1/chat/completions` body."""

    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = False  # one BOS on top of the template's (vLLM's chat default: false)
    chat_template: str | None = None  # vLLM's per-request template (needs --trust-request-chat-template)
    chat_template_kwargs: dict[str, Any] | None = None
    documents: list[dict[str, Any]] | None = None  # vLLM's: the template's `documents` variable
    # not implemented (see GenerationRequest)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = None
    include_reasoning: bool = True
    bad_words: list[str] | None = None
    echo: bool = False
    continue_final_message: bool = False
    mm_processor_kwargs: dict[str, Any] | None = None
    structural_tag: str | None = None


class TokenizeRequest(msgspec.Struct):
    """vLLM `POST /tokenize`: either `prompt` or `messages` (the rendered chat prompt)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    chat_template: str | None = None  # with `messages`, as on chat
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    tokens: list[int]  # required, as in vLLM: a body without it is a 400, not an empty answer
    model: str | None = None


# ---------------------------------------------------------------- responses


class PromptTokensDetails(msgspec.Struct):
    cached_tokens: int = 0


class Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class CompletionLogprobs(msgspec.Struct):
    """The legacy logprobs object: four lists of equal length, one entry per returned token."""

    tokens: list[str] = msgspec.field(default_factory=list)
    token_logprobs: list[float | None] = msgspec.field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = msgspec.field(default_factory=list)
    text_offset: list[int] = msgspec.field(default_factory=list)


class PromptLogprob(msgspec.Struct):
    """One entry of vLLM's `prompt_logprobs`: a raw value, its vocabulary rank, the token's text."""

    logprob: float
    rank: int
    decoded_token: str


# vLLM's shape: one entry per prompt token, None for the first; token id -> entry
PromptLogprobs = list[dict[int, PromptLogprob] | None]


class CompletionChoice(msgspec.Struct):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: str | None
    prompt_logprobs: PromptLogprobs | msgspec.UnsetType = msgspec.UNSET  # only when asked


class CompletionResponse(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None
    object: Literal["text_completion"] = "text_completion"
    system_fingerprint: str | None = None  # see provenance.py: changes exactly when the bits may


class TopLogprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None


class ChatLogprobEntry(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChatLogprobs(msgspec.Struct):
    content: list[ChatLogprobEntry] | None
    refusal: None = None


class ChatMessageOut(msgspec.Struct):
    role: str
    content: str | None


class ChatChoice(msgspec.Struct):
    index: int
    message: ChatMessageOut
    logprobs: ChatLogprobs | None
    finish_reason: str | None


class ChatCompletionResponse(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None
    object: Literal["chat.completion"] = "chat.completion"
    system_fingerprint: str | None = None
    prompt_logprobs: PromptLogprobs | msgspec.UnsetType = msgspec.UNSET  # vLLM's, for the rendered prompt


class ChatDelta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChatChunkChoice(msgspec.Struct):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: str | None


class ChatCompletionChunk(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    system_fingerprint: str | None = None


# ---------------------------------------------------------------- candidate scoring


class ScoreCandidatesRequest(msgspec.Struct, kw_only=True):
    """`POST /v1/score_candidates` body: continuations of one prompt to score (Strata's route).

    `prompt` is text or token ids; each candidate is text (tokenized as the prompt's
    continuation, see `strata_engine.scoring`) or token ids used as given. Either
    `candidates` or `json_schema` (a schema with a finite answer set, see `answer_set`).
    """

    prompt: str | list[int]
    candidates: list[str | list[int]] | None = None
    json_schema: dict[str, Any] | bool | None = None  # instead of `candidates`: its finite answers
    model: str | None = None
    top_logprobs: int | None = None  # alternatives listed at each candidate token (0..max_logprobs)
    return_tokens_as_token_ids: bool = False


class CandidateScore(msgspec.Struct):
    """One candidate: its tokens and their raw values, the sum, and its share among the candidates."""

    index: int
    text: str
    token_ids: list[int]
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    logprob: float
    normalized_logprob: float
    probability: float
    cached_tokens: int
    value: Any = msgspec.UNSET  # the parsed answer, only for a `json_schema` request


class ScoreCandidatesResponse(msgspec.Struct):
    id: str
    created: int
    model: str
    candidates: list[CandidateScore]
    usage: Usage
    object: Literal["candidate_scores"] = "candidate_scores"
    system_fingerprint: str | None = None


def decode_request(body: bytes, request_type: type[T]) -> T:
    """Decode a JSON body strictly into `request_type`, or raise a 400 `ApiError`.

    msgspec's message names the JSON path of the bad value; that path's first key becomes the
    envelope's `param`.
    """
    if not body.strip():
        raise ApiError("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        return msgspec.json.decode(body, type=request_type, strict=True)
    except msgspec.DecodeError as exc:
        message = str(exc)
        if isinstance(exc, msgspec.ValidationError):
            raise ApiError(f"Invalid request: {message}", param=_param_of(message)) from None
        raise ApiError(f"Malformed JSON body: {message}", code="invalid_json") from None
    except RecursionError:  # a free-form field (a JSON schema) nested thousands deep
        raise ApiError("The JSON body is nested too deeply.", code="invalid_json") from None


def _param_of(message: str) -> str | None:
    """`... - at `$.prompt[0]`` -> "prompt"; a missing field names itself."""
    if "at `$." in message:
        path = message.rsplit("at `$.", 1)[1].rstrip("`")
        return path.split("[", 1)[0].split(".", 1)[0] or None
    if message.startswith("Object missing required field `"):
        return message.split("`", 2)[1]
    return None


def encode(value: Any) -> bytes:
    """Serialise a response struct (or plain data) to JSON bytes."""
    return msgspec.json.encode(value)
