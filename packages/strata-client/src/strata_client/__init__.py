"""Typed client for Strata and any OpenAI/vLLM-compatible server.

Depends on httpx and pydantic only; it never imports the engine or the server.
"""

from ._async.client import AsyncStrataClient
from ._async.streaming import AsyncStream
from ._candidates import CandidateScore, CandidateScores
from ._exceptions import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    StrataError,
    UnprocessableEntityError,
)
from ._logprobs import (
    ChatChoiceLogprobs,
    ChatTokenLogprob,
    CompletionLogprobs,
    TopLogprob,
    parse_token_id,
)
from ._models import (
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatDelta,
    ChatMessage,
    Completion,
    CompletionChoice,
    CompletionChunk,
    DetokenizeResponse,
    Model,
    ModelList,
    PromptLogprob,
    PromptTokensDetails,
    TokenizeResponse,
    TokenizerInfo,
    Usage,
)
from ._sync.client import StrataClient
from ._sync.streaming import Stream
from ._version import __version__

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncStrataClient",
    "AsyncStream",
    "AuthenticationError",
    "BadRequestError",
    "CandidateScore",
    "CandidateScores",
    "ChatChoiceLogprobs",
    "ChatChunkChoice",
    "ChatCompletion",
    "ChatCompletionChoice",
    "ChatCompletionChunk",
    "ChatDelta",
    "ChatMessage",
    "ChatTokenLogprob",
    "Completion",
    "CompletionChoice",
    "CompletionChunk",
    "CompletionLogprobs",
    "DetokenizeResponse",
    "InternalServerError",
    "Model",
    "ModelList",
    "NotFoundError",
    "PermissionDeniedError",
    "PromptLogprob",
    "PromptTokensDetails",
    "RateLimitError",
    "StrataClient",
    "StrataError",
    "Stream",
    "TokenizeResponse",
    "TokenizerInfo",
    "TopLogprob",
    "UnprocessableEntityError",
    "Usage",
    "__version__",
    "parse_token_id",
]
