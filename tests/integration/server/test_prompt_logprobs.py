"""vLLM's `prompt_logprobs` on the real server and model: the shape vLLM returns, served from
the rows an echo reads (bitwise equal to the echo's values), ranks as vLLM counts them, the
same numbers on chat, and a 400 naming the field where vLLM refuses it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

PROMPT = "The capital of France is Paris. The capital of Italy is"
CHAT = [{"role": "user", "content": "Name a colour."}]
TOP = 20


@pytest.fixture(scope="module")
def http(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=120.0) as client:
        yield client


def completion(http: httpx.Client, **body) -> dict:
    reply = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 1, "temperature": 0, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_prompt_logprobs_are_the_echo_rows_bit_for_bit(http: httpx.Client) -> None:
    choice = completion(http, echo=True, logprobs=TOP, prompt_logprobs=TOP)["choices"][0]
    ids = http.post("/tokenize", json={"prompt": PROMPT}).json()["tokens"]
    rows, echo = choice["prompt_logprobs"], choice["logprobs"]
    assert len(rows) == len(ids) and rows[0] is None and echo["token_logprobs"][0] is None
    for position in range(1, len(ids)):
        row, token = rows[position], str(ids[position])
        assert token in row and set(row[token]) == {"logprob", "rank", "decoded_token"}
        assert row[token]["logprob"] == echo["token_logprobs"][position]  # the same float
        assert row[token]["decoded_token"] == echo["tokens"][position]
        natural = sorted(echo["top_logprobs"][position].values(), reverse=True)[:TOP]
        # the top N: ranks 1..N, the echo listing's N best values, best first
        top = sorted((entry for entry in row.values() if entry["rank"] <= TOP), key=lambda e: e["rank"])
        assert [e["rank"] for e in top] == list(range(1, TOP + 1))
        assert [e["logprob"] for e in top] == natural
        # the prompt token's rank counts the values >= its own (vLLM's count)
        value, rank = row[token]["logprob"], row[token]["rank"]
        at_least = sum(v >= value for v in natural)
        assert rank == at_least if rank <= TOP else at_least == TOP


def test_without_echo_the_text_is_the_completion_and_the_rows_the_same(http: httpx.Client) -> None:
    with_echo = completion(http, echo=True, logprobs=1, prompt_logprobs=3)["choices"][0]
    plain = completion(http, prompt_logprobs=3)["choices"][0]
    assert plain["prompt_logprobs"] == with_echo["prompt_logprobs"]
    assert plain["logprobs"] is None and not plain["text"].startswith("The capital")
    assert with_echo["text"].startswith(PROMPT) and with_echo["text"][len(PROMPT) :] == plain["text"]
    zero = completion(http, prompt_logprobs=0)["choices"][0]["prompt_logprobs"]
    assert [None if r is None else list(r) for r in zero] == [
        None if r is None else [next(iter(r))] for r in plain["prompt_logprobs"]
    ]  # only the prompt token itself


def test_each_choice_gets_its_own_prompts_rows(http: httpx.Client) -> None:
    prompts = ["Hello there", "One two three four"]
    reply = http.post(
        "/v1/completions",
        json={"prompt": prompts, "n": 2, "max_tokens": 1, "prompt_logprobs": 1, "temperature": 0},
    ).json()
    lengths = [len(http.post("/tokenize", json={"prompt": p}).json()["tokens"]) for p in prompts]
    assert [len(c["prompt_logprobs"]) for c in reply["choices"]] == [lengths[0]] * 2 + [lengths[1]] * 2
    assert reply["choices"][0]["prompt_logprobs"] == reply["choices"][1]["prompt_logprobs"]


def test_chat_reports_the_rendered_prompts_rows_like_completions(http: httpx.Client) -> None:
    reply = http.post(
        "/v1/chat/completions",
        json={"messages": CHAT, "max_tokens": 1, "prompt_logprobs": 2, "temperature": 0},
    ).json()
    ids = http.post("/tokenize", json={"messages": CHAT, "add_generation_prompt": True}).json()["tokens"]
    rows = reply["prompt_logprobs"]
    assert len(rows) == len(ids) == reply["usage"]["prompt_tokens"]
    same_ids = completion(http, prompt=ids, prompt_logprobs=2)["choices"][0]["prompt_logprobs"]
    assert rows == same_ids  # the chat route and the same ids on completions: the same bits


def test_not_asked_not_sent(http: httpx.Client) -> None:
    assert "prompt_logprobs" not in completion(http, echo=True, logprobs=1)["choices"][0]
    chat = http.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 1}).json()
    assert "prompt_logprobs" not in chat


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/completions", {"prompt": "Hi", "prompt_logprobs": 1, "stream": True}),
        ("/v1/chat/completions", {"messages": CHAT, "prompt_logprobs": 0, "stream": True}),
        ("/v1/completions", {"prompt": "Hi", "prompt_logprobs": 21}),
        ("/v1/completions", {"prompt": "Hi", "prompt_logprobs": -1}),
        ("/v1/chat/completions", {"messages": CHAT, "prompt_logprobs": "2"}),
    ],
)
def test_refusals_name_the_field(http: httpx.Client, route: str, body: dict) -> None:
    reply = http.post(route, json={"max_tokens": 1, **body})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "prompt_logprobs"
