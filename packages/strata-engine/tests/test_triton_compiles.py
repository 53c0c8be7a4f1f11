"""Every Triton kernel compiles for an H200 (sm_90) here, without a GPU (triton_compile.py).

The interpreter-based tests prove the kernels' bits; this proves a GPU can build them: every
distinct launch the engine makes on tiny models (every mode, prefill and decode, the static
decode path, selections and draws, sliding window and soft-cap, experts), recorded under the
interpreter with the GPU's tile sizes, then compiled by Triton's compiler for CUDA 9.0 down to a
cubin. It also checks that the workloads launch every kernel defined in kernels/triton, so a new
kernel cannot go unchecked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import triton_setup  # noqa: F401  (before triton: the other Triton tests in this process run interpreted)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

import strata_engine

HERE = Path(__file__).parent
KERNELS = Path(strata_engine.__file__).parent / "kernels" / "triton"


def _kernels_defined() -> set[str]:
    """Every launched kernel: a @triton.jit function named `_..._kernel` in kernels/triton."""
    found = set()
    for path in KERNELS.glob("*.py"):
        source = path.read_text()
        for name in re.findall(r"@triton\.jit[^\n]*\ndef (_\w+_kernel)\(", source):
            found.add(f"{path.stem}.{name}")
    return found


def _run(*args: str, interpret: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    if interpret:
        env |= {"TRITON_INTERPRET": "1", "STRATA_TRITON_GPU_TILES": "1"}
    done = subprocess.run(
        [sys.executable, str(HERE / "triton_compile.py"), *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_every_kernel_compiles_for_an_h200(tmp_path) -> None:
    specs, results = tmp_path / "specs.json", tmp_path / "results.json"
    _run("record", str(specs), interpret=True)
    launched = {f"{s['module'].rsplit('.', 1)[-1]}.{s['name']}" for s in json.loads(specs.read_text())}
    assert launched == _kernels_defined(), "the workloads launch every kernel, and only those"
    _run("compile", str(specs), str(results), interpret=False)
    outcome = json.loads(results.read_text())
    failed = [f"{r['kernel']}: {r['error']}" for r in outcome if r["error"]]
    print(f"{len(outcome)} launches compiled in {sum(r['seconds'] for r in outcome):.0f} s")
    assert not failed, "\n\n".join(failed)
