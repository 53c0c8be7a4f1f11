"""The gateway forwards a request's id to the server: the caller's `X-Request-Id` comes back
from the gateway and appears in the server's JSON access log for each upstream call."""

from __future__ import annotations

import json
import time

import httpx

from strata_decide.gateway import GatewayConfig
from strata_decide.gateway.serve import background
from strata_server.launch import server_process


def test_the_gateway_forwards_the_request_id_to_the_server() -> None:
    with (
        server_process("--parallel", "2", "--log-level", "info") as server,
        background(GatewayConfig(upstream=server.url, upstream_timeout=120)) as gateway,
    ):
        body = {
            "model": "jev-latest",
            "state": "The invoice was paid twice.",
            "questions": {"q": {"type": "noul", "instructions": "Is it about billing?"}},
        }
        reply = httpx.post(
            f"{gateway}/v1/systemone", json=body, headers={"x-request-id": "gw-trace-7"}, timeout=120
        )
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-request-id"] == "gw-trace-7"
        generated = httpx.get(f"{gateway}/health").headers["x-request-id"]
        assert len(generated) == 32
        time.sleep(0.2)
        log = server.log().splitlines()  # text format: TIME LEVEL strata_server.access: {json}
        lines = [json.loads(line[line.index("{") :]) for line in log if '{"event":"request"' in line]
        upstream = [line for line in lines if line["request_id"] == "gw-trace-7"]
        assert upstream and all(line["status"] == 200 for line in upstream)
        assert any(line["route"] == "/v1/completions" for line in upstream)
