"""The official `openai` SDK against the real server: every `completions.create` and
`chat.completions.create` parameter is either a field the server claims (and one call
passes them all, with vLLM's extras in `extra_body`) or listed here as one it does not.
A new SDK parameter fails the first test until someone decides which it is."""

from __future__ import annotations

import inspect

import msgspec
import pytest
from openai import OpenAI

from strata_server.protocol import ChatCompletionRequest, CompletionRequest

CALL_OPTIONS = frozenset({"self", "extra_body", "extra_headers", "extra_query", "timeout"})
# OpenAI-only features the server does not claim: unknown fields are ignored (as vLLM does),
# `tools` is parsed only to be refused.
CHAT_NOT_CLAIMED = frozenset(
    {
        "audio",
        "function_call",
        "functions",
        "metadata",
        "modalities",
        "moderation",
        "parallel_tool_calls",
        "prediction",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "safety_identifier",
        "service_tier",
        "store",
        "tool_choice",
        "verbosity",
        "web_search_options",
    }
)
VLLM_EXTRAS = {
    "top_k": 40,
    "min_tokens": 2,
    "include_stop_str_in_output": True,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "truncate_prompt_tokens": 64,
    "repetition_penalty": 1.0,
    "ignore_eos": False,
    "stop_token_ids": [],
    "return_tokens_as_token_ids": True,
}


def sdk_parameters(create) -> set[str]:
    return set(inspect.signature(create).parameters) - CALL_OPTIONS


def wire_fields(request_type: type[msgspec.Struct]) -> set[str]:
    return {field.encode_name for field in msgspec.structs.fields(request_type)}


@pytest.mark.parametrize(
    ("route", "request_type", "not_claimed"),
    [
        ("completions", CompletionRequest, frozenset()),
        ("chat", ChatCompletionRequest, CHAT_NOT_CLAIMED),
    ],
)
def test_every_sdk_parameter_is_claimed_or_listed(route: str, request_type, not_claimed) -> None:
    sdk = OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
    create = sdk.completions.create if route == "completions" else sdk.chat.completions.create
    params = sdk_parameters(create)
    assert params - not_claimed - wire_fields(request_type) == set(), "new SDK parameters: claim or list them"
    assert not_claimed <= params, "listed parameters the SDK no longer has"
    assert set(VLLM_EXTRAS) <= wire_fields(request_type)


def completion_params(model: str) -> dict:
    """Every completions parameter the server claims, in one call."""
    return {
        "model": model,
        "prompt": "The capital of France is",
        "max_tokens": 6,
        "temperature": 0.7,
        "top_p": 0.9,
        "n": 2,
        "best_of": 2,
        "seed": 11,
        "stop": ["\n\n"],
        "logprobs": 2,
        "echo": True,
        "presence_penalty": 0.3,
        "frequency_penalty": 0.2,
        "logit_bias": {"198": -100},
        "user": "contract-test",
        "suffix": None,
    }


def chat_params(model: str) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 6,
        "max_completion_tokens": 6,
        "temperature": 0.7,
        "top_p": 0.9,
        "n": 2,
        "seed": 11,
        "stop": ["\n\n"],
        "logprobs": True,
        "top_logprobs": 2,
        "presence_penalty": 0.3,
        "frequency_penalty": 0.2,
        "logit_bias": {"198": -100},
        "user": "contract-test",
        "response_format": {"type": "text"},
        "tools": None,
    }


def test_completions_with_every_claimed_parameter(client: OpenAI, model: str) -> None:
    params = completion_params(model)
    assert set(params) | {"stream", "stream_options"} == sdk_parameters(client.completions.create)
    whole = client.completions.create(**params, extra_body=VLLM_EXTRAS)
    assert len(whole.choices) == 2
    for choice in whole.choices:
        assert choice.text.startswith("The capital of France is")
        assert choice.logprobs is not None
        assert all(t.startswith("token_id:") for t in choice.logprobs.tokens)
        assert "token_id:198" not in choice.logprobs.tokens[5:]  # biased out of the completion
    streamed = client.completions.create(
        **params, stream=True, stream_options={"include_usage": True}, extra_body=VLLM_EXTRAS
    )
    texts = ["", ""]
    usage = None
    for chunk in streamed:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
        usage = chunk.usage or usage
    assert texts == [c.text for c in whole.choices]  # same seed: the same samples
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_chat_with_every_claimed_parameter(client: OpenAI, model: str) -> None:
    params = chat_params(model)
    claimed = sdk_parameters(client.chat.completions.create) - CHAT_NOT_CLAIMED
    assert set(params) | {"stream", "stream_options"} == claimed
    whole = client.chat.completions.create(**params, extra_body=VLLM_EXTRAS)
    assert len(whole.choices) == 2
    for choice in whole.choices:
        assert choice.logprobs is not None and choice.logprobs.content
        assert all(len(entry.top_logprobs) == 2 for entry in choice.logprobs.content)
    streamed = client.chat.completions.create(
        **params, stream=True, stream_options={"include_usage": True}, extra_body=VLLM_EXTRAS
    )
    texts = ["", ""]
    for chunk in streamed:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == [c.message.content for c in whole.choices]
