"""The vLLM tokenizer routes, models, health, metrics and the OpenAPI schema."""

from __future__ import annotations

import httpx
import pytest

from strata_server.testing import sample


@pytest.fixture(scope="module")
def http(server_url: str):
    with httpx.Client(base_url=server_url, timeout=60.0) as client:
        yield client


def test_health_and_models(http: httpx.Client) -> None:
    health = http.get("/health").json()
    assert health["status"] == "ok"
    # the real server runs the native kernels on every CPU: never the silent torch fallback
    assert health["kernels"].startswith("native-") and health["invariant"] is True
    metrics = http.get("/metrics").text
    assert sample(metrics, "strata_kernels_info", kernels=health["kernels"], invariant="true") == 1
    models = http.get("/v1/models").json()
    assert models["object"] == "list"
    (entry,) = models["data"]
    assert entry["id"] == "SmolLM2-135M-Instruct.Q4_1" and entry["max_model_len"] > 0


def test_tokenize_round_trip_and_special_tokens(http: httpx.Client) -> None:
    text = "Hello, wörld! <|im_start|>user"
    out = http.post("/tokenize", json={"prompt": text}).json()
    assert out["count"] == len(out["tokens"]) and out["token_strs"] is None
    assert out["max_model_len"] > 0
    assert 1 in out["tokens"]  # <|im_start|> parsed as one special id
    assert http.post("/detokenize", json={"tokens": out["tokens"]}).json() == {"prompt": text}


def test_detokenize_requires_tokens(http: httpx.Client) -> None:
    resp = http.post("/detokenize", json={})
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "tokens"


def test_tokenize_messages_gives_the_rendered_chat_prompt(http: httpx.Client) -> None:
    messages = [{"role": "user", "content": "Hi there"}]
    with_prompt = http.post("/tokenize", json={"messages": messages, "add_generation_prompt": True}).json()[
        "tokens"
    ]
    without = http.post("/tokenize", json={"messages": messages, "add_generation_prompt": False}).json()[
        "tokens"
    ]
    assert with_prompt[: len(without)] == without and len(with_prompt) > len(without)
    text = http.post("/detokenize", json={"tokens": with_prompt}).json()["prompt"]
    assert text.endswith("<|im_start|>assistant\n")
    assert "Hi there" in text


def test_tokenizer_info(http: httpx.Client) -> None:
    info = http.get("/tokenizer_info").json()
    assert info["eos_token"] in ("<|im_end|>", "<|endoftext|>")
    assert "im_start" in info["chat_template"]
    assert info["model_max_length"] > 0


def test_metrics_count_requests_and_tokens(http: httpx.Client) -> None:
    before = http.get("/metrics").text
    http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "ignore_eos": True})
    after = http.get("/metrics").text

    name = "strata:generation_tokens_total"
    assert sample(after, name) - sample(before, name) == 2
    assert sample(after, "strata_requests_total", route="/v1/completions", status="200") >= 1
    assert sample(after, "strata_request_duration_seconds_bucket", route="/v1/completions", le="+Inf") >= 1


def test_openapi_schema_lists_the_routes(http: httpx.Client) -> None:
    paths = http.get("/schema/openapi.json").json()["paths"]
    for route in (
        "/v1/completions",
        "/v1/chat/completions",
        "/tokenize",
        "/detokenize",
    ):
        assert route in paths
    body = paths["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]
    properties = body["schema"]["properties"]
    assert {"prompt", "logprobs", "echo", "allowed_token_ids"} <= set(properties)
