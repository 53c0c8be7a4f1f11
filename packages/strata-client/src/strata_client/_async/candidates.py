"""``client.candidates.score(...)``: ``POST /v1/score_candidates`` (the reply's types: ``_candidates``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from .._base_client import Timeout, wire_body
from .._candidates import SCORE_CANDIDATES_PATH, Candidate, CandidateScores

if TYPE_CHECKING:
    from .client import AsyncStrataClient


class AsyncCandidates:
    """``client.candidates.score(...)``."""

    def __init__(self, client: AsyncStrataClient) -> None:
        self._client = client

    async def score(
        self,
        *,
        prompt: str | list[int],
        candidates: list[Candidate] | None = None,
        json_schema: dict[str, Any] | None = None,
        model: str | None = None,
        top_logprobs: int | None = None,
        return_tokens_as_token_ids: bool | None = None,
        extra_body: dict[str, object] | None = None,
        timeout: Timeout | None = None,
    ) -> CandidateScores:
        """Score each candidate as the continuation of ``prompt`` (one request, the prompt
        computed once); ``top_logprobs=N`` also lists N alternatives at each candidate token.

        Instead of ``candidates``, ``json_schema`` (an enum, a const, a boolean, or a closed
        object of those) has the server score every answer it allows, as compact JSON text;
        each score's ``value`` is that answer parsed."""
        body = wire_body(locals())
        reply = await self._client._create(
            SCORE_CANDIDATES_PATH,
            body,
            timeout,
            CandidateScores,
            CandidateScores,
        )
        return cast(CandidateScores, reply)  # never streamed
