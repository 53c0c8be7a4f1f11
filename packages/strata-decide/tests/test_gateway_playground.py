"""What the playground needs from the gateway, on the fake upstream: the page and its files,
the forwarded server routes, and the ``x_strata`` extensions (trace, rotations, parity)."""

from __future__ import annotations

import json
import re

import httpx
import pytest
import respx
from litestar.testing import TestClient

from strata_decide.gateway import GatewayConfig, create_app
from strata_decide.gateway.passthrough import FORWARDED

from .conftest import UPSTREAM

STATE = "I was charged twice. Please help."
TONE = {"type": "choice", "instructions": "Tone?", "criteria": {"calm": None, "angry": "upset", "sad": None}}


def ask(client, **extensions):
    body = {"model": "jev-latest", "state": STATE, "questions": {"tone": TONE}, **extensions}
    return client.post("/v1/systemone", json=body)


@pytest.fixture
def gateway(fake):
    with TestClient(create_app(GatewayConfig(upstream=fake.url))) as client:
        yield client


@pytest.fixture
def routes(fake):
    """A router at the fake's URL over the fake's routes, for a test to add or replace one."""
    with respx.mock(base_url=UPSTREAM, assert_all_called=False) as mock:
        mock.get("/v1/models").mock(side_effect=fake.models)
        mock.post("/tokenize").mock(side_effect=fake.tokenize)
        mock.post("/detokenize").mock(side_effect=fake.detokenize)
        mock.post("/v1/completions").mock(side_effect=fake.completions)
        yield mock


@pytest.fixture
def keyed(fake):
    config = GatewayConfig(upstream=fake.url, api_key="gateway-key", upstream_api_key="server-key")
    with TestClient(create_app(config)) as client:
        yield client


def test_the_page_and_every_file_it_loads_are_served_without_a_key(keyed):
    page = keyed.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    linked = re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)
    assert sorted(linked) == ["/static/playground.css", "/static/playground.js"]
    for path in linked:
        served = keyed.get(path)
        assert served.status_code == 200 and served.content
        assert served.headers["content-type"].startswith(("text/css", "text/javascript"))
    assert keyed.get("/static/missing.js").status_code == 404
    assert ask(keyed).status_code == 401  # the API still needs the key


def test_forwarded_routes_send_the_upstream_key_and_return_the_reply_unchanged(keyed, fake, routes):
    seen: list[httpx.Request] = []
    refusal = {"error": {"message": "`candidates` must hold between 1 and 16 entries, got 0."}}

    def score(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(400, json=refusal)

    routes.post("/v1/score_candidates").mock(side_effect=score)
    sent = {"prompt": [1, 2], "candidates": []}
    reply = keyed.post(
        "/upstream/v1/score_candidates", json=sent, headers={"Authorization": "Bearer gateway-key"}
    )
    assert reply.status_code == 400 and reply.json() == refusal
    assert seen[0].headers["authorization"] == "Bearer server-key"  # never the caller's key
    assert json.loads(seen[0].content) == sent

    assert keyed.post("/upstream/v1/score_candidates", json=sent).status_code == 401
    assert len(seen) == 1  # refused before anything went upstream
    key = {"Authorization": "Bearer gateway-key"}
    assert keyed.get("/upstream/metrics", headers=key).status_code == 404  # not a forwarded route
    assert keyed.get("/upstream/v1/models", headers=key).json()["data"][0]["id"] == fake.model
    assert ("POST", "/v1/completions") in FORWARDED


def test_an_unreachable_server_is_a_502_on_forwarded_routes():
    with TestClient(create_app(GatewayConfig(upstream="http://127.0.0.1:9"))) as client:
        reply = client.get("/upstream/health")
    assert reply.status_code == 502
    assert reply.json()["detail"]["error_type"] == "upstream_error"


def test_trace_shows_the_prompt_that_was_read_and_changes_no_answer(gateway, fake):
    plain = ask(gateway).json()
    traced = ask(gateway, x_strata={"trace": True}).json()
    answer = traced["answers"]["tone"]
    trace = answer.pop("x_trace")
    assert answer == plain["answers"]["tone"]
    assert traced["x_system_fingerprint"] is None  # the fake sends none

    read = fake.completion_calls[-1]["prompt"]
    prompt = trace["prompt"]
    assert prompt["token_ids"] == read and prompt["tokens"] == len(read)
    assert prompt["text"] == fake.decode(read)
    state_ids = fake.encode(fake.render([{"role": "system", "content": _system(prompt["text"])}], False))
    assert prompt["shared_prefix_tokens"] == len(state_ids)
    assert prompt["shared_prefix_text"] == fake.decode(state_ids)
    assert prompt["cached_tokens"] == 0 and prompt["cached_text"] == ""
    assert [(x["option"], x["label"]) for x in trace["labels"]] == [
        ("calm", "A"),
        ("angry", "B"),
        ("sad", "C"),
    ]
    assert [x["token_id"] for x in trace["labels"]] == [fake.encode(x)[0] for x in "ABC"]
    assert trace["reads"] == 1


def _system(text: str) -> str:
    """The system message's content inside the fake's rendered prompt."""
    return text.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]


def test_trace_reports_the_servers_cached_tokens_and_fingerprint(gateway, fake):
    fake.cached_tokens, fake.system_fingerprint = 7, "fp_test"
    traced = ask(gateway, x_strata={"trace": True}).json()
    prompt = traced["answers"]["tone"]["x_trace"]["prompt"]
    assert prompt["cached_tokens"] == 7
    assert prompt["cached_text"] == fake.decode(prompt["token_ids"][:7])
    assert traced["x_system_fingerprint"] == "fp_test"


def test_rotations_on_request_read_every_order(gateway, fake):
    fake.preference = {"calm": 0.0, "angry: upset": 1.0, "sad": 0.5}
    fake.position_bias = [0.8, 0.0, 0.0]
    before = len(fake.completion_calls)
    plain = ask(gateway).json()["answers"]["tone"]["probabilities"]
    assert len(fake.completion_calls) - before == 1
    rotated = ask(gateway, x_strata={"rotations": True, "trace": True}).json()["answers"]["tone"]
    assert len(fake.completion_calls) - before == 1 + 3
    assert rotated["x_trace"]["reads"] == 3
    # the position bias cancels: the average follows the preferences alone
    expected = [1.0, 2.718281828459045, 1.6487212707001282]
    assert list(rotated["probabilities"].values()) == pytest.approx([e / sum(expected) for e in expected])
    assert plain != rotated["probabilities"]


def test_parity_on_request_compares_the_label_read_with_the_top_20(gateway):
    answer = ask(gateway, x_strata={"parity": True}).json()["answers"]["tone"]
    assert answer["x_parity"] == {
        "top_k": 20,
        "labels": 3,
        "compared": 3,
        "max_abs_diff": 0.0,
        "argmax_agrees": True,
    }
    assert "x_trace" not in answer


@pytest.mark.parametrize("extensions", [{"trace": "yes"}, {"rotations": 1}, {"parity": True, "other": 1}, []])
def test_a_malformed_x_strata_is_a_422(gateway, extensions):
    reply = ask(gateway, x_strata=extensions)
    assert reply.status_code == 422
    assert all(item["loc"][:2] == ["body", "x_strata"] for item in reply.json()["detail"])
