"""`strata-server --ray` on a real local Ray instance: 2 engine replicas on the default model.

One Ray instance for the module (it takes tens of seconds to start on 2 cores). The
reference is the single server (`strata-server` without Ray, same flags): the replicated
application must answer what it answers, bit for bit, whichever replica serves. Run by
`nox -s ray` (which installs the [ray] extra); skipped where Ray is not installed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from strata_server.launch import free_port, running_server

pytest.importorskip("ray.serve", reason="the [ray] extra is not installed (nox -s ray runs these tests)")

import ray

from strata_server.ray.options import RayOptions, options_from_serve_args
from strata_server.ray.serve import start, stop
from strata_server.settings import build_parser

FLAGS = ("--model", "default", "--threads", "1", "--parallel", "2", "--log-level", "warning")
REPLICA = "x-strata-replica"
PROMPT = "<|im_start|>user\nIs the sky blue? Answer Yes or No.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def ray_url() -> Iterator[str]:
    """The replicated application (2 replicas, affinity router), started in this process."""
    args = build_parser().parse_args([*FLAGS, "--ray", "--replicas", "2"])
    port = free_port()
    start(RayOptions.from_args(args, ()), "127.0.0.1", port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop()


@pytest.fixture(scope="module")
def single_url() -> Iterator[str]:
    """The single server with the same flags: the reference."""
    with running_server(*FLAGS) as url:
        yield url


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=120.0) as client:
        yield client


def without_ids(reply: httpx.Response) -> dict[str, Any]:
    body = reply.json()
    body.pop("id", None)
    body.pop("created", None)
    body.get("usage", {}).pop("prompt_tokens_details", None)  # cache hits depend on history
    return body


def test_options_come_from_the_single_servers_flags() -> None:
    """No Ray needed: the flags map to the replicas as they map to the single server."""
    args = build_parser().parse_args(
        ["--ray", "--replicas", "3", "--parallel", "3", "--max-queue", "7", "--max-logprobs", "9"]
    )
    options = RayOptions.from_args(args, ("key",))
    assert options.replicas == 3 and options.engine["parallel"] == 3
    assert options.engine["num_threads"] >= 1 and options.cpus_per_replica == options.engine["num_threads"]
    assert options.gpus_per_replica == 0
    assert options.settings.max_queue == 7 and options.settings.max_logprobs == 9
    assert options.settings.keys == ("key",)
    assert options.max_ongoing == 3 + 7
    assert options.router_config.request_router_kwargs == {
        "imbalanced_threshold": 3,
        "match_rate_threshold": 0.5,
    }
    cuda = RayOptions.from_args(build_parser().parse_args(["--ray", "--device", "cuda"]), ())
    assert cuda.gpus_per_replica == 1


def test_serve_run_arguments_are_the_cli_flags() -> None:
    options = options_from_serve_args(
        {"replicas": 3, "threads": 1, "no_prefix_cache": "true", "router": "pow2", "max_queue": -1}
    )
    assert options.replicas == 3 and options.router == "pow2"
    assert options.engine["num_threads"] == 1 and options.engine["prefix_cache"] is False
    assert options.settings.max_queue is None
    assert options_from_serve_args({"no_prefix_cache": "false"}).engine["prefix_cache"] is True


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--replicas", "0"], "--replicas must be at least 1"),
        (["--tensor-parallel", "2"], "--tensor-parallel is not supported"),
        (["--model", "/nonexistent/model.gguf"], "cannot load model"),
        (["--max-connections", "64", "--header-timeout", "5"], "no setting for --header-timeout, --max-con"),
        (["--max-client-connections", "8"], "no setting for --max-client-connections"),
        (["--max-header-bytes", "4096"], "no setting for --max-header-bytes"),
    ],
)
def test_the_cli_refuses_impossible_replicas(flags: list[str], message: str) -> None:
    from strata_server.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["--ray", *flags])
    assert message in str(exited.value)


def test_health_reports_the_replicas(http: httpx.Client, ray_url: str) -> None:
    reply = http.get(f"{ray_url}/health")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["status"] == "ok" and body["invariant"] is True
    assert body["replicas"] == {"running": 2, "target": 2}


def test_the_same_request_gives_the_same_bits_on_every_replica(
    http: httpx.Client, ray_url: str, single_url: str
) -> None:
    """A burst of one request: the affinity replica's queue outgrows the other's, so the
    router spreads it; every reply equals the single server's, bit for bit."""
    payload = {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 5, "echo": True}
    reference = http.post(f"{single_url}/v1/completions", json=payload)
    assert reference.status_code == 200, reference.text

    def ask(_: int) -> httpx.Response:
        return http.post(f"{ray_url}/v1/completions", json=payload)

    with ThreadPoolExecutor(12) as pool:
        replies = list(pool.map(ask, range(36)))
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies if r.status_code != 200]
    assert len({r.headers[REPLICA] for r in replies}) == 2, "the burst never reached the second replica"
    expected = without_ids(reference)
    for reply in replies:
        assert without_ids(reply) == expected
        replica_ms = float(reply.headers["server-timing"].removeprefix("replica;dur="))
        assert 0 < replica_ms <= reply.elapsed.total_seconds() * 1000


