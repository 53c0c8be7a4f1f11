"""The how-tos in docs/ run as written, against the real server on the real model.

Their Python blocks run with the documented address (127.0.0.1:8000, the gateway's :8100)
replaced by the test servers'; their commands are started (`strata-decide serve`, `lm_eval`).
lm-evaluation-harness runs the how-to's command on a local task of three questions (its Hub
datasets need the network) in `nox -s lm_eval`, the one session that installs it; everywhere
its requests are also replayed through the openai SDK (lm_eval 0.4's `RemoteTokenizer` and
`LocalCompletionsAPI._create_payload`). docs/howto-own-gguf.md's Hub command runs in
test_hub_models.py against a stand-in Hub.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from strata_server.launch import free_port

DOCS = Path(__file__).resolve().parents[2] / "docs"
SERVER = "http://127.0.0.1:8000"
GATEWAY = "http://127.0.0.1:8100"


def blocks(doc: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / doc).read_text(), re.DOTALL)


def command_lines(doc: str, program: str) -> list[list[str]]:
    """Every line of the doc's bash blocks that runs `program`, split as a shell would."""
    return [
        shlex.split(line)
        for block in blocks(doc, "bash")
        for line in block.splitlines()
        if line.split(" ", 1)[0] == program
    ]


def run_block(code: str, **urls: str) -> None:
    for documented, real in urls.items():
        code = code.replace(documented, real)
    exec(compile(code, "<how-to>", "exec"), {"__name__": "__howto__"})


@pytest.mark.parametrize("index", range(4))
def test_openai_sdk_howto(index: int, server_url: str) -> None:
    examples = blocks("howto-openai-sdk.md", "python")
    assert len(examples) == 4
    run_block(examples[index], **{SERVER: server_url})


def test_the_howtos_start_the_server_they_talk_to() -> None:
    """Each how-to starts the default model's server on the default port its code talks to."""
    for doc in ("howto-openai-sdk.md", "howto-lm-eval.md", "howto-typed-decisions.md"):
        commands = command_lines(doc, "strata-server")
        assert commands and all(c[1:3] == ["--model", "default"] and "--port" not in c for c in commands)
    from strata_server.settings import DEFAULT_PORT

    assert SERVER.endswith(f":{DEFAULT_PORT}")


