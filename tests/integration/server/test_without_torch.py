"""A server on the native kernels runs without torch: start-up and memory depend on it.

Importing torch costs over a second and about 200 MB; the native path needs none of it. The
server process's memory map is read from /proc: no torch library may be mapped, while it
serves scored, sampled, structured and chat requests (every path a request can take), and
its scored reply carries the golden bits: the digest below was taken from the native kernels
(the same on every kernel target and thread count, as strata-engine's test_golden.py proves
for the full-vocabulary rows), so a server without torch that took another path fails here.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import httpx
import pytest

from strata_server.launch import server_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/maps")
TORCH_FILES = re.compile(r"/torch/|libtorch")  # the package's directory, its shared libraries
GOLDEN_PROMPT = "<|im_start|>user\nIs the sky blue? Answer Yes or No.<|im_end|>\n<|im_start|>assistant\n"
GOLDEN_BODY = {"prompt": GOLDEN_PROMPT, "max_tokens": 4, "echo": True, "logprobs": 5, "temperature": 0}
# sha256 of the reply's tokens, token logprobs and top-5 lists (floats as exact hex); update
# only with a deliberate change of the arithmetic (test_golden.py's hashes change with it)
GOLDEN_DIGEST = "92b96e1e37b2f2d66141b1a961231f17c535e2349eeae3137ca731c2558e128a"


def logprobs_digest(lp: dict) -> str:
    exact = [
        lp["tokens"],
        [None if v is None else float(v).hex() for v in lp["token_logprobs"]],
        [
            None if t is None else sorted((k, float(v).hex()) for k, v in t.items())
            for t in lp["top_logprobs"]
        ],
    ]
    return hashlib.sha256(json.dumps(exact).encode()).hexdigest()


def torch_mapped(maps: Path) -> list[str]:
    return [line for line in maps.read_text().splitlines() if TORCH_FILES.search(line)]


def test_native_server_serves_every_path_without_loading_torch() -> None:
    with server_process("--model", "default", "--log-level", "warning", "--kv-cache-mb", "64") as server:
        maps = Path(f"/proc/{server.process.pid}/maps")
        assert torch_mapped(maps) == []  # after start-up
        with httpx.Client(base_url=f"{server.url}/v1", timeout=120.0) as http:
            scored = http.post(
                "/completions",
                json={"prompt": "The capital of France is", "max_tokens": 3, "logprobs": 5, "echo": True},
            )
            assert scored.status_code == 200, scored.text
            assert len(scored.json()["choices"][0]["logprobs"]["tokens"]) > 5
            sampled = http.post(
                "/completions",
                json={"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "seed": 5},
            )
            again = http.post(
                "/completions",
                json={"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "seed": 5},
            )
            assert sampled.status_code == again.status_code == 200
            assert sampled.json()["choices"][0]["text"] == again.json()["choices"][0]["text"]
            chat = http.post(
                "/chat/completions",
                json={
                    "messages": [{"role": "user", "content": "Yes or no?"}],
                    "max_tokens": 1,
                    "logprobs": True,
                    "top_logprobs": 3,
                    "allowed_token_ids": [9584, 1185],
                },
            )
            assert chat.status_code == 200, chat.text
            structured = http.post(
                "/chat/completions",
                json={
                    "messages": [{"role": "user", "content": "Pick one."}],
                    "max_tokens": 5,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "c", "schema": {"enum": ["red", "blue"]}},
                    },
                },
            )
            assert structured.status_code == 200, structured.text
            assert structured.json()["choices"][0]["message"]["content"] in ('"red"', '"blue"')
            golden = http.post("/completions", json=GOLDEN_BODY)
            assert golden.status_code == 200, golden.text
            assert logprobs_digest(golden.json()["choices"][0]["logprobs"]) == GOLDEN_DIGEST
        assert torch_mapped(maps) == []  # after serving
