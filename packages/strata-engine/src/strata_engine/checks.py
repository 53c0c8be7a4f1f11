"""The one authority for what a request may ask of a loaded model.

`check_request` knows only the model's facts (vocabulary size, context length), so the
engine, an async front and a test fake all refuse the same requests with the same
`(code, param, message)`. Servers add their own wire rules (limits, knobs) before it and
never repeat these.
"""

from __future__ import annotations

from collections.abc import Iterable

from strata_engine.api import ErrorCode, Request, RequestError


def check_request(request: Request, vocab_size: int, ctx_size: int) -> None:
    """Refuse what can never run: an empty prompt, ids outside the vocabulary, too long a request."""
    s, lp = request.sampling, request.logprobs
    if not request.prompt_ids:
        raise RequestError(
            "The prompt is empty; send at least one token.", "prompt_ids", ErrorCode.EMPTY_PROMPT
        )
    if s.allowed_token_ids is not None and not s.allowed_token_ids:
        raise RequestError(
            "The allowed token ids must not be empty.",
            "sampling.allowed_token_ids",
            ErrorCode.EMPTY_ALLOWED_IDS,
        )
    if s.structured is not None and s.allowed_token_ids is not None:
        raise RequestError(
            "The allowed token ids cannot be combined with structured output.",
            "sampling.allowed_token_ids",
            ErrorCode.INVALID_STRUCTURED_OUTPUT,
        )
    check_ids(request.prompt_ids, vocab_size, "prompt_ids")
    check_ids(s.allowed_token_ids or (), vocab_size, "sampling.allowed_token_ids")
    check_ids(lp.named_ids, vocab_size, "logprobs.named_ids")
    check_ids(s.stop_token_ids, vocab_size, "sampling.stop_token_ids")
    check_ids((token_id for token_id, _ in s.logit_bias), vocab_size, "sampling.logit_bias")
    check_ids(lp.renormalize_over or (), vocab_size, "logprobs.renormalize_over")
    check_ids(lp.top_within or (), vocab_size, "logprobs.top_within")
    if s.max_tokens < 0:
        raise RequestError(
            "max_tokens must be at least 0.", "sampling.max_tokens", ErrorCode.INVALID_MAX_TOKENS
        )
    if not 0 <= s.min_tokens <= s.max_tokens:
        raise RequestError(
            f"min_tokens must be between 0 and max_tokens ({s.max_tokens}), got {s.min_tokens}.",
            "sampling.min_tokens",
        )
    prompt_len = len(request.prompt_ids)
    wanted = prompt_len + s.max_tokens
    if wanted > ctx_size:
        raise RequestError(
            f"This model's maximum context length is {ctx_size} tokens. However, you requested "
            f"{wanted} tokens ({prompt_len} in the prompt, {s.max_tokens} for the completion). "
            "Please reduce the prompt or max_tokens.",
            "prompt_ids" if prompt_len >= ctx_size else "sampling.max_tokens",
            ErrorCode.CONTEXT_LENGTH_EXCEEDED,
        )


def check_ids(ids: Iterable[int], vocab_size: int, param: str) -> None:
    """Every id inside the vocabulary, or a `token_id_out_of_vocab` refusal naming `param`."""
    for token_id in ids:
        if not 0 <= token_id < vocab_size:
            raise RequestError(
                f"Token id {token_id} is outside the vocabulary (valid ids are 0..{vocab_size - 1}).",
                param,
                ErrorCode.TOKEN_ID_OUT_OF_VOCAB,
            )
