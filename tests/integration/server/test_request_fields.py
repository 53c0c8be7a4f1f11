"""vLLM's request fields on the real server, both routes, streamed and not: stop strings
kept or dropped, special tokens skipped, `min_tokens`, prompt truncation, penalties and
`logit_bias` (which change the draw, never the reported logprobs), and their refusals."""

from __future__ import annotations

import json

import httpx
import pytest

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
STORY = "Once upon a time, in a small village by the sea,"
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
ROUTES = ("completions", "chat")


def body_for(route: str, **fields) -> dict:
    base = {"prompt": STORY} if route == "completions" else {"messages": FRANCE}
    return {"temperature": 0, "max_tokens": 24, **base, **fields}


def post(server_url: str, route: str, body: dict) -> httpx.Response:
    path = "/v1/completions" if route == "completions" else "/v1/chat/completions"
    return httpx.post(server_url + path, json=body, timeout=120)


def generate(server_url: str, route: str, stream: bool = False, **fields) -> dict:
    """(text, finish_reason, completion_tokens) of the first choice, streamed or whole."""
    body = body_for(route, **fields)
    if not stream:
        response = post(server_url, route, body)
        assert response.status_code == 200, response.text
        data = response.json()
        choice = data["choices"][0]
        text = choice["text"] if route == "completions" else choice["message"]["content"]
        return {"text": text, "finish": choice["finish_reason"], "tokens": data["usage"]["completion_tokens"]}
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    path = "/v1/completions" if route == "completions" else "/v1/chat/completions"
    pieces, finish, tokens = [], None, None
    with httpx.stream("POST", server_url + path, json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk["choices"]:
                pieces.append(
                    choice["text"] if route == "completions" else choice["delta"].get("content") or ""
                )
                finish = choice["finish_reason"] or finish
    return {"text": "".join(pieces), "finish": finish, "tokens": tokens}


def strip_specials(text: str) -> str:
    for special in SPECIALS:
        text = text.replace(special, "")
    return text


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [False, True])
def test_include_stop_str_in_output_keeps_the_stop(server_url: str, route: str, stream: bool) -> None:
    plain = generate(server_url, route, max_tokens=16)["text"]
    words = plain.split()
    stop = words[2]  # a word well inside the greedy text
    at = plain.index(stop)
    kept = generate(server_url, route, stream, max_tokens=16, stop=[stop], include_stop_str_in_output=True)
    dropped = generate(server_url, route, stream, max_tokens=16, stop=[stop])
    assert kept["text"] == plain[: at + len(stop)] and kept["finish"] == "stop"
    assert dropped["text"] == plain[:at] and dropped["finish"] == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_min_tokens_generates_past_the_end_of_turn(server_url: str, stream: bool) -> None:
    plain = generate(server_url, "chat", stream, max_tokens=40)
    assert plain["finish"] == "stop" and plain["tokens"] < 20
    longer = generate(server_url, "chat", stream, max_tokens=40, min_tokens=20)
    assert longer["tokens"] >= 20
    assert longer["text"].startswith(plain["text"])


def test_min_tokens_above_max_tokens_is_refused(server_url: str) -> None:
    for route in ROUTES:
        response = post(server_url, route, body_for(route, max_tokens=4, min_tokens=5))
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "min_tokens"


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [False, True])
def test_special_tokens_are_skipped_by_default(server_url: str, route: str, stream: bool) -> None:
    """Past the end of turn (ignore_eos) the model writes control tokens."""
    options = {"max_tokens": 40, "ignore_eos": True}
    if route == "completions":
        options["prompt"] = (
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        )
    kept = generate(server_url, route, stream, skip_special_tokens=False, **options)["text"]
    skipped = generate(server_url, route, stream, **options)["text"]
    assert any(special in kept for special in SPECIALS)
    assert skipped == strip_specials(kept)
    spaced = generate(
        server_url, route, stream, skip_special_tokens=False, spaces_between_special_tokens=True, **options
    )
    assert spaced["text"] == kept  # the default, sent explicitly: the same text (see DETAILS)


def test_special_tokens_meet_their_neighbours_without_spaces(server_url: str) -> None:
    """vLLM's detokenizer for a fast (tokenizers) vocabulary, which every GGUF vocabulary is,
    writes an added token's text with no space around it (`spaces_between_special_tokens`
    true, the default and the only accepted value): the text is the tokens' own strings end
    to end, so a space next to a special token is a bug."""
    body = body_for(
        "completions",
        prompt="<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        max_tokens=40,
        ignore_eos=True,
        logprobs=0,
        skip_special_tokens=False,
        spaces_between_special_tokens=True,
    )
    response = post(server_url, "completions", body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    tokens = choice["logprobs"]["tokens"]
    assert any(token in SPECIALS for token in tokens)  # past the end of turn: control tokens
    assert choice["text"] == "".join(tokens)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [False, True])
def test_spaces_between_special_tokens_false_is_refused(server_url: str, route: str, stream: bool) -> None:
    """Only the default is supported: false would ask to drop spaces Strata never inserts, so it
    is a 400 naming the field and saying why, on both routes, before anything runs."""
    response = post(server_url, route, body_for(route, spaces_between_special_tokens=False, stream=stream))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "unsupported"
    assert error["param"] == "spaces_between_special_tokens"
    assert "does not insert spaces between special tokens" in error["message"]
    assert "only the default" in error["message"]


