"""Every Python example in docs/client.md runs against a mocked server and prints what it read.

This keeps the documented calls, arguments and attributes in step with the code: each
example's printed output is compared with one built here from the mocked server's raw JSON
(not through the client), so an example that prints the wrong field, or a client that reads
one wrongly, fails. The real server is exercised by test_integration_server.py.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

DOC = Path(__file__).resolve().parents[3] / "docs" / "client.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL) if DOC.exists() else []
TOKENIZE = {"tokens": [19556, 905], "count": 2, "max_model_len": 8192}
DETOKENIZE = {"prompt": "Hello world"}
TOKENIZER_INFO = {"eos_token": "<|im_end|>"}
OUT_OF_VOCAB = {
    "message": "token id 1000000000 out of vocabulary",
    "type": "invalid_request_error",
    "param": "allowed_token_ids",
    "code": "token_id_out_of_vocab",
}


def scores_body(body: dict[str, Any]) -> dict[str, Any]:
    """One entry per candidate (or per answer of a small enum schema); the later the answer,
    the larger its share (so "best" is not simply the first)."""
    texts = body.get("candidates") or [json.dumps(v) for v in body["json_schema"]["enum"]]
    total = sum(range(1, len(texts) + 1))
    answers = []
    for i, t in enumerate(texts):
        share = (i + 1) / total
        answers.append(
            {
                "index": i,
                "text": t,
                "token_ids": [100 + i],
                "tokens": ["x"],
                "token_logprobs": [math.log(share)],
                "top_logprobs": None,
                "logprob": math.log(share),
                "normalized_logprob": math.log(share),
                "probability": share,
                "cached_tokens": 4,
            }
            | ({"value": json.loads(t)} if "json_schema" in body else {})
        )
    return {"object": "candidate_scores", "candidates": answers}


def sse_events(stream: bytes) -> list[dict[str, Any]]:
    """The JSON events of an SSE body, read directly (no client)."""
    lines = stream.decode().splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


@pytest.fixture
def docs_server(
    monkeypatch,
    models_body,
    id_mode_completion,
    echo_completion,
    chat_completion,
    completion_stream,
    chat_stream,
):
    monkeypatch.delenv("STRATA_BASE_URL", raising=False)
    monkeypatch.delenv("STRATA_API_KEY", raising=False)

    def completions(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if 10**9 in body.get("allowed_token_ids", []):
            return httpx.Response(400, json={"error": OUT_OF_VOCAB})
        if body.get("stream"):
            return httpx.Response(200, content=completion_stream)
        return httpx.Response(200, json=echo_completion if body.get("echo") else id_mode_completion)

    def chat(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            return httpx.Response(200, content=chat_stream)
        return httpx.Response(200, json=chat_completion)

    def scores(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=scores_body(json.loads(request.content)))

    with respx.mock(base_url="http://127.0.0.1:8000", assert_all_called=False) as mock:
        mock.get("/health").respond(200)
        mock.get("/v1/models").respond(200, json=models_body)
        mock.post("/tokenize").respond(200, json=TOKENIZE)
        mock.post("/detokenize").respond(200, json=DETOKENIZE)
        mock.get("/tokenizer_info").respond(200, json=TOKENIZER_INFO)
        mock.post("/v1/completions").mock(side_effect=completions)
        mock.post("/v1/chat/completions").mock(side_effect=chat)
        mock.post("/v1/score_candidates").mock(side_effect=scores)
        yield mock


def token_id(key: str) -> int:
    return int(key.removeprefix("token_id:"))


def lines(*items: Any) -> str:
    return "".join(f"{item}\n" for item in items)


@pytest.fixture
def expected(
    models_body, id_mode_completion, echo_completion, chat_completion, completion_stream, chat_stream
) -> list[str]:
    """What each example prints, in the doc's order, built from the raw bodies the mock serves."""
    model = models_body["data"][0]["id"]
    # labels: the mock's /tokenize gives the same first id for "yes" and "no"
    label = TOKENIZE["tokens"][0]
    ids_lp = id_mode_completion["choices"][0]["logprobs"]
    top = {token_id(k): v for k, v in ids_lp["top_logprobs"][0].items()}
    usage = id_mode_completion["usage"]
    echo = echo_completion["choices"][0]
    offsets = [*echo["logprobs"]["text_offset"], len(echo["text"])]
    pieces = [echo["text"][a:b] for a, b in itertools.pairwise(offsets)]
    chat = chat_completion["choices"][0]
    content = chat["logprobs"]["content"]
    stream = sse_events(completion_stream)
    chat_deltas = [e["choices"][0]["delta"].get("content") or "" for e in sse_events(chat_stream)]
    texts = [" billing", " shipping", " technical support"]
    scored = scores_body({"candidates": texts})["candidates"]
    enum = scores_body({"json_schema": {"enum": [t.strip() for t in texts]}})["candidates"]
    return [
        lines(True, model),
        lines(
            [token_id(t) for t in ids_lp["tokens"]],
            top,
            {label: top.get(label)},
            f"{usage['prompt_tokens']} {usage['completion_tokens']}",
        ),
        lines(echo["logprobs"]["token_logprobs"][0], pieces),
        lines(
            f"{chat['message']['content']} {chat['finish_reason']}",
            *(
                f"{e['token']!r} {e['logprob']} { ({t['token']: t['logprob'] for t in e['top_logprobs']}) }"
                for e in content
            ),
        ),
        lines(chat["message"]["content"]),
        lines(
            *(
                f"{e['choices'][0]['text']!r} {e['choices'][0]['logprobs']['token_logprobs']}"
                for e in stream
                if e["choices"]
            ),
            *(f"usage: {e['usage']['total_tokens']}" for e in stream if not e["choices"]),
        )
        + chat_deltas[0],  # the chat stream: its first chunk, then break
        lines(
            [model],
            f"{TOKENIZE['tokens']} {TOKENIZE['count']} {TOKENIZE['max_model_len']}",
            TOKENIZE["count"],
            DETOKENIZE["prompt"],
            TOKENIZER_INFO["eos_token"],
            True,
        ),
        lines(
            f"{max(scored, key=lambda c: c['probability'])['text']} {[c['probability'] for c in scored]}",
            *(
                f"{c['text']} {c['token_ids']} {c['token_logprobs']} {c['logprob']} {c['cached_tokens']}"
                for c in scored
            ),
        ),
        lines(*(f"{c['value']} {c['text']} {c['probability']}" for c in enum)),
        lines(id_mode_completion["choices"][0]["text"]) + "".join(chat_deltas),
        lines(
            f"400 {OUT_OF_VOCAB['message']} {OUT_OF_VOCAB['param']} {OUT_OF_VOCAB['type']} {OUT_OF_VOCAB['code']}"
        ),
    ]


@pytest.mark.skipif(not EXAMPLES, reason="docs/client.md not found")
def test_the_doc_has_examples():
    assert len(EXAMPLES) >= 7


def test_every_example_has_its_expected_output(expected):
    assert len(expected) == len(EXAMPLES), "a new example in docs/client.md: add what it prints to `expected`"


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_doc_example_prints_what_the_server_sent(index: int, docs_server, expected, capsys):
    code = compile(EXAMPLES[index], f"docs/client.md example {index}", "exec")
    exec(code, {})
    assert capsys.readouterr().out == expected[index]
