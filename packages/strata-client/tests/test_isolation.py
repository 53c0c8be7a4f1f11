"""Importing the client pulls in neither torch nor the engine nor the server."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "strata_engine", "strata_server", "numpy")

PROBE = f"""
import json, sys
import strata_client
client = strata_client.StrataClient(base_url="http://127.0.0.1:9")
client.close()
print(json.dumps(sorted(name for name in {HEAVY!r} if name in sys.modules)))
"""


def test_import_loads_no_engine_server_or_torch():
    # A fresh interpreter: this test process may have imported anything already.
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(result.stdout) == []


def test_declared_dependencies_are_httpx_and_pydantic_only():
    from importlib.metadata import requires

    runtime = [req for req in requires("strata-client") or [] if "extra ==" not in req]
    names = sorted(req.split(">")[0].split("=")[0].split("<")[0].strip() for req in runtime)
    assert names == ["httpx", "pydantic"]
