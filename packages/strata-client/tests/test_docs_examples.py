"""Every Python example in docs/client.md runs against a mocked server.

This keeps the documented calls, arguments and attributes in step with the code; the real
server is exercised by test_integration_server.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import respx

DOC = Path(__file__).resolve().parents[3] / "docs" / "client.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL) if DOC.exists() else []


@pytest.fixture
def docs_server(
    monkeypatch, models_body, id_mode_completion, chat_completion, completion_stream, chat_stream
):
    monkeypatch.delenv("STRATA_BASE_URL", raising=False)
    monkeypatch.delenv("STRATA_API_KEY", raising=False)

    def completions(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if 10**9 in body.get("allowed_token_ids", []):
            error = {
                "message": "token id 1000000000 out of vocabulary",
                "param": "allowed_token_ids",
            }
            return httpx.Response(400, json={"error": error})
        if body.get("stream"):
            return httpx.Response(200, content=completion_stream)
        return httpx.Response(200, json=id_mode_completion)

    def chat(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            return httpx.Response(200, content=chat_stream)
        return httpx.Response(200, json=chat_completion)

    def scores(request: httpx.Request) -> httpx.Response:
        """One entry per candidate (or per answer of a small enum schema), equal shares."""
        body = json.loads(request.content)
        texts = body.get("candidates") or [json.dumps(v) for v in body["json_schema"]["enum"]]
        share = 1 / len(texts)
        entry = {"token_ids": [1], "tokens": ["x"], "token_logprobs": [-1.0], "top_logprobs": None}
        answers = [
            {
                **entry,
                "index": i,
                "text": t,
                "logprob": -1.0,
                "normalized_logprob": -1.0,
                "probability": share,
            }
            | ({"value": json.loads(t)} if "json_schema" in body else {})
            for i, t in enumerate(texts)
        ]
        return httpx.Response(200, json={"object": "candidate_scores", "candidates": answers})

    with respx.mock(base_url="http://127.0.0.1:8000", assert_all_called=False) as mock:
        mock.get("/health").respond(200)
        mock.get("/v1/models").respond(200, json=models_body)
        mock.post("/tokenize").respond(200, json={"tokens": [19556, 905], "count": 2, "max_model_len": 8192})
        mock.post("/detokenize").respond(200, json={"prompt": "Hello world"})
        mock.get("/tokenizer_info").respond(200, json={"eos_token": "<|im_end|>"})
        mock.post("/v1/completions").mock(side_effect=completions)
        mock.post("/v1/chat/completions").mock(side_effect=chat)
        mock.post("/v1/score_candidates").mock(side_effect=scores)
        yield mock


@pytest.mark.skipif(not EXAMPLES, reason="docs/client.md not found")
def test_the_doc_has_examples():
    assert len(EXAMPLES) >= 7


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_doc_example_runs(index: int, docs_server, capsys):
    code = compile(EXAMPLES[index], f"docs/client.md example {index}", "exec")
    exec(code, {})
    assert capsys.readouterr().out  # every example prints what it read
