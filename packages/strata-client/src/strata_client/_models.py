"""Response models for every route, shaped like the OpenAI / vLLM wire format.

Fields other servers may leave out have defaults, and unknown fields are kept (``extra``
is allowed), so a response from any compatible server parses; read extras with
``model.model_extra``.
"""

from __future__ import annotations

from pydantic import Field

from ._logprobs import ChatChoiceLogprobs, CompletionLogprobs, WireModel


class PromptTokensDetails(WireModel):
    """Breakdown of the prompt tokens: how many came from the prefix cache."""

    cached_tokens: int | None = None


class Usage(WireModel):
    """Token counts of one request (all choices together)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class PromptLogprob(WireModel):
    """One entry of vLLM's ``prompt_logprobs``: a raw value, its vocabulary rank, the token's text."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


# one entry per prompt token (None for the first): token id -> its entry
PromptLogprobs = list[dict[int, PromptLogprob] | None]


class CompletionChoice(WireModel):
    """One choice of ``/v1/completions``: one per prompt (times ``n``), ``index`` in order."""

    index: int = 0
    text: str = ""
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    prompt_logprobs: PromptLogprobs | None = None  # when ``prompt_logprobs`` was sent


class Completion(WireModel):
    """The body of a non-streamed ``/v1/completions`` answer."""

    id: str = ""
    object: str = "text_completion"
    created: int = 0
    model: str = ""
    choices: list[CompletionChoice] = Field(default_factory=list)
    usage: Usage | None = None
    system_fingerprint: str | None = None


class CompletionChunk(Completion):
    """One SSE event of a streamed completion: the new text of each choice and its logprobs.

    The last event before ``[DONE]`` has ``usage`` and no choices when
    ``stream_options={"include_usage": True}`` was sent.
    """


class ChatMessage(WireModel):
    """The assistant message of a chat choice."""

    role: str = "assistant"
    content: str | None = None


class ChatCompletionChoice(WireModel):
    """One choice of ``/v1/chat/completions``."""

    index: int = 0
    message: ChatMessage = Field(default_factory=ChatMessage)
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletion(WireModel):
    """The body of a non-streamed ``/v1/chat/completions`` answer."""

    id: str = ""
    object: str = "chat.completion"
    created: int = 0
    model: str = ""
    choices: list[ChatCompletionChoice] = Field(default_factory=list)
    usage: Usage | None = None
    system_fingerprint: str | None = None
    prompt_logprobs: PromptLogprobs | None = None  # of the rendered prompt, when asked


class ChatDelta(WireModel):
    """What one chunk adds to a chat choice: the role first, then content pieces."""

    role: str | None = None
    content: str | None = None


class ChatChunkChoice(WireModel):
    """One choice's share of a chat chunk, with the logprobs of the tokens in ``delta``."""

    index: int = 0
    delta: ChatDelta = Field(default_factory=ChatDelta)
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(WireModel):
    """One SSE event of a streamed chat completion."""

    id: str = ""
    object: str = "chat.completion.chunk"
    created: int = 0
    model: str = ""
    choices: list[ChatChunkChoice] = Field(default_factory=list)
    usage: Usage | None = None
    system_fingerprint: str | None = None


class Model(WireModel):
    """One entry of ``/v1/models``."""

    id: str
    object: str = "model"
    created: int = 0
    owned_by: str = ""
    max_model_len: int | None = None
    sha256: str | None = None  # the model file's sha256 (Strata)


class ModelList(WireModel):
    """The body of ``/v1/models``."""

    object: str = "list"
    data: list[Model] = Field(default_factory=list)


class TokenizeResponse(WireModel):
    """The body of ``/tokenize`` (vLLM's shape)."""

    tokens: list[int]
    count: int
    max_model_len: int
    token_strs: list[str] | None = None


class DetokenizeResponse(WireModel):
    """The body of ``/detokenize`` (vLLM's shape)."""

    prompt: str


class TokenizerInfo(WireModel):
    """The body of ``/tokenizer_info``: special tokens and the chat template."""

    eos_token: str | None = None
    bos_token: str | None = None
    pad_token: str | None = None
    chat_template: str | None = None