def test_questions_about_one_state_stay_on_one_replica(http: httpx.Client, ray_url: str) -> None:
    """Sequential questions (balanced load): each state's questions go where its prefix is
    cached (cache hits from the second question on); new states go to the emptier replica."""
    served: dict[int, set[str]] = {}
    for state in range(4):
        context = f"Case {state}: " + " ".join(f"fact {state}-{k} is {k * state % 7}." for k in range(30))
        for question in ("Is it urgent?", "Is it safe?", "Is it done?"):
            prompt = f"<|im_start|>user\n{context}\n{question}<|im_end|>\n<|im_start|>assistant\n"
            reply = http.post(
                f"{ray_url}/v1/completions",
                json={"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 2},
            )
            assert reply.status_code == 200, reply.text
            served.setdefault(state, set()).add(reply.headers[REPLICA])
            if question != "Is it urgent?":
                assert reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert all(len(replicas) == 1 for replicas in served.values()), served
    assert len(set().union(*served.values())) == 2, served


@pytest.mark.parametrize(
    ("method", "path", "content"),
    [
        ("POST", "/v1/completions", b"{not json"),
        ("POST", "/v1/completions", b'{"prompt": "hi", "max_tokens": "3"}'),
        ("POST", "/v1/completions", b'{"prompt": [1, 999999]}'),
        ("POST", "/v1/chat/completions", b'{"messages": "hi"}'),
        ("POST", "/v1/completions", b'{"prompt": "hi", "logprobs": 999}'),
        ("GET", "/v1/completions", b""),
        ("GET", "/v1/nothing", b""),
        ("POST", "/tokenize", b'{"prompt": 5}'),
        ("POST", "/v1/completions", b'{"prompt": "' + b"a" * 10_000_001 + b'"}'),
    ],
)
def test_bad_requests_get_the_single_servers_envelope(
    http: httpx.Client, ray_url: str, single_url: str, method: str, path: str, content: bytes
) -> None:
    headers = {"content-type": "application/json"}
    replies = [
        http.request(method, f"{url}{path}", content=content, headers=headers)
        for url in (ray_url, single_url)
    ]
    ours, reference = replies
    assert 400 <= reference.status_code < 500
    assert ours.status_code == reference.status_code, ours.text
    assert ours.json()["error"] == reference.json()["error"]
    good = http.post(f"{ray_url}/v1/completions", json={"prompt": "hi", "max_tokens": 1})
    assert good.status_code == 200


def test_metrics_label_each_replica(http: httpx.Client, ray_url: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families  # a ray[serve] dependency

    time.sleep(1.5)  # replicas publish their series every second
    text = http.get(f"{ray_url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["strata:replicas_running"].samples[0].value == 2
    requests = [s for s in families["strata_requests"].samples if s.name == "strata_requests_total"]
    assert len({s.labels["replica"] for s in requests}) == 2
    completions = sum(s.value for s in requests if s.labels["route"] == "/v1/completions")
    assert completions >= 36 + 12  # the burst and the state questions above


def test_a_killed_replica_fails_its_requests_with_503_and_is_replaced(
    http: httpx.Client, ray_url: str
) -> None:
    """Two long requests in flight on one replica (one streamed, past its first chunk); the
    replica's process is killed: the plain one is a 503 envelope, the stream ends with an
    error event, neither hangs; the next request is served and Ray starts a new replica."""
    prompt = (
        "<|im_start|>user\nTell me a very long story about a lighthouse.<|im_end|>\n<|im_start|>assistant\n"
    )
    long = {"prompt": prompt, "max_tokens": 3000, "ignore_eos": True, "temperature": 0}
    victim = http.post(f"{ray_url}/v1/completions", json={**long, "max_tokens": 1}).headers[REPLICA]
    outcome: dict[str, Any] = {}

    def plain() -> None:
        outcome["plain"] = http.post(f"{ray_url}/v1/completions", json=long)

    worker = threading.Thread(target=plain)
    worker.start()
    with http.stream("POST", f"{ray_url}/v1/completions", json={**long, "stream": True}) as stream:
        assert stream.status_code == 200 and stream.headers[REPLICA] == victim
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first.removeprefix("data: "))["choices"][0]["text"] is not None
        killed_at = time.monotonic()
        ray.kill(ray.get_actor(f"SERVE_REPLICA::strata#StrataReplica#{victim}", namespace="serve"))
        rest = [line for line in lines if line.startswith("data: ")]
    worker.join(timeout=60)
    assert not worker.is_alive(), "the request on the killed replica hangs"
    assert time.monotonic() - killed_at < 30

    assert rest[-1] == "data: [DONE]"
    error = json.loads(rest[-2].removeprefix("data: "))["error"]
    assert error["code"] == "replica_unavailable" and error["type"] == "server_error"
    reply = outcome["plain"]
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "replica_unavailable"
    assert reply.headers["retry-after"]

    after = http.post(f"{ray_url}/v1/completions", json={"prompt": PROMPT, "max_tokens": 1})
    assert after.status_code == 200 and after.headers[REPLICA] != victim

    deadline = time.monotonic() + 120
    replicas: set[str] = set()
    running = 0
    while time.monotonic() < deadline:  # the new replica's series, and Serve counting it running
        text = http.get(f"{ray_url}/metrics").text
        replicas = {
            line.split('replica="')[1].split('"')[0] for line in text.splitlines() if 'replica="' in line
        }
        health = http.get(f"{ray_url}/health")
        running = health.json()["replicas"]["running"] if health.status_code == 200 else 0
        if len(replicas) == 2 and victim not in replicas and running == 2:
            break
        time.sleep(1.0)
    assert len(replicas) == 2 and victim not in replicas, replicas
    assert running == 2


def test_a_replica_killed_under_load_loses_no_request_silently(http: httpx.Client, ray_url: str) -> None:
    """Eight streams over both replicas (2 run at once on each, the rest queue there); one
    replica is killed once every stream has its first token: each stream ends with its last
    token or with a `replica_unavailable` error event, never silently; the survivor's all run
    to their end; the next requests all go to a live replica."""
    bodies = [
        {"prompt": f"<|im_start|>user\nCount to fifty, case {i}.<|im_end|>\n<|im_start|>assistant\n"}
        | {"max_tokens": 256, "ignore_eos": True, "temperature": 0, "stream": True}
        for i in range(8)
    ]
    with ExitStack() as stack:
        streams = [
            stack.enter_context(http.stream("POST", f"{ray_url}/v1/completions", json=b)) for b in bodies
        ]
        assert all(s.status_code == 200 for s in streams)
        on = [s.headers[REPLICA] for s in streams]
        assert len(set(on)) == 2, f"the load never reached both replicas: {on}"
        lines = [s.iter_lines() for s in streams]
        for it in lines:
            next(line for line in it if line.startswith("data: "))  # every stream under way
        victim = on[-1]  # its stream has just begun: in flight when the replica dies
        ray.kill(ray.get_actor(f"SERVE_REPLICA::strata#StrataReplica#{victim}", namespace="serve"))
        with ThreadPoolExecutor(len(lines)) as pool:
            rests = list(pool.map(lambda it: [x for x in it if x.startswith("data: ")], lines))
    failed = 0
    for replica, rest in zip(on, rests, strict=True):
        assert rest[-1] == "data: [DONE]", (replica, rest[-3:])
        last = json.loads(rest[-2].removeprefix("data: "))
        if "error" in last:
            assert replica == victim and last["error"]["code"] == "replica_unavailable", (replica, last)
            failed += 1
        else:
            assert last["choices"][0]["finish_reason"] == "length", last
    assert failed >= 1, "no request was in flight on the killed replica"
    after = [
        http.post(f"{ray_url}/v1/completions", json={"prompt": PROMPT, "max_tokens": 1}) for _ in range(4)
    ]
    assert all(r.status_code == 200 and r.headers[REPLICA] != victim for r in after), [
        (r.status_code, r.headers.get(REPLICA)) for r in after
    ]
