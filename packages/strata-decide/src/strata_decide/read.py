"""The one-token read: ask the server for the labels' raw logprobs at the answer position.

One ``/v1/completions`` call with the prompt as token ids, ``max_tokens: 1``,
``temperature: 0``, ``allowed_token_ids`` = the labels, ``logprobs`` = the number of labels
and ``return_tokens_as_token_ids``. On Strata (and any server with the same semantics) the
generated position's ``top_logprobs`` then lists every allowed id with its raw
full-vocabulary logprob, keyed ``token_id:<id>``.

A text-answered choice is read by ``read_texts`` instead: one ``/v1/score_candidates``
call scores each answer text whole (all its tokens) after the prompt.

Server failures become the errors of ``strata_decide.errors``: a prompt over the context is
ContextOverflowError, anything else UpstreamError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from strata_client import (
    APIConnectionError,
    APIStatusError,
    AsyncStrataClient,
    Completion,
    CompletionLogprobs,
    Usage,
)

from .errors import UpstreamError, upstream_failure


@dataclass(frozen=True)
class RawRead:
    """The raw logprob of each label (in label order) and the prompt's token count.

    ``cached_tokens``: how much of the prompt the server read from its prefix cache (its
    ``usage.prompt_tokens_details``); ``fingerprint``: the reply's ``system_fingerprint``
    (None where the server sends none). Both are shown by the gateway's ``x_trace``.
    """

    raw_logprobs: list[float]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    fingerprint: str | None = None


async def read_labels(
    client: AsyncStrataClient,
    model: str | None,
    prompt_ids: Sequence[int],
    label_ids: Sequence[int],
) -> RawRead:
    """The labels' raw logprobs at the position after ``prompt_ids``."""
    label_ids = list(label_ids)
    completion = await one_token_read(
        client, model, prompt_ids, logprobs=len(label_ids), allowed_token_ids=label_ids
    )
    values = first_position(completion).values_of(0, label_ids)
    raw = [values[token_id] for token_id in label_ids]
    missing = [token_id for token_id, value in values.items() if value is None]
    if missing:
        raise UpstreamError(
            f"the server left allowed label ids {missing} out of top_logprobs; it must list "
            "every allowed id with its raw logprob"
        )
    usage = completion.usage
    return RawRead(
        raw_logprobs=[value for value in raw if value is not None],  # all of them: none is missing
        prompt_tokens=usage.prompt_tokens if usage else len(prompt_ids),
        completion_tokens=usage.completion_tokens if usage else 1,
        cached_tokens=cached_of(usage),
        fingerprint=completion.system_fingerprint,
    )


async def read_texts(
    client: AsyncStrataClient, model: str | None, prompt_ids: Sequence[int], texts: Sequence[str]
) -> RawRead:
    """Each text's raw logprob as the whole continuation of ``prompt_ids`` (the sum over its
    tokens, full-vocabulary values), in the order given."""
    try:
        scores = await client.candidates.score(model=model, prompt=list(prompt_ids), candidates=list(texts))
    except (APIStatusError, APIConnectionError) as error:
        raise upstream_failure(error) from error
    if len(scores.candidates) != len(texts):
        raise UpstreamError(f"the server scored {len(scores.candidates)} of {len(texts)} candidates")
    read = len(prompt_ids) + sum(len(c.token_ids) for c in scores.candidates)
    # the candidate that computed the prompt found the least of it cached; the others then
    # read the prompt from the cache it filled
    cached = min((c.cached_tokens for c in scores.candidates), default=0)
    fingerprint = (scores.model_extra or {}).get("system_fingerprint")
    return RawRead(
        [c.logprob for c in scores.candidates],
        prompt_tokens=read,
        completion_tokens=0,
        cached_tokens=min(cached, len(prompt_ids)),
        fingerprint=fingerprint if isinstance(fingerprint, str) else None,
    )


def cached_of(usage: Usage | None) -> int:
    """The prompt tokens a reply says came from the prefix cache (0 where it does not say)."""
    details = usage.prompt_tokens_details if usage else None
    return (details.cached_tokens or 0) if details else 0


async def read_top(
    client: AsyncStrataClient, model: str | None, prompt_ids: Sequence[int], top: int = 20
) -> dict[int, float]:
    """The server's own top-``top`` at the position after ``prompt_ids``, keyed by token id."""
    completion = await one_token_read(client, model, prompt_ids, logprobs=top)
    return first_position(completion).top_by_id(0)


async def one_token_read(
    client: AsyncStrataClient, model: str | None, prompt_ids: Sequence[int], **options: Any
) -> Completion:
    """A greedy one-token completion of ``prompt_ids`` with id-keyed logprobs; upstream
    failures become ``UpstreamError``."""
    try:
        completion = await client.completions.create(
            model=model,
            prompt=list(prompt_ids),
            max_tokens=1,
            temperature=0,
            return_tokens_as_token_ids=True,
            **options,
        )
    except (APIStatusError, APIConnectionError) as error:
        raise upstream_failure(error) from error
    return cast(Completion, completion)  # not streamed


def first_position(completion: Completion) -> CompletionLogprobs:
    """The logprobs object of the single choice, checked to hold one generated position."""
    if not completion.choices or completion.choices[0].logprobs is None:
        raise UpstreamError("the server's completion has no logprobs")
    logprobs = completion.choices[0].logprobs
    if not logprobs.top_logprobs or logprobs.top_logprobs[0] is None:
        raise UpstreamError("the server's completion has no top_logprobs for the answer token")
    return logprobs
