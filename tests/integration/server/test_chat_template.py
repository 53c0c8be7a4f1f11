"""`--chat-template` (a file or the template itself) and vLLM's per-request `chat_template` /
`chat_template_kwargs` on the real server and model, rendered in the engine's sandbox."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from strata_server.launch import server_process

SERVER_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
REQUEST_TEMPLATE = (
    "{{ greeting }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)
MESSAGES = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def template_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("templates") / "plain.jinja"
    path.write_text(SERVER_TEMPLATE, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trusted(template_file: Path) -> Iterator[httpx.Client]:
    """A server whose --chat-template replaces the model's and which renders request templates."""
    flags = ("--model", "default", "--parallel", "2", "--log-level", "warning")
    extra = ("--chat-template", str(template_file), "--trust-request-chat-template")
    with server_process(*flags, *extra) as server, httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def default(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=120) as client:
        yield client


def ids_of(client: httpx.Client, text: str) -> list[int]:
    return client.post("/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]


def test_the_server_template_replaces_the_models(
    trusted: httpx.Client, default: httpx.Client, template_file: Path
) -> None:
    expected = "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"  # rendered by hand
    rendered = trusted.post("/tokenize", json={"messages": MESSAGES}).json()["tokens"]
    assert rendered == ids_of(trusted, expected)
    # the model's own template (SmolLM2's adds a system message) renders something else
    assert default.post("/tokenize", json={"messages": MESSAGES}).json()["tokens"] != rendered
    assert trusted.get("/tokenizer_info").json()["chat_template"] == template_file.read_text()
    version, reference = trusted.get("/version").json(), default.get("/version").json()
    assert version["chat_template_sha256"] == hashlib.sha256(template_file.read_bytes()).hexdigest()
    assert version["system_fingerprint"] != reference["system_fingerprint"]  # chat bits may differ
    chat = trusted.post(
        "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4, "temperature": 0}
    )
    same = trusted.post("/v1/completions", json={"prompt": rendered, "max_tokens": 4, "temperature": 0})
    assert chat.json()["choices"][0]["message"]["content"] == same.json()["choices"][0]["text"]
    assert chat.json()["system_fingerprint"] == version["system_fingerprint"]


def test_a_request_template_and_its_kwargs(trusted: httpx.Client) -> None:
    body = {
        "messages": MESSAGES,
        "chat_template": REQUEST_TEMPLATE,
        "chat_template_kwargs": {"greeting": "Hi! "},
    }
    expected = "Hi! [user] Name a colour.\n[assistant] "
    rendered = trusted.post("/tokenize", json=body).json()["tokens"]
    assert rendered == ids_of(trusted, expected)
    chat = trusted.post("/v1/chat/completions", json={**body, "max_tokens": 3, "temperature": 0}).json()
    assert chat["usage"]["prompt_tokens"] == len(rendered)
    same = trusted.post(
        "/v1/completions", json={"prompt": rendered, "max_tokens": 3, "temperature": 0}
    ).json()
    assert chat["choices"][0]["message"]["content"] == same["choices"][0]["text"]


def test_add_special_tokens_adds_one_bos(trusted: httpx.Client) -> None:
    plain = trusted.post("/tokenize", json={"messages": MESSAGES}).json()["tokens"]
    chat = trusted.post(
        "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1, "add_special_tokens": True}
    ).json()
    bos = trusted.get("/tokenizer_info").json()["bos_token"]
    if bos is None:
        pytest.skip("the model has no BOS token")
    assert chat["usage"]["prompt_tokens"] == len(plain) + (0 if plain[0] == ids_of(trusted, bos)[0] else 1)


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"chat_template": REQUEST_TEMPLATE}, "chat_template", "untrusted_chat_template"),
        ({"chat_template_kwargs": {"chat_template": REQUEST_TEMPLATE}}, "chat_template_kwargs", None),
        ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs", None),
    ],
)
def test_an_untrusting_server_refuses_request_templates(
    default: httpx.Client, body: dict, param: str, code
) -> None:
    for route, extra in (("/v1/chat/completions", {"max_tokens": 1}), ("/tokenize", {})):
        reply = default.post(route, json={"messages": MESSAGES, **extra, **body})
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["param"] == param and (code is None or error["code"] == code)


def test_a_broken_request_template_is_a_400_naming_it(trusted: httpx.Client) -> None:
    for template in ("{% for %}", "{{ messages[0].content | no_such_filter }}"):
        reply = trusted.post("/v1/chat/completions", json={"messages": MESSAGES, "chat_template": template})
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["param"] == "chat_template"
    unsafe = "{{ messages.__class__.__mro__ }}"  # the sandbox refuses it at render time
    reply = trusted.post("/v1/chat/completions", json={"messages": MESSAGES, "chat_template": unsafe})
    assert reply.status_code == 400, reply.text
