"""Every response model parses real-shaped payloads; the logprob helpers read them right."""

from __future__ import annotations

from typing import Any

import pytest

from strata_client import (
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    CompletionChunk,
    CompletionLogprobs,
    DetokenizeResponse,
    ModelList,
    TokenizeResponse,
    TokenizerInfo,
    parse_token_id,
)


def test_id_mode_completion_parses_into_id_keyed_values(id_mode_completion: dict[str, Any]):
    completion = Completion.model_validate(id_mode_completion)
    choice = completion.choices[0]
    assert choice.text == " Yes" and choice.finish_reason == "length"
    assert choice.logprobs is not None
    assert choice.logprobs.token_ids() == [7084]
    assert choice.logprobs.top_by_id(0) == {
        7084: -0.31326162815093994,
        1770: -1.7132616281509399,
        9998: -9999.0,
    }
    assert completion.usage is not None
    assert completion.usage.total_tokens == 43
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 32


def test_unknown_fields_are_kept_not_rejected(id_mode_completion: dict[str, Any]):
    completion = Completion.model_validate(id_mode_completion)
    assert completion.choices[0].model_extra == {"stop_reason": None}  # prompt_logprobs is typed
    assert completion.choices[0].prompt_logprobs is None


def test_values_of_reports_listed_ids_and_none_for_missing(id_mode_completion: dict[str, Any]):
    logprobs = Completion.model_validate(id_mode_completion).choices[0].logprobs
    assert logprobs is not None
    assert logprobs.values_of(0, [1770, 9998, 42]) == {
        1770: -1.7132616281509399,
        9998: -9999.0,
        42: None,
    }


def test_echo_first_position_is_null_and_reads_as_empty(echo_completion: dict[str, Any]):
    logprobs = Completion.model_validate(echo_completion).choices[0].logprobs
    assert logprobs is not None
    assert logprobs.token_logprobs[0] is None
    assert logprobs.top_logprobs[0] is None
    assert logprobs.token_logprobs[1:] == [-7.25, -3.5, -0.75]
    assert logprobs.top_logprobs[2] == {" sat": -3.5, " is": -1.25}


def test_text_tokens_rebuild_the_returned_text(echo_completion: dict[str, Any]):
    choice = Completion.model_validate(echo_completion).choices[0]
    assert choice.logprobs is not None
    assert choice.logprobs.rebuild_text() == choice.text
    assert choice.logprobs.token_texts(choice.text) == ["The", " cat", " sat", "."]


def test_helpers_refuse_string_tokens_where_ids_are_needed(echo_completion: dict[str, Any]):
    logprobs = Completion.model_validate(echo_completion).choices[0].logprobs
    assert logprobs is not None
    with pytest.raises(ValueError, match="token_id"):
        logprobs.token_ids()
    with pytest.raises(ValueError, match="token_id"):
        logprobs.top_by_id(1)


def test_id_mode_rebuild_needs_the_text_and_slices_it_by_offsets():
    logprobs = CompletionLogprobs(
        tokens=["token_id:1", "token_id:2", "token_id:3"],
        token_logprobs=[-1.0, -2.0, -3.0],
        top_logprobs=[{}, {}, {}],
        text_offset=[0, 5, 11],
    )
    with pytest.raises(ValueError, match="text"):
        logprobs.rebuild_text()
    assert logprobs.token_texts("Hello, world!") == ["Hello", ", worl", "d!"]
    assert logprobs.rebuild_text("Hello, world!") == "Hello, world!"


def test_offsets_counted_from_the_prompt_start_are_made_relative():
    # OpenAI counts text_offset from the prompt start even without echo.
    logprobs = CompletionLogprobs(
        tokens=[" a", " b"],
        token_logprobs=[-1.0, -1.0],
        top_logprobs=[None, None],
        text_offset=[17, 19],
    )
    assert logprobs.token_texts(" a b") == [" a", " b"]
    assert logprobs.rebuild_text() == " a b"


@pytest.mark.parametrize(
    ("tokens", "offsets", "text"),
    [
        (["ab", "c"], [0, 3], None),  # gap: token 1 does not start where token 0 ends
        (["token_id:1", "token_id:2"], [0, 9], "short"),  # offset past the end of the text
        (["token_id:1", "token_id:2"], [4, 2], "abcdef"),  # offsets go backwards
    ],
)
def test_inconsistent_offsets_are_refused(tokens: list[str], offsets: list[int], text: str | None):
    logprobs = CompletionLogprobs(
        tokens=tokens,
        token_logprobs=[None] * len(tokens),
        top_logprobs=[None] * len(tokens),
        text_offset=offsets,
    )
    with pytest.raises(ValueError):
        logprobs.rebuild_text(text)


def test_parse_token_id():
    assert parse_token_id("token_id:151645") == 151645
    with pytest.raises(ValueError):
        parse_token_id("<|im_end|>")


def test_chat_completion_parses_content_logprobs(chat_completion: dict[str, Any]):
    chat = ChatCompletion.model_validate(chat_completion)
    choice = chat.choices[0]
    assert choice.message.content == "Hi!"
    assert choice.message.model_extra == {"tool_calls": [], "reasoning_content": None}
    assert choice.logprobs is not None and choice.logprobs.content is not None
    first = choice.logprobs.content[0]
    assert (first.token, first.logprob, first.bytes) == ("Hi", -0.125, [72, 105])
    assert first.top_dict() == {"Hi": -0.125, "Hello": -2.25}
    assert choice.logprobs.refusal is None


def test_chunks_parse(completion_stream: bytes, chat_stream: bytes):
    import json

    events = [line[6:] for line in completion_stream.decode().split("\n") if line]
    chunk = CompletionChunk.model_validate(json.loads(events[1]))
    assert chunk.choices[0].logprobs is not None
    assert chunk.choices[0].logprobs.top_by_id(0) == {30: -1.5}
    usage_chunk = CompletionChunk.model_validate(json.loads(events[2]))
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    chat_events = [line[6:] for line in chat_stream.decode().split("\n") if line]
    first = ChatCompletionChunk.model_validate(json.loads(chat_events[0]))
    assert first.choices[0].delta.role == "assistant" and first.choices[0].logprobs is None


def test_minimal_bodies_from_other_servers_parse():
    # A bare server may omit id/created/usage; they default instead of failing.
    completion = Completion.model_validate({"choices": [{"text": "x", "index": 0}]})
    assert completion.choices[0].logprobs is None and completion.usage is None
    assert (
        ChatCompletion.model_validate({"choices": [{"message": {"content": "y"}}]}).choices[0].message.role
        == "assistant"
    )


def test_small_route_models_parse(models_body: dict[str, Any]):
    models = ModelList.model_validate(models_body)
    assert models.data[0].id == "SmolLM2-135M-Instruct"
    assert models.data[0].max_model_len == 8192
    tok = TokenizeResponse.model_validate({"tokens": [1, 2], "count": 2, "max_model_len": 8192})
    assert tok.tokens == [1, 2] and tok.token_strs is None
    assert DetokenizeResponse.model_validate({"prompt": "hi"}).prompt == "hi"
    info = TokenizerInfo.model_validate(
        {
            "eos_token": "<|im_end|>",
            "bos_token": None,
            "chat_template": "{{x}}",
            "tokenizer_class": "GPT2",
        }
    )
    assert info.eos_token == "<|im_end|>" and info.model_extra == {"tokenizer_class": "GPT2"}
