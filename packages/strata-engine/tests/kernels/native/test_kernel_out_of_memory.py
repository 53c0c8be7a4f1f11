"""Out of memory in the C kernels (native/common.c's scratch and kernel_malloc) is an error the
step reports, never a crash: a call whose temporaries cannot be allocated raises
`KernelOutOfMemory`, and once memory is back the same call gives the same bits as before.

The limit is the process's address space (RLIMIT_AS) in a child process, so malloc really fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from strata_engine.kernels.native import NativeUnavailable, load

SCRIPT = textwrap.dedent(
    """
    import resource
    import numpy as np
    from gguf import GGMLQuantizationType as QT, quants
    from strata_engine.gguf_loader import TensorInfo
    from strata_engine.kernels.native.backend import KernelOutOfMemory, NativeOps
    from strata_engine.kernels.weights import Weight

    rng = np.random.default_rng(0)
    K, N, M = 4096, 64, 8192  # the limb split of 8,192 rows x 4,096 needs about 270 MB of scratch
    data = quants.quantize(rng.normal(0, 0.05, size=(N, K)).astype(np.float32), QT.Q8_0)
    ops = NativeOps(2, limbs=3)
    w = ops.pack(Weight.from_info(TensorInfo("w", (N, K), QT.Q8_0, np.ascontiguousarray(data).reshape(-1))))
    x = rng.normal(0, 1, size=(M, K)).astype(np.float32)
    few = ops.linear(x[:64], w)  # the threads started, their small scratch made

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + 64 * 2**20, hard))
    try:
        ops.linear(x, w)
        print("no error")
    except KernelOutOfMemory as exc:
        print("refused:", exc)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    again = ops.linear(x, w)  # memory is back: the same call works, with the same bits
    assert np.array_equal(again[:64], few), "bits differ after the failure"
    print("recovered")
    """
)


def test_out_of_memory_in_a_kernel_is_an_error_not_a_crash() -> None:
    try:
        load(None)
    except NativeUnavailable as exc:
        pytest.skip(f"no native kernels: {exc}")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "refused: out of memory: the CPU kernels could not allocate" in done.stdout, done.stdout
    assert "recovered" in done.stdout
