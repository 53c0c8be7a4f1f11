"""Parity on the real server: the named-id read equals the server's own top-20, bit for bit."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from strata_client import AsyncStrataClient
from strata_decide.parity import run_parity
from strata_decide.samples import QUESTIONS, STATES


def test_named_read_equals_the_plain_top_20_exactly(server_url: str):
    async def run():
        async with AsyncStrataClient(base_url=server_url, timeout=300) as client:
            return await run_parity(client, None, STATES, QUESTIONS)

    report = asyncio.run(run())
    assert len(report.cases) == 15
    assert len(report.diffs) > 0  # some labels were in the top-20 to compare
    assert report.max_abs_diff == 0.0
    assert report.argmax_agreement == 1.0
    assert report.passed


def test_parity_command_exits_zero_and_reports(server_url: str):
    done = subprocess.run(
        [sys.executable, "-m", "strata_decide", "parity", "--server", server_url, "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["max_abs_diff"] == 0.0
