"""The listing a response shows, computed once in the engine: top-N within a set, the one
tie rule, named ids appended, renormalised values; and the request checks' codes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from strata_engine.api import ErrorCode, LogprobParams, Request, RequestError, SamplingParams
from strata_engine.checks import check_request
from strata_engine.logprobs import best_first, build_row

VALUES = [-5.0, -0.5, -5.0, -7.0, -9.0, -0.25]  # ids 0 and 2 tie


def row(params: LogprobParams, token_id: int = 3):
    return build_row(np.array(VALUES, dtype=np.float32), token_id, params)


def test_ties_go_to_the_lower_id_and_nan_sorts_last() -> None:
    assert best_first([(4, -1.0), (2, -1.0), (9, math.nan), (7, -0.5)], 4)[:3] == (
        (7, -0.5),
        (2, -1.0),
        (4, -1.0),
    )
    assert best_first([(1, math.nan), (0, -3.0)], 2) == ((0, -3.0), (1, math.nan))


def test_natural_top_n() -> None:
    r = row(LogprobParams(top_n=3))
    assert r.listed == r.top == ((5, -0.25), (1, -0.5), (0, -5.0))
    assert r.value == r.logprob == -7.0


def test_top_n_within_a_set_lists_raw_values_best_first() -> None:
    r = row(LogprobParams(top_n=3, top_within=(3, 2, 0, 4)))
    assert r.listed == ((0, -5.0), (2, -5.0), (3, -7.0))  # 1 and 5 are better but not allowed
    assert r.top == ()  # the natural top-N is not what is shown, so it is not computed


def test_named_ids_are_appended_once_with_raw_values() -> None:
    r = row(LogprobParams(top_n=1, top_within=(3, 4), named_ids=(3, 0)))
    assert r.listed == ((3, -7.0), (0, -5.0))
    alone = row(LogprobParams(top_n=0, named_ids=(4, 1)))
    assert alone.listed == ((4, -9.0), (1, -0.5))


def test_renormalised_listing_and_value() -> None:
    r = row(LogprobParams(top_n=2, renormalize_over=(3, 4)))
    total = math.log(math.exp(-7.0) + math.exp(-9.0))
    assert [i for i, _ in r.listed] == [3, 4]
    assert r.value == pytest.approx(-7.0 - total) and r.logprob == -7.0


@pytest.mark.parametrize(
    ("request_", "code", "param"),
    [
        (Request(()), ErrorCode.EMPTY_PROMPT, "prompt_ids"),
        (Request((1, 99)), ErrorCode.TOKEN_ID_OUT_OF_VOCAB, "prompt_ids"),
        (
            Request((1,), SamplingParams(allowed_token_ids=())),
            ErrorCode.EMPTY_ALLOWED_IDS,
            "sampling.allowed_token_ids",
        ),
        (
            Request((1,), logprobs=LogprobParams(named_ids=(50,))),
            ErrorCode.TOKEN_ID_OUT_OF_VOCAB,
            "logprobs.named_ids",
        ),
        (
            Request((1,) * 8, SamplingParams(max_tokens=3)),
            ErrorCode.CONTEXT_LENGTH_EXCEEDED,
            "sampling.max_tokens",
        ),
        (Request((1,) * 11, SamplingParams(max_tokens=0)), ErrorCode.CONTEXT_LENGTH_EXCEEDED, "prompt_ids"),
    ],
)
def test_refusals_carry_a_code_and_the_engine_field(request_: Request, code: str, param: str) -> None:
    with pytest.raises(RequestError) as info:
        check_request(request_, vocab_size=20, ctx_size=10)
    assert (info.value.code, info.value.param) == (code, param)


@pytest.mark.parametrize(("token_id", "rank"), [(5, 1), (1, 2), (0, 4), (2, 4), (3, 5), (4, 6)])
def test_prompt_rows_carry_vllms_rank_and_natural_top(token_id: int, rank: int) -> None:
    """vLLM counts the ids whose value is >= the token's (a tie counts against it: ids 0 and 2)."""
    values = np.array(VALUES, dtype=np.float32)
    params = LogprobParams(top_n=2, top_within=(3, 4), prompt_logprobs=True, prompt_top_n=3)
    r = build_row(values, token_id, params, prompt=True)
    assert r.rank == rank
    assert r.prompt_top == ((5, -0.25), (1, -0.5), (0, -5.0))  # natural, whatever the listing's set
    assert r.listed == ((3, -7.0), (4, -9.0))
    generated = build_row(values, token_id, params)  # a generated token's row: no prompt extras
    assert generated.rank is None and generated.prompt_top == ()
