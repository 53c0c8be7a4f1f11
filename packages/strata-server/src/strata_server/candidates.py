"""`POST /v1/score_candidates`: the exact probability of each of N continuations of one prompt.

A route of its own rather than an extension of `/v1/completions`: the answer is one
distribution over the candidates (each with its tokens' values, the sum and the renormalised
share), not a list of generated choices, and no sampling field applies. The engine part is
`strata_engine.scoring`: one engine request per candidate, the prompt computed once and read
by the others from the prefix cache, each candidate's values bit for bit those of echoing
`prompt + candidate` alone on `/v1/completions`. A body may give a `json_schema` with a
finite answer set instead of `candidates` (see `answer_set`): each answer's compact JSON text
is scored as a text candidate, and its parsed `value` comes back with its scores.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from strata_engine.api import PromptScores, Request, RequestError
from strata_engine.checks import check_ids
from strata_engine.protocol import ChoiceStream
from strata_engine.scoring import alone_ids, candidate_requests, candidate_scores, continuation_ids
from strata_server.answer_set import finite_answers
from strata_server.checks import (
    check_input_size,
    check_model,
    check_prompt_tokens,
    check_top_logprobs,
)
from strata_server.context import ServerContext
from strata_server.envelope import record_usage
from strata_server.errors import ApiError, engine_refusal
from strata_server.formatting import safe_logprob, token_label
from strata_server.protocol import (
    CandidateScore,
    PromptTokensDetails,
    ScoreCandidatesRequest,
    ScoreCandidatesResponse,
    Usage,
)
from strata_server.render import encode_text


@dataclass(frozen=True)
class CandidatePlan:
    """A checked scoring request: the prompt and every candidate as token ids."""

    prompt_ids: list[int]
    candidates: list[list[int]]
    texts: list[str]
    top_n: int | None
    as_token_ids: bool
    values: list[Any] | None = None  # each answer's parsed value (a `json_schema` request)

    def requests(self) -> list[Request]:
        return candidate_requests(self.prompt_ids, self.candidates, self.top_n)


def candidate_plan(body: ScoreCandidatesRequest, ctx: ServerContext) -> CandidatePlan:
    """Check a body and tokenize it (every refusal a 4xx naming the field)."""
    check_model(body.model, ctx.served_name)
    limits = ctx.limits
    # one engine request per candidate: --max-n bounds them as it bounds choices
    most = min(limits.request.max_candidates, limits.max_n or limits.request.max_candidates)
    given, values = _given_candidates(body, most)
    if not 1 <= len(given) <= most:
        raise ApiError(
            f"`candidates` must hold between 1 and {most} entries, got {len(given)}"
            + (" (--max-candidates, --max-n)." if len(given) > most else "."),
            param="candidates",
        )
    check_top_logprobs(body.top_logprobs, limits)
    size = len(body.prompt) + sum(len(c) for c in given)
    check_input_size(size, limits.request, "prompt", "The prompt and candidates have")
    prompt_ids = _prompt_ids(body.prompt, ctx)
    candidates = [_candidate_ids(body.prompt, c, ctx) for c in given]
    longest = len(prompt_ids) + max(len(c) for c in candidates)
    check_prompt_tokens(longest, limits, "candidates", "The prompt with its longest candidate")
    texts = [
        c if isinstance(c, str) else ctx.tokenizer.decode(ids)
        for c, ids in zip(given, candidates, strict=True)
    ]
    return CandidatePlan(
        prompt_ids, candidates, texts, body.top_logprobs, body.return_tokens_as_token_ids, values
    )


def _given_candidates(
    body: ScoreCandidatesRequest, most: int
) -> tuple[Sequence[str | list[int]], list[Any] | None]:
    """The candidates to score: as given, or a `json_schema`'s answers as text with their values."""
    if (body.candidates is None) == (body.json_schema is None):
        both = body.candidates is not None
        raise ApiError(
            "Give exactly one of `candidates` or `json_schema`.",
            param="json_schema" if both else "candidates",
        )
    if body.candidates is not None:
        return body.candidates, None
    answers = finite_answers(body.json_schema, most)
    return [answer.text for answer in answers], [answer.value for answer in answers]


def _prompt_ids(prompt: str | list[int], ctx: ServerContext) -> list[int]:
    if isinstance(prompt, str):
        return encode_text(prompt, ctx.tokenizer)
    if not prompt:
        raise ApiError("`prompt` must not be an empty token-id list.", param="prompt")
    _check_ids(prompt, ctx, "prompt")
    return list(prompt)


def _candidate_ids(prompt: str | list[int], candidate: str | list[int], ctx: ServerContext) -> list[int]:
    """Token ids as given; text as the continuation of a text prompt, or alone after ids."""
    if isinstance(candidate, list):
        ids = list(candidate)
        _check_ids(ids, ctx, "candidates")
    elif candidate == "":
        raise ApiError("`candidates` must not contain an empty string.", param="candidates")
    elif isinstance(prompt, str):
        ids = continuation_ids(ctx.tokenizer, prompt, candidate)
    else:
        ids = alone_ids(ctx.tokenizer, candidate)
    if not ids:
        raise ApiError("`candidates` must not contain an empty candidate.", param="candidates")
    return ids


def _check_ids(ids: Sequence[int], ctx: ServerContext, param: str) -> None:
    try:
        check_ids(ids, ctx.limits.vocab_size, param)
    except RequestError as exc:
        raise engine_refusal(exc) from None


async def score_reply(
    plan: CandidatePlan, events: ChoiceStream, ctx: ServerContext, request_id: str
) -> ScoreCandidatesResponse:
    """Wait for every candidate's prompt scores, then build the one reply."""
    scores: list[PromptScores | None] = [None] * len(plan.candidates)
    async for index, event in events:
        if isinstance(event, PromptScores):
            scores[index] = event
    if any(score is None for score in scores):
        raise ApiError("The scores ended early.", status=500)
    results = candidate_scores(len(plan.prompt_ids), plan.candidates, [s for s in scores if s is not None])
    tok = ctx.tokenizer
    out = []
    for index, (text, result) in enumerate(zip(plan.texts, results, strict=True)):
        top = None
        if plan.top_n is not None:
            top = [
                {token_label(tok, i, plan.as_token_ids): safe_logprob(v) for i, v in row.listed}
                for row in result.rows
            ]
        out.append(
            CandidateScore(
                index=index,
                text=text,
                token_ids=list(result.token_ids),
                tokens=[token_label(tok, i, plan.as_token_ids) for i in result.token_ids],
                token_logprobs=[safe_logprob(row.logprob) for row in result.rows],
                top_logprobs=top,
                logprob=safe_logprob(result.logprob),
                normalized_logprob=safe_logprob(result.normalized),
                probability=result.probability,
                cached_tokens=result.num_cached,
                value=msgspec.UNSET if plan.values is None else plan.values[index],
            )
        )
    read = sum(len(plan.prompt_ids) + len(c) for c in plan.candidates)
    cached = sum(r.num_cached for r in results)
    usage = Usage(read, 0, read, PromptTokensDetails(cached_tokens=cached))
    record_usage(usage, ctx)
    return ScoreCandidatesResponse(
        id=request_id,
        created=int(time.time()),
        model=ctx.served_name,
        candidates=out,
        usage=usage,
        system_fingerprint=ctx.system_fingerprint,
    )