@pytest.fixture(scope="module")
def documented_gateway(server_url: str) -> Iterator[str]:
    """`strata-decide serve` exactly as the how-to writes it, but for the upstream's and its own port."""
    (command,) = command_lines("howto-typed-decisions.md", "strata-decide")
    assert command[1:] == ["serve", "--server", SERVER, "--port", "8100"]
    port = free_port()
    args = [a.replace(SERVER, server_url).replace("8100", str(port)) for a in command[1:]]
    process = subprocess.Popen(
        [sys.executable, "-m", "strata_decide", *args], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert process.poll() is None, "strata-decide serve exited"
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_typed_decisions_howto(documented_gateway: str, server_url: str) -> None:
    (example,) = blocks("howto-typed-decisions.md", "python")
    run_block(example, **{GATEWAY: documented_gateway, SERVER: server_url})


def lm_eval_model_args() -> dict[str, str]:
    (command,) = command_lines("howto-lm-eval.md", "lm_eval")
    assert command[command.index("--model") + 1] == "local-completions"
    pairs = command[command.index("--model_args") + 1].split(",")
    return dict(pair.split("=", 1) for pair in pairs)


def test_lm_eval_howto_requests(server_url: str) -> None:
    """What `lm_eval --model local-completions` with the how-to's model_args sends for a
    log-likelihood task, and what it reads back (lm_eval 0.4.13's code, replayed)."""
    args = lm_eval_model_args()
    assert "batch_size" not in args  # lm_eval 0.4.13 refuses it there: --batch_size on the command line
    assert args["base_url"] == f"{SERVER}/v1/completions"
    assert args["tokenizer_backend"] == "remote" and args["tokenized_requests"] == "True"
    base = args["base_url"].replace(SERVER, server_url)
    root = base.replace("/v1/completions", "")
    # the served name in the how-to is the default model's
    assert httpx.get(f"{root}/v1/models", timeout=120).json()["data"][0]["id"] == args["model"]

    # RemoteTokenizer: check_remote_tokenizer_support, then encode without special tokens
    info = httpx.get(f"{root}/tokenizer_info", timeout=120).json()
    assert isinstance(info, dict) and "eos_token" in info

    def encode(text: str) -> list[int]:
        reply = httpx.post(
            f"{root}/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=120
        )
        tokens = reply.json()["tokens"]
        assert isinstance(tokens, list)
        return tokens

    assert (
        httpx.post(f"{root}/detokenize", json={"tokens": encode("test")}, timeout=120).json()["prompt"]
        == "test"
    )
    pairs = [
        ("Question: What is the capital of France?\nAnswer:", " Paris"),
        ("Question: What is the capital of France?\nAnswer:", " a small blue teapot"),
        ("The sky is", " blue"),
    ]
    requests = [(encode(c), encode(c + x)[len(encode(c)) :]) for c, x in pairs]
    # LocalCompletionsAPI._create_payload(generate=False), batch_size=8: one request, id lists
    client = OpenAI(base_url=base.removesuffix("/completions"), api_key="unused", max_retries=0)
    reply = client.completions.create(
        model=args["model"],
        prompt=[ctx + cont for ctx, cont in requests],
        temperature=0,
        max_tokens=1,
        logprobs=1,
        seed=1234,
        echo=True,
    )
    # parse_logprobs: the continuation's rows are [ctxlen:-1] (the last row is the generated token)
    for choice, (ctx, cont) in zip(sorted(reply.choices, key=lambda c: c.index), requests, strict=True):
        rows = choice.logprobs.token_logprobs[len(ctx) : -1]
        tops = choice.logprobs.top_logprobs[len(ctx) : -1]
        assert len(rows) == len(cont)
        greedy = all(value == max(top.values()) for value, top in zip(rows, tops, strict=True))
        # independent of the echo rows: each continuation token's value as the next token after
        # its prefix, read from a one-token decision (allowed_token_ids lists its raw value)
        for i, token in enumerate(cont):
            single = client.completions.create(
                model=args["model"],
                prompt=ctx + cont[:i],
                max_tokens=1,
                temperature=0,
                logprobs=1,
                extra_body={"allowed_token_ids": [token], "return_tokens_as_token_ids": True},
            )
            assert single.choices[0].logprobs.top_logprobs[0][f"token_id:{token}"] == rows[i]
        # greedy means the model's own greedy continuation is this one
        best = client.completions.create(
            model=args["model"],
            prompt=ctx,
            max_tokens=len(cont),
            temperature=0,
            logprobs=0,
            extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True},
        )
        own = [int(t.removeprefix("token_id:")) for t in best.choices[0].logprobs.tokens]
        assert greedy == (own == cont)
    assert [c.index for c in reply.choices] == [0, 1, 2]


LM_EVAL_TASK = """\
task: strata_howto
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
"""
LM_EVAL_QUESTIONS = [
    {"question": "What is the capital of France?", "choices": ["Paris", "a small blue teapot"], "answer": 0},
    {"question": "What colour is the sky on a clear day?", "choices": ["green", "blue"], "answer": 1},
    {"question": "How many legs does a cat have?", "choices": ["four", "seventeen"], "answer": 0},
]


