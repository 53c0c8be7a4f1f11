"""`--log-format json` on the real server: every line it writes is one JSON object with an ISO
8601 UTC time, uvicorn's own lines included, and the access line keeps its fields."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime

import httpx

from strata_server.launch import server_process

ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_every_line_is_json_with_an_iso_time() -> None:
    with server_process("--parallel", "1", "--log-level", "info", "--log-format", "json") as server:
        reply = httpx.post(
            f"{server.url}/v1/completions",
            json={"prompt": "Hi", "max_tokens": 2},
            headers={"x-request-id": "log-json-1"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        time.sleep(0.3)
        log = server.log()
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]  # fails on any non-JSON line
    assert len(lines) >= 3
    for line in lines:
        assert ISO_TIME.fullmatch(line["time"]) and line["level"] and line["logger"]
        stamp = datetime.strptime(line["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert abs((datetime.now(UTC) - stamp).total_seconds()) < 600  # UTC, not local time
    assert any(line["logger"].startswith("uvicorn") for line in lines)  # uvicorn's lines too
    (access,) = [line for line in lines if line.get("request_id") == "log-json-1"]
    assert access["event"] == "request" and access["logger"] == "strata_server.access"
    assert access["status"] == 200 and access["completion_tokens"] == 2 and "message" not in access
