"""``POST /v1/score_candidates``: the exact probability of each continuation of one prompt.

Strata's own route (see docs/server.md): each candidate's raw token logprobs, their sum,
and the sum renormalised over the candidates. Text candidates are tokenized by the server
as continuations of a text prompt (after a token-id prompt, alone); id lists are used as given.
A ``json_schema`` with finitely many answers may stand for the candidates.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ._logprobs import WireModel
from ._models import Usage

SCORE_CANDIDATES_PATH = "/v1/score_candidates"

Candidate = str | list[int]


class CandidateScore(WireModel):
    """One candidate: ``logprob`` = sum of ``token_logprobs`` (raw, full vocabulary);
    ``normalized_logprob`` / ``probability``: its share among the request's candidates."""

    index: int = 0
    text: str = ""
    token_ids: list[int] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] | None = None
    logprob: float
    normalized_logprob: float
    probability: float
    cached_tokens: int = 0
    value: Any = None  # a ``json_schema`` answer's parsed value (``text`` is its JSON)


class CandidateScores(WireModel):
    """The body of a ``/v1/score_candidates`` answer: one entry per candidate, in order."""

    id: str = ""
    object: str = "candidate_scores"
    created: int = 0
    model: str = ""
    candidates: list[CandidateScore] = Field(default_factory=list)
    usage: Usage | None = None
    system_fingerprint: str | None = None

    @property
    def probabilities(self) -> list[float]:
        """Each candidate's probability among the candidates, in request order."""
        return [c.probability for c in self.candidates]

    @property
    def best(self) -> CandidateScore:
        """The most probable candidate (the first one on a tie)."""
        return max(self.candidates, key=lambda c: (c.normalized_logprob, -c.index))