def test_truncate_prompt_tokens_keeps_the_last_tokens(server_url: str) -> None:
    ids = httpx.post(f"{server_url}/tokenize", json={"prompt": STORY}).json()["tokens"]
    keep = 5
    echo = {"max_tokens": 1, "echo": True, "logprobs": 3}
    cut = post(server_url, "completions", body_for("completions", truncate_prompt_tokens=keep, **echo)).json()
    tail = post(server_url, "completions", body_for("completions", prompt=ids[-keep:], **echo)).json()
    assert cut["usage"]["prompt_tokens"] == keep
    assert cut["choices"][0]["text"] == tail["choices"][0]["text"]
    assert cut["choices"][0]["logprobs"] == tail["choices"][0]["logprobs"]
    whole = post(server_url, "completions", body_for("completions", truncate_prompt_tokens=len(ids) + 9))
    assert whole.json()["usage"]["prompt_tokens"] == len(ids)
    chat = post(server_url, "chat", body_for("chat", truncate_prompt_tokens=keep, max_tokens=1)).json()
    assert chat["usage"]["prompt_tokens"] == keep


@pytest.mark.parametrize("value", [0, -2, 10**7])
def test_bad_truncate_prompt_tokens_is_refused(server_url: str, value: int) -> None:
    for route in ROUTES:
        response = post(server_url, route, body_for(route, truncate_prompt_tokens=value))
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "truncate_prompt_tokens"


def completion_logprobs(server_url: str, **fields) -> dict:
    response = post(server_url, "completions", body_for("completions", logprobs=1, **fields))
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def test_penalties_change_the_tokens_but_logprobs_stay_raw(server_url: str) -> None:
    plain = completion_logprobs(server_url, ignore_eos=True, return_tokens_as_token_ids=True)
    penalised = completion_logprobs(
        server_url,
        ignore_eos=True,
        return_tokens_as_token_ids=True,
        presence_penalty=0.5,
        frequency_penalty=1.5,
    )
    tokens = penalised["logprobs"]["tokens"]
    assert tokens != plain["logprobs"]["tokens"]
    ids = httpx.post(f"{server_url}/tokenize", json={"prompt": STORY}).json()["tokens"]
    generated = [int(t.removeprefix("token_id:")) for t in tokens]
    echo = completion_logprobs(server_url, prompt=ids + generated, max_tokens=0, echo=True)
    assert penalised["logprobs"]["token_logprobs"] == echo["logprobs"]["token_logprobs"][len(ids) :]


@pytest.mark.parametrize("stream", [False, True])
def test_logit_bias_forces_and_forbids_tokens(server_url: str, stream: bool) -> None:
    ids = httpx.post(f"{server_url}/tokenize", json={"prompt": " banana"}).json()["tokens"]
    forced = generate(
        server_url, "chat", stream, max_tokens=3, logit_bias={str(ids[0]): 100}, ignore_eos=True
    )
    assert (
        forced["text"]
        == httpx.post(f"{server_url}/detokenize", json={"tokens": ids[:1] * 3}).json()["prompt"]
    )
    plain = generate(server_url, "completions", max_tokens=1)["text"]
    first = httpx.post(f"{server_url}/tokenize", json={"prompt": plain}).json()["tokens"][0]
    banned = generate(server_url, "completions", stream, max_tokens=1, logit_bias={str(first): -100})
    assert banned["text"] != plain


def test_a_forced_tokens_logprob_is_its_raw_value(server_url: str) -> None:
    ids = httpx.post(f"{server_url}/tokenize", json={"prompt": " banana"}).json()["tokens"]
    raw = completion_logprobs(server_url, max_tokens=1, logprob_token_ids=ids[:1])
    forced = completion_logprobs(
        server_url, max_tokens=1, logit_bias={str(ids[0]): 100}, return_tokens_as_token_ids=True
    )
    assert forced["logprobs"]["tokens"] == [f"token_id:{ids[0]}"]
    raw_value = raw["logprobs"]["top_logprobs"][0][" banana"]
    assert forced["logprobs"]["token_logprobs"] == [raw_value]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"logit_bias": {"abc": 1}}, "logit_bias"),
        ({"logit_bias": {"-3": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 101}}, "logit_bias"),
        ({"logit_bias": {"999999999": 1}}, "logit_bias"),
        ({"logit_bias": {"5": "high"}}, "logit_bias"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"repetition_penalty": 1.2}, "repetition_penalty"),
        ({"min_tokens": -1}, "min_tokens"),
        ({"skip_special_tokens": "yes"}, "skip_special_tokens"),
        ({"include_stop_str_in_output": 1}, "include_stop_str_in_output"),
    ],
)
def test_bad_values_are_400s_naming_the_field(server_url: str, fields: dict, param: str) -> None:
    for route in ROUTES:
        response = post(server_url, route, body_for(route, **fields))
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param
    assert post(server_url, "chat", body_for("chat", max_tokens=1)).status_code == 200


def test_neutral_repetition_penalty_is_accepted(server_url: str) -> None:
    for route in ROUTES:
        assert (
            post(server_url, route, body_for(route, repetition_penalty=1.0, max_tokens=1)).status_code == 200
        )
