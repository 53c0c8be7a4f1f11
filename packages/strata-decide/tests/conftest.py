"""A fake upstream for unit tests, served through respx.

It speaks the routes strata_decide uses (``/v1/models``, ``/tokenize``, ``/detokenize``,
``/v1/completions``) with a tiny character tokenizer and a "model" whose label logprobs
are set by the test: each option line ``<label>) <text>`` of the prompt gets
``preference[text] + position_bias[position]``, shifted so that the labels hold exactly
``mass`` of the next-token distribution. So every expected number can be computed by hand.
"""

from __future__ import annotations

import json
import math
import string
from dataclasses import dataclass, field

import httpx
import pytest
import respx

UPSTREAM = "http://upstream.test"
SPECIALS = {"<|im_start|>": 1, "<|im_end|>": 2}
CHAR_BASE = 1000


def _merged_codes() -> dict[str, int]:
    """Words that are single tokens: Yes, No, and upper+upper pairs with an even code-point sum."""
    codes = [a + b for a in string.ascii_uppercase for b in string.ascii_uppercase]
    merged = [code for code in codes if (ord(code[0]) + ord(code[1])) % 2 == 0]
    return {code: 500_000 + i for i, code in enumerate(["Yes", "No", *merged])}


@dataclass
class FakeUpstream:
    url: str = UPSTREAM
    model: str = "fake-model"
    max_model_len: int = 4096
    mass: float = 0.8
    preference: dict[str, float] = field(default_factory=dict)
    position_bias: list[float] = field(default_factory=list)
    words: dict[str, int] = field(default_factory=_merged_codes)
    completion_calls: list[dict] = field(default_factory=list)
    fail_completions_with: int | None = None
    context_error: bool = False
    cached_tokens: int | None = None  # set: usage.prompt_tokens_details.cached_tokens
    system_fingerprint: str | None = None  # set: the replies' system_fingerprint

    # tokenizer -------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if text in self.words:
            return [self.words[text]]
        ids, i = [], 0
        while i < len(text):
            for special, sid in SPECIALS.items():
                if text.startswith(special, i):
                    ids.append(sid)
                    i += len(special)
                    break
            else:
                ids.append(CHAR_BASE + ord(text[i]))
                i += 1
        return ids

    def decode(self, ids: list[int]) -> str:
        by_id = {v: k for k, v in {**SPECIALS, **self.words}.items()}
        return "".join(by_id.get(i, chr(i - CHAR_BASE) if i >= CHAR_BASE else "") for i in ids)

    def render(self, messages: list[dict], add_generation_prompt: bool) -> str:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    # model -----------------------------------------------------------------
    def option_lines(self, prompt_text: str) -> list[tuple[str, str]]:
        """(label, text) of each option line of the last user message."""
        user = prompt_text.rsplit("<|im_start|>user\n", 1)[-1]
        lines = []
        for line in user.split("\n"):
            label, sep, rest = line.partition(")")
            if sep and label and " " not in label and len(label) <= 3:
                lines.append((label, rest.strip()))
        return lines

    def raw_logprobs(self, prompt_ids: list[int], allowed: list[int]) -> dict[int, float]:
        lines = self.option_lines(self.decode(prompt_ids))
        label_ids = {}
        for label, _ in lines:
            ids = self.encode(label) if len(self.encode(label)) == 1 else self.encode(" " + label)
            label_ids[label] = ids[0]
        scores = {}
        for position, (label, text) in enumerate(lines):
            bias = self.position_bias[position] if position < len(self.position_bias) else 0.0
            scores[label_ids[label]] = self.preference.get(text, 0.0) + bias
        chosen = [scores.get(i, -5.0) for i in allowed]
        top = max(chosen)
        lse = top + math.log(math.fsum(math.exp(v - top) for v in chosen))
        return {i: v - lse + math.log(self.mass) for i, v in zip(allowed, chosen, strict=True)}

    # routes ----------------------------------------------------------------
    def tokenize(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if "messages" in body:
            ids = self.encode(self.render(body["messages"], body.get("add_generation_prompt", True)))
        else:
            ids = self.encode(body["prompt"])
        return httpx.Response(
            200, json={"tokens": ids, "count": len(ids), "max_model_len": self.max_model_len}
        )

    def detokenize(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"prompt": self.decode(json.loads(request.content)["tokens"])})

    def models(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={"object": "list", "data": [{"id": self.model, "object": "model", "created": 0}]},
        )

    def completions(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.completion_calls.append(body)
        if self.fail_completions_with is not None:
            return httpx.Response(
                self.fail_completions_with, json={"error": {"message": "boom", "type": "x"}}
            )
        if self.context_error:
            error = {"message": "too long", "type": "BadRequestError", "code": "context_length_exceeded"}
            return httpx.Response(400, json={"error": error})
        prompt = body["prompt"]
        allowed = body.get("allowed_token_ids")
        if allowed is None:  # a plain top-N read: the labels of the prompt plus filler tokens
            values = self.raw_logprobs(
                prompt,
                [self.encode(label)[0] for label, _ in self.option_lines(self.decode(prompt))],
            )
            values.update({900 + k: -12.0 - k for k in range(body["logprobs"])})
            top = dict(sorted(values.items(), key=lambda kv: -kv[1])[: body["logprobs"]])
        else:
            top = self.raw_logprobs(prompt, allowed)
        best = max(top, key=top.get)
        logprobs = {
            "tokens": [f"token_id:{best}"],
            "token_logprobs": [top[best]],
            "top_logprobs": [{f"token_id:{i}": v for i, v in top.items()}],
            "text_offset": [0],
        }
        choice = {
            "index": 0,
            "text": self.decode([best]),
            "logprobs": logprobs,
            "finish_reason": "length",
        }
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": 1,
            "total_tokens": len(prompt) + 1,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        reply = {"id": "x", "model": self.model, "choices": [choice], "usage": usage}
        if self.system_fingerprint is not None:
            reply["system_fingerprint"] = self.system_fingerprint
        return httpx.Response(200, json=reply)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeUpstream:
    """The fake upstream, mocked at its URL; $STRATA_BASE_URL points clients at it."""
    monkeypatch.setenv("STRATA_BASE_URL", UPSTREAM)
    upstream = FakeUpstream()
    with respx.mock(base_url=UPSTREAM, assert_all_called=False) as mock:
        mock.get("/v1/models").mock(side_effect=upstream.models)
        mock.post("/tokenize").mock(side_effect=upstream.tokenize)
        mock.post("/detokenize").mock(side_effect=upstream.detokenize)
        mock.post("/v1/completions").mock(side_effect=upstream.completions)
        yield upstream
