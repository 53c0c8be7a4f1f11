"""The shared rules: body decoding, logprob counts, vocabulary, context, sampling knobs."""

from __future__ import annotations

import pytest

from strata_engine.api import RequestError
from strata_engine.checks import check_request
from strata_server.checks import (
    Limits,
    check_logit_bias,
    check_max_tokens,
    check_model,
    check_penalties,
    check_sampling,
    normalize_stop,
    refuse_not_implemented,
    resolve_top_n,
    truncate_prompts,
)
from strata_server.errors import ApiError, engine_refusal
from strata_server.limits import RequestLimits
from strata_server.plan import Plan, checked_plan, choice_seed, engine_requests, logprob_params, unique_ids
from strata_server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    decode_request,
)

LIMITS = Limits(vocab_size=1000, ctx_size=100, max_logprobs=20)


def refusal(fn, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args, **kwargs)
    return info.value


def planned(
    prompts: list[list[int]] | None = None,
    limits: Limits = LIMITS,
    ids_param: str = "prompt",
    **fields,
) -> Plan:
    """A completions body's fields through the one place that checks them (`checked_plan`),
    with `prompts` standing for what tokenising would give."""
    body = CompletionRequest(prompt="x", **fields)
    return checked_plan(
        body,
        limits,
        prompts=lambda: [[1, 2, 3]] if prompts is None else prompts,
        max_tokens=body.max_tokens,
        logprobs=body.logprobs,
        ids_param=ids_param,
        echo=body.echo,
    )


def submitted(prompts: list[list[int]] | None = None, limits: Limits = LIMITS, **fields) -> None:
    """What a route does: the wire rules, then the engine's one check of each request, its
    refusal renamed to the wire's field."""
    plan = planned(prompts, limits, **fields)
    for request in engine_requests(plan, limits.ctx_size):
        try:
            check_request(request, limits.vocab_size, limits.ctx_size)
        except RequestError as exc:
            raise engine_refusal(exc, plan.ids_param) from None


# ---------------------------------------------------------------- decoding


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"prompt": "x", "max_tokens": "5"}', "max_tokens"),
        (b'{"prompt": "x", "max_tokens": true}', "max_tokens"),
        (b'{"prompt": "x", "max_tokens": 5.0}', "max_tokens"),
        (b'{"prompt": [1, 2.5]}', "prompt"),
        (b'{"prompt": [[1, [2]]]}', "prompt"),
        (b'{"prompt": {"a": 1}}', "prompt"),
        (b'{"prompt": "x", "temperature": 1e999}', "temperature"),
        (
            b'{"prompt": "x", "stream_options": {"include_usage": "yes"}}',
            "stream_options",
        ),
        (b'{"max_tokens": 3}', "prompt"),
    ],
)
def test_wrong_types_are_400_naming_the_field(body: bytes, param: str) -> None:
    err = refusal(decode_request, body, CompletionRequest)
    assert err.status == 400
    assert err.param == param


@pytest.mark.parametrize("body", [b"{bad", b"", b"   ", b"\xff\xfe", b'{"prompt": "x"'])
def test_malformed_json_is_400(body: bytes) -> None:
    err = refusal(decode_request, body, CompletionRequest)
    assert err.status == 400
    assert err.code == "invalid_json"


def test_a_json_array_is_not_a_request() -> None:
    assert refusal(decode_request, b"[1, 2]", CompletionRequest).status == 400


def test_decoding_keeps_the_four_prompt_forms_and_ignores_unknown_fields() -> None:
    for prompt in ('"hi"', '["a", "b"]', "[1, 2]", "[[1], [2, 3]]"):
        body = f'{{"prompt": {prompt}, "some_future_field": 1}}'.encode()
        assert decode_request(body, CompletionRequest).prompt is not None


def test_chat_logprobs_must_be_a_bool() -> None:
    body = b'{"messages": [{"role": "user", "content": "hi"}], "logprobs": 5}'
    assert refusal(decode_request, body, ChatCompletionRequest).param == "logprobs"


# ---------------------------------------------------------------- logprob rules


def test_top_logprobs_without_logprobs_is_refused() -> None:
    assert refusal(resolve_top_n, None, 3, "logprobs").param == "top_logprobs"
    assert refusal(resolve_top_n, False, 0, "logprobs").param == "top_logprobs"


def test_top_n_forms() -> None:
    assert resolve_top_n(None, None, "logprobs") is None
    assert resolve_top_n(False, None, "logprobs") is None
    assert resolve_top_n(True, None, "logprobs") == 0
    assert resolve_top_n(True, 7, "logprobs") == 7
    assert resolve_top_n(3, None, "logprobs") == 3
    assert resolve_top_n(0, None, "logprobs") == 0


def test_logprob_count_is_capped_by_max_logprobs() -> None:
    planned(logprobs=20)
    err = refusal(planned, logprobs=21)
    assert err.param == "logprobs" and "20" in err.message
    assert refusal(planned, logprobs=-1).status == 400
    assert refusal(planned, logprobs=True, top_logprobs=21).param == "top_logprobs"


