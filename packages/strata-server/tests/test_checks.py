"""The shared rules: body decoding, logprob counts, vocabulary, context, sampling knobs."""

from __future__ import annotations

import pytest

from strata_engine.api import RequestError, SamplingParams
from strata_engine.checks import check_request
from strata_server.checks import (
    Limits,
    check_logit_bias,
    check_logprobs,
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
from strata_server.plan import Plan, choice_seed, engine_requests, logprob_params, unique_ids
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


def submitted(plan: Plan, limits: Limits) -> None:
    """What a route does: wire rules, then the engine's one check of each request, its
    refusal renamed to the wire's field."""
    check_logprobs(plan, limits)
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


def plan(allowed_ids: tuple[int, ...] | None = None, **kwargs) -> Plan:
    base = {"prompts": [[1, 2, 3]], "max_tokens": 5}
    base.update({"sampling": SamplingParams(allowed_token_ids=allowed_ids)}, **kwargs)
    return Plan(**base)


def test_logprob_count_is_capped_by_max_logprobs() -> None:
    check_logprobs(plan(top_n=20), LIMITS)
    err = refusal(check_logprobs, plan(top_n=21), LIMITS)
    assert err.param == "logprobs" and "20" in err.message
    assert refusal(check_logprobs, plan(top_n=-1), LIMITS).status == 400


def test_allowed_ids_raise_the_cap_to_their_count() -> None:
    allowed = tuple(range(10, 265))  # a 255-option decision
    check_logprobs(plan(top_n=255, allowed_ids=allowed), LIMITS)
    assert refusal(check_logprobs, plan(top_n=256, allowed_ids=allowed), LIMITS).status == 400
    # a small allowed set does not lower the server's cap
    check_logprobs(plan(top_n=20, allowed_ids=(5, 6)), LIMITS)


@pytest.mark.parametrize(
    ("kwargs", "param", "bad_id"),
    [
        ({"prompts": [[1, 1000]]}, "prompt", 1000),
        ({"prompts": [[1, -3]]}, "prompt", -3),
        ({"allowed_ids": (4, 5000)}, "allowed_token_ids", 5000),
        ({"top_n": 1, "named_ids": (99999,)}, "logprob_token_ids", 99999),
        ({"sampling": SamplingParams(stop_token_ids=(1234,))}, "stop_token_ids", 1234),
    ],
)
def test_ids_outside_the_vocabulary_are_named(kwargs: dict, param: str, bad_id: int) -> None:
    err = refusal(submitted, plan(**kwargs), LIMITS)
    assert err.param == param
    assert str(bad_id) in err.message


def test_empty_allowed_ids_and_logprob_ids_without_logprobs_are_refused() -> None:
    assert refusal(submitted, plan(allowed_ids=()), LIMITS).param == "allowed_token_ids"
    assert refusal(submitted, plan(named_ids=(3,)), LIMITS).param == "logprob_token_ids"


def test_context_overflow_says_maximum_context_length() -> None:
    submitted(plan(prompts=[[1] * 95], max_tokens=5), LIMITS)
    err = refusal(submitted, plan(prompts=[[1] * 95], max_tokens=6), LIMITS)
    assert "maximum context length" in err.message and "101" in err.message
    err = refusal(submitted, plan(prompts=[[1] * 101], max_tokens=0), LIMITS)
    assert "maximum context length" in err.message
    # no max_tokens: the prompt must leave room for at least one token
    err = refusal(submitted, plan(prompts=[[1] * 100], max_tokens=None), LIMITS)
    assert err.code == "context_length_exceeded" and err.param == "prompt"
    submitted(plan(prompts=[[1] * 99], max_tokens=None), LIMITS)


def test_empty_prompt_is_refused_naming_the_routes_field() -> None:
    assert refusal(submitted, plan(prompts=[[]]), LIMITS).param == "prompt"
    assert refusal(submitted, plan(prompts=[[]], ids_param="messages"), LIMITS).param == "messages"


def test_huge_max_tokens_is_a_context_refusal_not_a_crash() -> None:
    err = refusal(submitted, plan(max_tokens=10**30), LIMITS)
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
    params = logprob_params(plan(top_n=2, allowed_ids=(7, 8, 9), named_ids=(8, 3)))
    assert params.top_within == (7, 8, 9) and params.top_n == 2
    assert params.named_ids == (8, 3)
    assert params.renormalize_over is None


def test_chat_allowed_ids_ask_for_renormalised_values() -> None:
    params = logprob_params(plan(top_n=2, allowed_ids=(7, 8), renormalize=True))
    assert params.renormalize_over == (7, 8) and params.top_within is None
    assert params.named_ids == ()


def test_plain_logprobs_ask_for_the_natural_top_n_and_echo_rows() -> None:
    params = logprob_params(plan(top_n=4, echo=True))
    assert params.top_n == 4 and params.prompt_logprobs
    assert logprob_params(plan(top_n=None, echo=True)).top_n is None


def test_choice_seeds_differ_per_sample_and_stay_in_range() -> None:
    assert choice_seed(None, 3) is None
    assert [choice_seed(10, i) for i in range(3)] == [10, 11, 12]
    assert 0 <= choice_seed(-1, 0) < 2**63
    assert 0 <= choice_seed(2**64 - 1, 5) < 2**63


def test_repeated_allowed_ids_count_once_towards_the_cap() -> None:
    allowed = unique_ids([7] * 30 + [8])
    assert allowed == (7, 8)
    big = Limits(vocab_size=1000, ctx_size=100, max_logprobs=1)
    assert refusal(check_logprobs, plan(top_n=3, allowed_ids=allowed), big).param == "logprobs"
