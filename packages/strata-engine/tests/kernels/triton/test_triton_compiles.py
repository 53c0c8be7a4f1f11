"""Every Triton kernel compiles for an H200 (sm_90) here, without a GPU (triton_compile.py).

The interpreter-based tests prove the kernels' bits; this proves a GPU can build them: every
distinct launch the engine makes on tiny models (every mode, prefill and decode, the static
decode path, selections and draws, sliding window and soft-cap, experts, gpt-oss, a hybrid), recorded under the
interpreter with the GPU's tile sizes, then compiled by Triton's compiler for CUDA 9.0 down to a
cubin. It also checks that the workloads launch every kernel defined in kernels/triton, so a new
kernel cannot go unchecked, and that no kernel uses local memory (ptxas's spills; issue 42's
"no spills", read from the cubin by strata_engine.testing.sass_stats).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: the other Triton tests in this process run interpreted)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

import strata_engine

KERNELS = Path(strata_engine.__file__).parent / "kernels" / "triton"


def _kernels_defined() -> set[str]:
    """Every launched kernel: a @triton.jit function named `_..._kernel` in kernels/triton."""
    found = set()
    for path in KERNELS.glob("*.py"):
        source = path.read_text()
        for name in re.findall(r"@triton\.jit[^\n]*\ndef (_\w+_kernel)\(", source):
            found.add(f"{path.stem}.{name}")
    return found


# processes side by side for the record and the compile (each takes every SHARDS-th part): the
# machine's cores, at most 2 (CI's); the other sessions' tests do not run meanwhile
SHARDS = max(1, min(2, os.cpu_count() or 1))


def _run(*args: str, interpret: bool, logs: Path) -> None:
    """triton_compile.py with `args` ("{}": the shard's number) in SHARDS processes at once, the
    shard appended to each; their output in `logs`."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env |= {"TRITON_INTERPRET": "1", "STRATA_TRITON_GPU_TILES": "1"}
    running = []
    for i in range(SHARDS):
        log = logs / f"{args[0]}-{i}.log"
        with log.open("w") as out:
            command = [
                sys.executable,
                "-m",
                "strata_engine.testing.triton_compile",
                *(a.format(i) for a in args),
            ]
            running.append(
                (subprocess.Popen([*command, f"{i}/{SHARDS}"], env=env, stdout=out, stderr=out), log)
            )
    for process, log in running:
        assert process.wait() == 0, log.read_text()[-4000:]


def _merged(paths: list[Path]) -> list:
    """The shards' lists as one (specs: each distinct launch once)."""
    out: dict[str, object] = {}
    for path in paths:
        for item in json.loads(path.read_text()):
            out.setdefault(json.dumps(item, sort_keys=True), item)
    return list(out.values())


def test_every_kernel_compiles_for_an_h200(tmp_path) -> None:
    specs = tmp_path / "specs.json"
    _run("record", str(tmp_path / "specs-{}.json"), interpret=True, logs=tmp_path)
    recorded = _merged([tmp_path / f"specs-{i}.json" for i in range(SHARDS)])
    specs.write_text(json.dumps(recorded, indent=1))
    launched = {f"{s['module'].rsplit('.', 1)[-1]}.{s['name']}" for s in recorded}
    assert launched == _kernels_defined(), "the workloads launch every kernel, and only those"
    _run("compile", str(specs), str(tmp_path / "results-{}.json"), interpret=False, logs=tmp_path)
    outcome = _merged([tmp_path / f"results-{i}.json" for i in range(SHARDS)])
    failed = [f"{r['kernel']}: {r['error']}" for r in outcome if r["error"]]
    print(f"{len(outcome)} launches compiled in {sum(r['seconds'] for r in outcome):.0f} s")
    assert not failed, "\n\n".join(failed)
    spilled = [f"{r['kernel']}: {r['local_bytes']} bytes" for r in outcome if r["local_bytes"]]
    assert not spilled, f"local memory (ptxas's spills) in {spilled}"