def test_allowed_ids_raise_the_cap_to_their_count() -> None:
    allowed = list(range(10, 265))  # a 255-option decision
    planned(logprobs=255, allowed_token_ids=allowed)
    assert refusal(planned, logprobs=256, allowed_token_ids=allowed).status == 400
    # a small allowed set does not lower the server's cap
    planned(logprobs=20, allowed_token_ids=[5, 6])


@pytest.mark.parametrize(
    ("prompts", "fields", "param", "bad_id"),
    [
        ([[1, 1000]], {}, "prompt", 1000),
        ([[1, -3]], {}, "prompt", -3),
        (None, {"allowed_token_ids": [4, 5000]}, "allowed_token_ids", 5000),
        (None, {"logprobs": 1, "logprob_token_ids": [99999]}, "logprob_token_ids", 99999),
        (None, {"stop_token_ids": [1234]}, "stop_token_ids", 1234),
    ],
)
def test_ids_outside_the_vocabulary_are_named(prompts, fields: dict, param: str, bad_id: int) -> None:
    err = refusal(submitted, prompts, **fields)
    assert err.param == param
    assert str(bad_id) in err.message


def test_empty_allowed_ids_and_logprob_ids_without_logprobs_are_refused() -> None:
    assert refusal(submitted, allowed_token_ids=[]).param == "allowed_token_ids"
    assert refusal(submitted, logprob_token_ids=[3]).param == "logprob_token_ids"


def test_logprob_fields_are_checked_before_the_prompt_is_tokenised() -> None:
    def never() -> list[list[int]]:
        raise AssertionError("the prompt was tokenised before a bad field was refused")

    for fields, param in (
        ({"logprobs": 21}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"prompt_logprobs": 21}, "prompt_logprobs"),
        ({"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
        ({"logprob_token_ids": [3]}, "logprob_token_ids"),
    ):
        body = CompletionRequest(prompt="x", **fields)
        err = refusal(
            checked_plan,
            body,
            LIMITS,
            prompts=never,
            max_tokens=1,
            logprobs=body.logprobs,
            ids_param="prompt",
        )
        assert err.param == param, fields


def test_context_overflow_says_maximum_context_length() -> None:
    submitted([[1] * 95], max_tokens=5)
    err = refusal(submitted, [[1] * 95], max_tokens=6)
    assert "maximum context length" in err.message and "101" in err.message
    err = refusal(submitted, [[1] * 101], max_tokens=0, echo=True)
    assert "maximum context length" in err.message
    # no max_tokens: the prompt must leave room for at least one token
    err = refusal(submitted, [[1] * 100], max_tokens=None)
    assert err.code == "context_length_exceeded" and err.param == "prompt"
    submitted([[1] * 99], max_tokens=None)


def test_empty_prompt_is_refused_naming_the_routes_field() -> None:
    assert refusal(submitted, [[]]).param == "prompt"
    assert refusal(submitted, [[]], ids_param="messages").param == "messages"


def test_huge_max_tokens_is_a_context_refusal_not_a_crash() -> None:
    err = refusal(submitted, max_tokens=10**30)
    assert "maximum context length" in err.message


# ---------------------------------------------------------------- other knobs


def test_max_tokens_zero_only_with_echo() -> None:
    check_max_tokens(0, echo=True)
    assert refusal(check_max_tokens, 0, echo=False).param == "max_tokens"
    assert refusal(check_max_tokens, -1, echo=True).param == "max_tokens"


def test_unknown_model_is_404() -> None:
    check_model(None, "served")
    check_model("served", "served")
    err = refusal(check_model, "gpt-4", "served")
    assert err.status == 404 and err.param == "model"


def test_sampling_defaults_and_refusals() -> None:
    knobs = {"n": 1, "temperature": None, "top_p": None, "top_k": None, "seed": None}
    assert check_sampling(**knobs, vocab_size=10) == (1.0, 1.0, 0)
    assert check_sampling(**{**knobs, "temperature": 1e-9}, vocab_size=10)[0] == 0.0
    assert check_sampling(**{**knobs, "top_k": 50}, vocab_size=10)[2] == 0
    assert check_sampling(**{**knobs, "top_k": -1}, vocab_size=10)[2] == 0
    for bad in (
        {"n": 0},
        {"n": 10**9},
        {"temperature": -0.1},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -2},
        {"seed": 2**64},
    ):
        with pytest.raises(ApiError):
            check_sampling(**{**knobs, **bad}, vocab_size=10)


