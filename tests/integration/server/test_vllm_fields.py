"""Every field of vLLM's completion and chat request models, sent to the real server: each is
honoured (with a check that it took effect where one request shows it) or refused with a 400
naming it. None is silently ignored. The field lists are vLLM's
`vllm/entrypoints/openai/protocol.py` (`CompletionRequest`, `ChatCompletionRequest`), plus
`structured_outputs` and `logprob_token_ids` of later vLLM; docs/DETAILS.md lists the same."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "Name a colour."}]
ID = 42  # a token id to steer to
Check = Callable[[httpx.Response], bool] | None  # None: refused with a 400 naming the field


def ok(reply: httpx.Response) -> bool:
    return reply.status_code == 200


def choice(reply: httpx.Response) -> dict:
    return reply.json()["choices"][0]


def first_token_is(token_id: int) -> Check:
    def check(reply: httpx.Response) -> bool:
        entry = choice(reply)["logprobs"]
        token = entry["tokens"][0] if "tokens" in entry else entry["content"][0]["token"]
        return token == f"token_id:{token_id}"

    return check


def streamed(reply: httpx.Response) -> bool:
    return reply.headers["content-type"].startswith("text/event-stream") and reply.text.endswith(
        "data: [DONE]\n\n"
    )


IDS = {"logprobs": 0, "return_tokens_as_token_ids": True}  # completions: the first token's id

# vLLM's sampling fields that both request models carry, checked the same way on both routes
SHARED: dict[str, tuple[dict[str, Any], Check]] = {
    "use_beam_search": ({"use_beam_search": True}, None),
    "top_k": ({"top_k": 1, "temperature": 1.0}, ok),
    "min_p": ({"min_p": 0.1}, None),
    "repetition_penalty": ({"repetition_penalty": 1.2}, None),
    "length_penalty": ({"length_penalty": 2.0}, None),
    "stop_token_ids": ({"stop_token_ids": [ID], "allowed_token_ids": [ID]}, lambda r: choice(r)["finish_reason"] == "stop"),
    "include_stop_str_in_output": ({"include_stop_str_in_output": True}, ok),
    "ignore_eos": ({"ignore_eos": True}, ok),
    "min_tokens": ({"min_tokens": 1}, ok),
    "skip_special_tokens": ({"skip_special_tokens": False}, ok),
    "spaces_between_special_tokens": ({"spaces_between_special_tokens": False}, None),  # only true
}  # fmt: skip

COMPLETION: dict[str, tuple[dict[str, Any], Check]] = {
    **SHARED,
    "model": ({}, ok),  # the served name, filled in below
    "prompt": ({"prompt": "Hello"}, ok),
    "prompt_embeds": ({"prompt_embeds": "AAAA"}, None),
    "best_of": ({"best_of": 1}, ok),  # only as n; other values are refused (below)
    "echo": ({"echo": True}, lambda r: choice(r)["text"].startswith(PROMPT)),
    "frequency_penalty": ({"frequency_penalty": 0.5}, ok),
    "logit_bias": ({"logit_bias": {str(ID): 100}, **IDS}, first_token_is(ID)),
    "logprobs": ({"logprobs": 2}, lambda r: len(choice(r)["logprobs"]["top_logprobs"][0]) >= 2),
    "max_tokens": ({"max_tokens": 3, "ignore_eos": True}, lambda r: r.json()["usage"]["completion_tokens"] == 3),
    "n": ({"n": 2}, lambda r: len(r.json()["choices"]) == 2),
    "presence_penalty": ({"presence_penalty": 0.5}, ok),
    "seed": ({"seed": 7, "temperature": 1.0}, ok),
    "stop": ({"stop": [" Paris"], "max_tokens": 4}, ok),
    "stream": ({"stream": True}, streamed),
    "stream_options": ({"stream": True, "stream_options": {"include_usage": True}}, lambda r: '"usage":{' in r.text),
    "suffix": ({"suffix": "!"}, None),
    "temperature": ({"temperature": 0.5}, ok),
    "top_p": ({"top_p": 0.5}, ok),
    "user": ({"user": "someone"}, ok),  # end-user id: metadata, no effect on the reply (as OpenAI's)
    "truncate_prompt_tokens": ({"truncate_prompt_tokens": 2}, lambda r: r.json()["usage"]["prompt_tokens"] == 2),
    "allowed_token_ids": ({"allowed_token_ids": [ID], **IDS}, first_token_is(ID)),
    "prompt_logprobs": ({"prompt_logprobs": 1}, lambda r: choice(r)["prompt_logprobs"][0] is None),
    "add_special_tokens": ({"add_special_tokens": False}, ok),
    "response_format": ({"response_format": {"type": "json_object"}}, ok),
    "guided_json": ({"guided_json": {"type": "boolean"}, "max_tokens": 3}, lambda r: choice(r)["text"] in ("true", "false")),
    "guided_regex": ({"guided_regex": "[0-9]", "max_tokens": 2}, lambda r: re.fullmatch("[0-9]", choice(r)["text"]) is not None),
    "guided_choice": ({"guided_choice": ["yes", "no"], "max_tokens": 3}, lambda r: choice(r)["text"] in ("yes", "no")),
    "guided_grammar": ({"guided_grammar": 'start: "a" | "b"', "max_tokens": 2}, lambda r: choice(r)["text"] in ("a", "b")),
    "guided_decoding_backend": ({"guided_decoding_backend": "xgrammar"}, None),
    "guided_whitespace_pattern": ({"guided_json": {"type": "object"}, "guided_whitespace_pattern": " ?"}, ok),
    "priority": ({"priority": 1}, None),
    "request_id": ({"request_id": "vllm-field-7"}, lambda r: r.json()["id"].endswith("-vllm-field-7") and r.headers["x-request-id"] == "vllm-field-7"),
    "logits_processors": ({"logits_processors": ["my.Processor"]}, None),
    "return_tokens_as_token_ids": (IDS, lambda r: choice(r)["logprobs"]["tokens"][0].startswith("token_id:")),
    "cache_salt": ({"cache_salt": "salt"}, None),
    "kv_transfer_params": ({"kv_transfer_params": {"x": 1}}, None),
    "vllm_xargs": ({"vllm_xargs": {"x": 1}}, None),
    # later vLLM
    "structured_outputs": ({"structured_outputs": {"choice": ["yes", "no"]}, "max_tokens": 3}, lambda r: choice(r)["text"] in ("yes", "no")),
    "logprob_token_ids": ({"logprobs": 0, "logprob_token_ids": [ID]}, lambda r: len(choice(r)["logprobs"]["top_logprobs"][0]) >= 1),
}  # fmt: skip

CHAT_IDS = {"logprobs": True, "top_logprobs": 0, "return_tokens_as_token_ids": True}

CHAT: dict[str, tuple[dict[str, Any], Check]] = {
    **SHARED,
    "messages": ({}, ok),
    "model": ({}, ok),
    "frequency_penalty": ({"frequency_penalty": 0.5}, ok),
    "logit_bias": ({"logit_bias": {str(ID): 100}, **CHAT_IDS}, first_token_is(ID)),
    "logprobs": ({"logprobs": True}, lambda r: choice(r)["logprobs"]["content"]),
    "top_logprobs": ({"logprobs": True, "top_logprobs": 2}, lambda r: len(choice(r)["logprobs"]["content"][0]["top_logprobs"]) == 2),
    "max_tokens": ({"max_tokens": 3, "ignore_eos": True}, lambda r: r.json()["usage"]["completion_tokens"] == 3),
    "max_completion_tokens": ({"max_completion_tokens": 2, "ignore_eos": True}, lambda r: r.json()["usage"]["completion_tokens"] == 2),
    "n": ({"n": 2}, lambda r: len(r.json()["choices"]) == 2),
    "presence_penalty": ({"presence_penalty": 0.5}, ok),
    "response_format": ({"response_format": {"type": "json_object"}}, ok),
    "seed": ({"seed": 7, "temperature": 1.0}, ok),
    "stop": ({"stop": ["\n"]}, ok),
    "stream": ({"stream": True}, streamed),
    "stream_options": ({"stream": True, "stream_options": {"include_usage": True}}, lambda r: '"usage":{' in r.text),
    "temperature": ({"temperature": 0.5}, ok),
    "top_p": ({"top_p": 0.5}, ok),
    "tools": ({"tools": [{"type": "function", "function": {"name": "f"}}]}, None),
    "tool_choice": ({"tool_choice": "auto"}, None),
    "reasoning_effort": ({"reasoning_effort": "low"}, None),
    "include_reasoning": ({"include_reasoning": False}, None),
    "parallel_tool_calls": ({"parallel_tool_calls": True}, None),
    "user": ({"user": "someone"}, ok),
    "best_of": ({"best_of": 1}, ok),
    "truncate_prompt_tokens": ({"truncate_prompt_tokens": 3}, lambda r: r.json()["usage"]["prompt_tokens"] == 3),
    "prompt_logprobs": ({"prompt_logprobs": 1}, lambda r: r.json()["prompt_logprobs"][0] is None),
    "allowed_token_ids": ({"allowed_token_ids": [ID], **CHAT_IDS}, first_token_is(ID)),
    "bad_words": ({"bad_words": ["blue"]}, None),
    "echo": ({"echo": True}, None),
    "add_generation_prompt": ({"add_generation_prompt": False}, lambda r: r.json()["usage"]["prompt_tokens"] < GENERATION_PROMPT_LEN),
    "continue_final_message": ({"continue_final_message": True, "add_generation_prompt": False}, None),
    "add_special_tokens": ({"add_special_tokens": True}, ok),
    "documents": ({"documents": [{"title": "t", "text": "x"}]}, ok),
    "chat_template": ({"chat_template": "{{ messages[0].content }}"}, None),  # this server does not trust request templates
    "chat_template_kwargs": ({"chat_template_kwargs": {"unused": 1}}, ok),
    "mm_processor_kwargs": ({"mm_processor_kwargs": {"x": 1}}, None),
    "guided_json": ({"guided_json": {"type": "boolean"}, "max_tokens": 3}, lambda r: choice(r)["message"]["content"] in ("true", "false")),
    "guided_regex": ({"guided_regex": "[0-9]", "max_tokens": 2}, lambda r: re.fullmatch("[0-9]", choice(r)["message"]["content"]) is not None),
    "guided_choice": ({"guided_choice": ["yes", "no"], "max_tokens": 3}, lambda r: choice(r)["message"]["content"] in ("yes", "no")),
    "guided_grammar": ({"guided_grammar": 'start: "a" | "b"', "max_tokens": 2}, lambda r: choice(r)["message"]["content"] in ("a", "b")),
    "structural_tag": ({"structural_tag": "{}"}, None),
    "guided_decoding_backend": ({"guided_decoding_backend": "xgrammar"}, None),
    "guided_whitespace_pattern": ({"guided_json": {"type": "object"}, "guided_whitespace_pattern": " ?"}, ok),
    "priority": ({"priority": 1}, None),
    "request_id": ({"request_id": "vllm-field-8"}, lambda r: r.json()["id"].endswith("-vllm-field-8")),
    "logits_processors": ({"logits_processors": ["my.Processor"]}, None),
    "return_tokens_as_token_ids": (CHAT_IDS, lambda r: choice(r)["logprobs"]["content"][0]["token"].startswith("token_id:")),
    "cache_salt": ({"cache_salt": "salt"}, None),
    "kv_transfer_params": ({"kv_transfer_params": {"x": 1}}, None),
    "vllm_xargs": ({"vllm_xargs": {"x": 1}}, None),
    "structured_outputs": ({"structured_outputs": {"choice": ["yes", "no"]}, "max_tokens": 3}, lambda r: choice(r)["message"]["content"] in ("yes", "no")),
    "logprob_token_ids": ({"logprobs": True, "logprob_token_ids": [ID]}, lambda r: choice(r)["logprobs"]["content"][0]["top_logprobs"]),
}  # fmt: skip
GENERATION_PROMPT_LEN = 0  # set from /tokenize below


@pytest.fixture(scope="module")
def http(server_url: str) -> Iterator[httpx.Client]:
    global GENERATION_PROMPT_LEN
    with httpx.Client(base_url=server_url, timeout=120.0) as client:
        GENERATION_PROMPT_LEN = len(client.post("/tokenize", json={"messages": MESSAGES}).json()["tokens"])
        yield client


def run(http: httpx.Client, model: str, route: str, field: str, body: dict, check: Check) -> None:
    base = {"prompt": PROMPT} if route == "/v1/completions" else {"messages": MESSAGES}
    reply = http.post(route, json={**base, "model": model, "max_tokens": 1, "temperature": 0, **body})
    if check is None:
        assert reply.status_code == 400, f"{field}: {reply.status_code} {reply.text}"
        assert reply.json()["error"]["param"] == field, reply.text
    else:
        assert reply.status_code == 200, f"{field}: {reply.text}"
        assert check(reply), f"{field} did not take effect: {reply.text[:600]}"


@pytest.mark.parametrize("field", sorted(COMPLETION))
def test_every_completion_field(http: httpx.Client, model: str, field: str) -> None:
    body, check = COMPLETION[field]
    run(http, model, "/v1/completions", field, body, check)


@pytest.mark.parametrize("field", sorted(CHAT))
def test_every_chat_field(http: httpx.Client, model: str, field: str) -> None:
    body, check = CHAT[field]
    run(http, model, "/v1/chat/completions", field, body, check)


def test_best_of_other_than_n_is_refused(http: httpx.Client) -> None:
    reply = http.post("/v1/completions", json={"prompt": PROMPT, "best_of": 3, "max_tokens": 1})
    assert reply.status_code == 400, reply.text
    assert (reply.json()["error"]["param"], reply.json()["error"]["code"]) == ("best_of", "unsupported")


def test_details_lists_every_field() -> None:
    text = (ROOT / "docs" / "DETAILS.md").read_text()
    section = text.split("## vLLM's request fields", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z_]+)`", section))
    missing = (set(COMPLETION) | set(CHAT)) - listed
    assert not missing, f"docs/DETAILS.md does not list {sorted(missing)}"
