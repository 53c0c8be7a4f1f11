"""Candidate scoring: log P(candidate | prompt) for N continuations of one prompt.

A decision whose answers are words or phrases needs each answer's whole probability, the
product of its tokens' probabilities after the prompt. Each candidate becomes one engine
request, `prompt + candidate` with `max_tokens=0`, that wants prompt rows only from
`len(prompt)` on (`LogprobParams.prompt_rows_from`). Such a request may take the tokens
before that from the prefix cache, and the scheduler holds it back while another running
request is still computing the same prefix (`Scheduler._behind_shared_prefix`): the first
candidate computes the prompt, the others read its full blocks from the cache. The kernels
compute a position the same way whether its keys and values came from the cache or not, so
a candidate's rows are bit for bit those of echo-scoring `prompt + candidate` alone.

Text candidates are tokenized as continuations of the prompt text, as lm-evaluation-harness
does: `encode(prompt + candidate)` minus the prompt's own tokens when those are a prefix of
it; otherwise (a merge across the boundary) the candidate encoded alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from strata_engine import exactmath
from strata_engine.api import LogprobParams, LogprobRow, PromptScores, Request, SamplingParams
from strata_engine.protocol import EngineTokenizer


@dataclass(frozen=True)
class CandidateScore:
    """One candidate's numbers.

    `rows` are the candidate tokens' rows (row j scores `token_ids[j]`, raw full-vocabulary
    fp32 values); `logprob` their sum in float64 (`math.fsum`: exactly rounded, so the same
    bits in any order); `normalized` that sum renormalised over the request's candidates
    (float64, `exactmath`); `num_cached` the prompt tokens read from the prefix cache.
    """

    token_ids: tuple[int, ...]
    rows: tuple[LogprobRow, ...]
    logprob: float
    normalized: float
    num_cached: int = 0

    @property
    def probability(self) -> float:
        """The candidate's share of the candidates' probability: exp(`normalized`) by exactmath."""
        return float(exactmath.exp(self.normalized))


def continuation_ids(tokenizer: EngineTokenizer, prompt: str, candidate: str) -> list[int]:
    """A text candidate's token ids as a continuation of the text `prompt` (see the module doc)."""
    prompt_ids = tokenizer.encode(prompt, add_special=True, parse_special=True)
    whole = tokenizer.encode(prompt + candidate, add_special=True, parse_special=True)
    if len(whole) > len(prompt_ids) and whole[: len(prompt_ids)] == prompt_ids:
        return whole[len(prompt_ids) :]
    return alone_ids(tokenizer, candidate)


def alone_ids(tokenizer: EngineTokenizer, candidate: str) -> list[int]:
    """A text candidate encoded on its own (no BOS): the rule after a token-id prompt."""
    return tokenizer.encode(candidate, add_special=False, parse_special=True)


def candidate_requests(
    prompt_ids: Sequence[int], candidates: Sequence[Sequence[int]], top_n: int | None = None
) -> list[Request]:
    """One engine request per candidate: `prompt + candidate`, rows from the first candidate token.

    `top_n` alternatives per row (None or 0: only the candidate token's own value).
    """
    params = LogprobParams(top_n=top_n or 0, prompt_logprobs=True, prompt_rows_from=len(prompt_ids))
    return [
        Request(
            prompt_ids=(*prompt_ids, *candidate),
            sampling=SamplingParams(max_tokens=0),
            logprobs=params,
        )
        for candidate in candidates
    ]


def candidate_scores(
    num_prompt: int, candidates: Sequence[Sequence[int]], scores: Sequence[PromptScores]
) -> list[CandidateScore]:
    """Each candidate's rows (from its request's `PromptScores`), total and renormalised value."""
    rows = []
    for candidate, score in zip(candidates, scores, strict=True):
        mine = score.rows[num_prompt:]
        if len(mine) != len(candidate) or any(row is None for row in mine):
            raise ValueError("a candidate's prompt scores do not cover its tokens")
        rows.append(tuple(row for row in mine if row is not None))
    totals = [math.fsum(row.logprob for row in own) for own in rows]
    if max(totals) == -math.inf:  # no candidate is possible: nothing to renormalise over
        normalized = [-math.inf] * len(totals)
    else:
        normalized = exactmath.log_normalize(totals).tolist()
    return [
        CandidateScore(tuple(candidate), own, total, norm, score.num_cached_tokens)
        for candidate, own, total, norm, score in zip(
            candidates, rows, totals, normalized, scores, strict=True
        )
    ]
