"""50 identical concurrent requests, with other traffic running: exactly one distinct answer.

Also across routes: the same prompt as chat, as text on /v1/completions and as token ids
gives the same bits for the first generated token.
"""

from __future__ import annotations

import asyncio
import json

import httpx

PROMPT = "<|im_start|>user\nList three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n"


def _body_without_ids(resp: httpx.Response) -> str:
    data = resp.json()
    data.pop("id", None)
    data.pop("created", None)
    data.get("usage", {}).pop("prompt_tokens_details", None)  # cached counts vary with timing
    return json.dumps(data, sort_keys=True)


async def _fire(server_url: str) -> tuple[list[httpx.Response], list[httpx.Response]]:
    identical = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": 5, "echo": True}
    async with httpx.AsyncClient(base_url=server_url, timeout=300) as client:
        background = [
            client.post(
                "/v1/completions",
                json={
                    "prompt": f"Story number {i}: once upon a time",
                    "max_tokens": 3 + i % 5,
                    "temperature": 0.7,
                    "seed": i,
                },
            )
            for i in range(10)
        ] + [
            client.post(
                "/v1/chat/completions",
                json={
                    "messages": [{"role": "user", "content": f"Say a number above {i}"}],
                    "max_tokens": 4,
                    "logprobs": True,
                    "top_logprobs": 3,
                },
            )
            for i in range(5)
        ]
        same = [client.post("/v1/completions", json=identical) for _ in range(50)]
        everything = await asyncio.gather(*same, *background)
    return list(everything[:50]), list(everything[50:])


def test_fifty_identical_requests_give_one_body(server_url):
    same, background = asyncio.run(_fire(server_url))
    assert all(r.status_code == 200 for r in same + background)
    bodies = {_body_without_ids(r) for r in same}
    assert len(bodies) == 1
    choice = same[0].json()["choices"][0]
    assert len(choice["logprobs"]["token_logprobs"]) > 8  # echoed prompt plus generated tokens


def test_chat_text_and_token_ids_give_the_same_bits(server_url):
    with httpx.Client(base_url=server_url, timeout=120) as client:
        messages = [{"role": "user", "content": "Name a fruit."}]
        chat = client.post(
            "/v1/chat/completions",
            json={
                "messages": messages,
                "max_tokens": 1,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": 5,
            },
        ).json()
        ids = client.post("/tokenize", json={"messages": messages, "add_generation_prompt": True}).json()[
            "tokens"
        ]
        text = client.post("/detokenize", json={"tokens": ids}).json()["prompt"]
        by_text = client.post(
            "/v1/completions", json={"prompt": text, "max_tokens": 1, "temperature": 0, "logprobs": 5}
        ).json()
        by_ids = client.post(
            "/v1/completions", json={"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 5}
        ).json()
    chat_entry = chat["choices"][0]["logprobs"]["content"][0]
    chat_top = {t["token"]: t["logprob"] for t in chat_entry["top_logprobs"]}
    text_top = by_text["choices"][0]["logprobs"]["top_logprobs"][0]
    ids_top = by_ids["choices"][0]["logprobs"]["top_logprobs"][0]
    assert text_top == ids_top
    assert {k: v for k, v in text_top.items() if k in chat_top} == chat_top
    assert by_text["choices"][0]["logprobs"]["token_logprobs"][0] == chat_entry["logprob"]