def test_lm_eval_howto_runs(server_url: str, tmp_path: Path) -> None:
    """The how-to's `lm_eval` command, with a local task of three questions for arc_easy: it
    runs, and every log-likelihood it reports is the server's own value for that continuation."""
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("nox -s lm_eval runs this test (lm_eval is installed there)")
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps(q) + "\n" for q in LM_EVAL_QUESTIONS))
    (tmp_path / "strata_howto.yaml").write_text(LM_EVAL_TASK.format(data=data))
    (command,) = command_lines("howto-lm-eval.md", "lm_eval")
    args = [a.replace(SERVER, server_url) for a in command[1:]]
    args[args.index("--tasks") + 1] = "strata_howto"
    out = tmp_path / "out"
    args += ["--include_path", str(tmp_path), "--output_path", str(out), "--log_samples"]
    run = subprocess.run(
        [sys.executable, "-m", "lm_eval", *args], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (samples,) = out.glob("*/samples_strata_howto_*.jsonl")
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    assert sorted(r["doc_id"] for r in records) == [0, 1, 2]

    def encode(text: str) -> list[int]:
        reply = httpx.post(
            f"{server_url}/tokenize", json={"prompt": text, "add_special_tokens": False}, timeout=120
        )
        return reply.json()["tokens"]

    for record in records:
        for k, ((value, greedy),) in enumerate(record["resps"]):
            pair = record["arguments"][f"gen_args_{k}"]
            context, whole = encode(pair["arg_0"]), encode(pair["arg_0"] + pair["arg_1"])
            echo = httpx.post(
                f"{server_url}/v1/completions",
                json={"prompt": whole, "max_tokens": 0, "echo": True, "logprobs": 1},
                timeout=120,
            ).json()["choices"][0]["logprobs"]
            rows = echo["token_logprobs"][len(context) :]
            tops = echo["top_logprobs"][len(context) :]
            assert float(value) == sum(rows)  # the same bits, summed in the same order
            assert greedy == str(all(v == max(t.values()) for v, t in zip(rows, tops, strict=True)))


def test_readme_decision_example(server_url: str) -> None:
    """The README's curl body, sent as written: the reply it shows (but for the reply's id, time
    and cache hits), both labels listed with their raw values, and what it says of them."""
    readme = (DOCS.parent / "README.md").read_text()
    (body,) = re.findall(r"curl -s localhost:8000/v1/completions -H '[^']*' -d '(.*?)'", readme, re.DOTALL)
    request = json.loads(body)
    reply = httpx.post(f"{server_url}/v1/completions", json=request, timeout=120).json()
    shown = json.loads(readme.split(" | python3 -m json.tool\n```\n\n```json\n", 1)[1].split("```", 1)[0])
    for answer in (reply, shown):
        del answer["id"], answer["created"], answer["usage"]["prompt_tokens_details"]
    assert shown == reply
    top = reply["choices"][0]["logprobs"]["top_logprobs"][0]
    assert sorted(top) == sorted(f"token_id:{i}" for i in request["allowed_token_ids"])
    # raw values over the whole vocabulary: the same as each label's value asked alone
    for token_id in request["allowed_token_ids"]:
        alone = httpx.post(
            f"{server_url}/v1/completions",
            json={**request, "allowed_token_ids": [token_id], "logprobs": 1},
            timeout=120,
        ).json()["choices"][0]["logprobs"]["top_logprobs"][0]
        assert alone[f"token_id:{token_id}"] == top[f"token_id:{token_id}"]
    # what the README says of them: the labels' ids, found with /tokenize, and their mass
    yes, no = request["allowed_token_ids"]
    for label, token_id in (("Yes", yes), ("No", no)):
        tokens = httpx.post(f"{server_url}/tokenize", json={"prompt": label}, timeout=120).json()["tokens"]
        assert tokens == [token_id]
    flat = " ".join(readme.split())
    said = httpx.post(f"{server_url}/tokenize", json={"prompt": "Yes"}, timeout=120).text
    assert f"answers `{said}`" in flat
    raw_yes, raw_no = top[f"token_id:{yes}"], top[f"token_id:{no}"]
    p_yes, p_no = math.exp(raw_yes), math.exp(raw_no)
    mass = p_yes + p_no
    assert f"e^{raw_no:.3f} + e^{raw_yes:.3f} = {p_no:.2f} + {p_yes:.2f} = {mass:.2f}," in flat
    assert f"P(Yes) = {p_yes:.2f} / {mass:.2f} = {p_yes / mass:.2f}" in flat
    assert reply["choices"][0]["text"] == "No" and 'it answers "No" to "Is the sky blue?"' in flat
