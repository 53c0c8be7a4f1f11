"""Every error strata_decide raises, so callers (the gateway, the CLI) map them in one place.

DecideError
├── LabelError              no usable single-token label set for a question
│   └── LabelCollisionError two labels are the same token
├── ContextOverflowError    the rendered prompt does not fit the model's context
└── UpstreamError           the server failed, timed out or broke its contract
"""

from __future__ import annotations

from strata_client import APIConnectionError, APIStatusError

CONTEXT_CODE = "context_length_exceeded"  # the error `code` OpenAI and strata-server send


class DecideError(Exception):
    """Base class of every strata_decide error."""


class LabelError(DecideError):
    """The served tokenizer offers no suitable single-token labels for a question."""


class LabelCollisionError(LabelError):
    """Two labels of one question map to the same token id, so their mass cannot be split."""


class ContextOverflowError(DecideError):
    """A prompt is longer than the model's context window."""

    def __init__(self, prompt_tokens: int | None, max_model_len: int | None, message: str = ""):
        self.prompt_tokens = prompt_tokens
        self.max_model_len = max_model_len
        super().__init__(
            message
            or f"the prompt has {prompt_tokens} tokens; the model's context holds {max_model_len} "
            "(including the one answer token)"
        )


class UpstreamError(DecideError):
    """The upstream server could not be reached, timed out, or answered outside its contract."""


def upstream_failure(error: APIStatusError | APIConnectionError) -> DecideError:
    """The strata_decide error for a failed upstream call.

    A 400 with the code `context_length_exceeded` is a ContextOverflowError (the code, never
    the message's wording, decides); every other failure is an UpstreamError.
    """
    if isinstance(error, APIStatusError):
        if error.status_code == 400 and error.code == CONTEXT_CODE:
            return ContextOverflowError(None, None, f"the prompt does not fit the model: {error.message}")
        return UpstreamError(f"upstream answered {error.status_code}: {error.message}")
    return UpstreamError(f"upstream unreachable: {error.message or type(error).__name__}")