def test_stop_and_unsupported_fields() -> None:
    limits = RequestLimits(max_stop_strings=2, max_stop_chars=5)
    assert normalize_stop("x", limits) == ("x",)
    assert normalize_stop(["a", "b"], limits) == ("a", "b")
    assert refusal(normalize_stop, ["a", ""], limits).param == "stop"
    assert "--max-stop-strings" in refusal(normalize_stop, ["a", "b", "c"], limits).message
    assert "--max-stop-chars" in refusal(normalize_stop, ["abc", "def"], limits).message
    neutral = CompletionRequest(prompt="x", suffix=None, min_p=0.0, priority=0, use_beam_search=False)
    refuse_not_implemented(neutral)
    refuse_not_implemented(
        ChatCompletionRequest(messages=[], tools=[], tool_choice="none", include_reasoning=True)
    )
    assert refusal(refuse_not_implemented, CompletionRequest(prompt="x", suffix="!")).param == "suffix"
    assert refusal(refuse_not_implemented, CompletionRequest(prompt="x", min_p=0.1)).param == "min_p"
    assert (
        refusal(refuse_not_implemented, ChatCompletionRequest(messages=[], tool_choice="auto")).param
        == "tool_choice"
    )
    assert (
        refusal(refuse_not_implemented, ChatCompletionRequest(messages=[], include_reasoning=False)).code
        == "unsupported"
    )


def test_penalties_bias_and_truncation() -> None:
    assert check_penalties(None, None, None) == (0.0, 0.0)
    assert check_penalties(-2.0, 2.0, 1.0) == (-2.0, 2.0)
    assert refusal(check_penalties, 2.5, None, None).param == "presence_penalty"
    assert refusal(check_penalties, None, float("nan"), None).param == "frequency_penalty"
    assert refusal(check_penalties, None, None, 1.1).code == "unsupported"
    assert check_logit_bias({"5": 1.0, "7": -100}) == ((5, 1.0), (7, -100))
    for bad in ({"x": 1.0}, {"-1": 1.0}, {"5": 100.5}, {"5": 1.0, "05": 2.0}, {"٣": 1.0}):
        assert refusal(check_logit_bias, bad).param == "logit_bias"
    prompts = [[1, 2, 3, 4], [5]]
    assert truncate_prompts(prompts, None, 8) == prompts
    assert truncate_prompts(prompts, 2, 8) == [[3, 4], [5]]
    assert truncate_prompts(prompts, -1, 3) == [[2, 3, 4], [5]]
    for bad_keep in (0, -2, 9):
        assert refusal(truncate_prompts, prompts, bad_keep, 8).param == "truncate_prompt_tokens"


# ---------------------------------------------------------------- what the engine is asked


def test_completions_allowed_ids_ask_for_a_raw_top_n_within_them() -> None:
    params = planned(logprobs=2, allowed_token_ids=[7, 8, 9], logprob_token_ids=[8, 3, 8]).logprobs
    assert params.top_within == (7, 8, 9) and params.top_n == 2
    assert params.named_ids == (8, 3)
    assert params.renormalize_over is None


def test_chat_allowed_ids_ask_for_renormalised_values() -> None:
    params = logprob_params(2, None, (), (7, 8), renormalize=True)
    assert params.renormalize_over == (7, 8) and params.top_within is None
    assert params.named_ids == ()


def test_plain_logprobs_ask_for_the_natural_top_n_and_echo_rows() -> None:
    params = planned(logprobs=4, echo=True).logprobs
    assert params.top_n == 4 and params.prompt_logprobs
    echo_alone = planned(echo=True).logprobs
    assert echo_alone.top_n is None and not echo_alone.prompt_logprobs


def test_logprob_token_ids_alone_replace_the_natural_top_n() -> None:
    params = planned(logprobs=5, logprob_token_ids=[9, 4]).logprobs
    assert params.top_n == 0 and params.named_ids == (9, 4)


def test_every_choice_is_asked_the_plans_one_listing() -> None:
    plan = planned([[1, 2], [3]], n=2, logprobs=3, prompt_logprobs=2, seed=5)
    requests = engine_requests(plan, LIMITS.ctx_size)
    assert len(requests) == 4
    assert all(r.logprobs == plan.logprobs for r in requests)
    assert plan.logprobs.prompt_top_n == 2 and plan.logprobs.prompt_logprobs
    assert [r.sampling.seed for r in requests] == [5, 6, 5, 6]


def test_choice_seeds_differ_per_sample_and_stay_in_range() -> None:
    assert choice_seed(None, 3) is None
    assert [choice_seed(10, i) for i in range(3)] == [10, 11, 12]
    assert 0 <= choice_seed(-1, 0) < 2**63
    assert 0 <= choice_seed(2**64 - 1, 5) < 2**63


def test_repeated_allowed_ids_count_once_towards_the_cap() -> None:
    allowed = unique_ids([7] * 30 + [8])
    assert allowed == (7, 8)
    big = Limits(vocab_size=1000, ctx_size=100, max_logprobs=1)
    assert refusal(planned, limits=big, logprobs=3, allowed_token_ids=[7] * 30 + [8]).param == "logprobs"
    planned(limits=big, logprobs=2, allowed_token_ids=[7] * 30 + [8])
