"""The choice of kernel backend: `--kernels` (one of KERNEL_CHOICES) on `--device`.

`native` (C kernels, native/) is batch-invariant and the default on the CPU: exact integer
matmuls on activations held as three int8 limbs (native/limb.c), within 1e-4 of a float64
forward. `native-fp32` runs the same C kernels with fp32 dequantise-and-FMA matmuls (within
about 2e-5); `native-q8` (8-bit activations) and `native-limb2` are faster and less exact.
`torch` (torch_backend.py: MKL GEMMs and SDPA, not batch-invariant) is the fallback where the
kernels cannot build and the "invariance off" switch for tests and benchmarks; `triton`
(triton/) runs the same arithmetic on a GPU: there the Triton integer matmul
(triton/intmatmul.py) computes the C kernels' matmul bits. The opt-in modes (`native-q8`,
`native-limb2`) run on the CPU unless `--device cuda` asks. The torch and Triton backends are
imported only when chosen.
"""

from __future__ import annotations

import logging

from strata_engine.api import ModelLoadError
from strata_engine.kernels.base import Ops
from strata_engine.kernels.host import cuda_present, default_threads
from strata_engine.kernels.native import NativeUnavailable
from strata_engine.kernels.native.backend import DEFAULT_LIMBS, NativeOps

logger = logging.getLogger("strata_engine")

KERNEL_CHOICES = ("auto", "native", "native-fp32", "native-q8", "native-limb3", "native-limb2", "torch")
# name -> limbs (0: q8's rule); "native-limb3" is another name for the default, "native"
INTEGER_KERNELS = {"native": DEFAULT_LIMBS, "native-limb3": DEFAULT_LIMBS, "native-q8": 0, "native-limb2": 2}
OPT_IN_KERNELS = ("native-q8", "native-limb3", "native-limb2")  # on the CPU unless --device cuda
DEVICE_CHOICES = ("auto", "cpu", "cuda")


def on_cpu(kernels: str, device: str) -> bool:
    """Whether `make_ops(kernels, device)` runs the model in host memory (not on a GPU)."""
    return not (device == "cuda" or (device == "auto" and kernels not in OPT_IN_KERNELS and cuda_present()))


def make_ops(kernels: str = "auto", device: str = "cpu", num_threads: int | None = None) -> Ops:
    """The backend for `kernels` (one of KERNEL_CHOICES) on `device` (auto | cpu | cuda).

    `auto` on the CPU takes the native kernels and falls back to torch only when they cannot
    be built, with one WARNING that says why (the fallback is not batch-invariant).
    """
    if kernels not in KERNEL_CHOICES:
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_CHOICES)}, not {kernels!r}")
    if device not in DEVICE_CHOICES:
        raise ValueError(f"device must be one of {', '.join(DEVICE_CHOICES)}, not {device!r}")
    if not on_cpu(kernels, device):
        # the same arithmetic on the GPU: the integer matmul (1 limb: q8's), or fp32 (native-fp32, torch)
        if kernels in ("native-fp32", "torch"):
            return triton_ops(None)
        return triton_ops(INTEGER_KERNELS.get(kernels, DEFAULT_LIMBS) or 1)
    threads = num_threads or default_threads()
    if kernels == "torch":
        return torch_ops(threads)
    if kernels != "auto":  # asked for by name: no fallback
        limbs = INTEGER_KERNELS.get(kernels, 0)
        return NativeOps(threads, q8=kernels != "native-fp32", limbs=limbs)
    try:
        return NativeOps(threads, q8=True, limbs=DEFAULT_LIMBS)
    except NativeUnavailable as exc:
        try:
            fallback = torch_ops(threads)
        except ModelLoadError:
            raise NativeUnavailable(
                f"{exc}; the torch fallback is not installed either (pip install torch==2.13.0)"
            ) from exc
        logger.warning(
            "native kernels unavailable (%s); running the torch fallback, which is slower and NOT "
            "batch-invariant. Install a C compiler (e.g. `apt-get install gcc`, `xcode-select --install`) "
            "and restart to get exact, batch-invariant results.",
            exc,
        )
        return fallback


def triton_ops(limbs: int | None = None) -> Ops:
    """The Triton GPU kernels (`limbs`: the integer matmul's, None: fp32); triton is optional."""
    try:
        from strata_engine.kernels.triton.backend import TritonOps
    except ImportError as exc:
        raise ModelLoadError(
            f"the GPU kernels need torch and triton ({exc}): from the Strata repository, "
            "pip install './packages/strata-engine[gpu]'"
        ) from exc
    return TritonOps(limbs=limbs)


def torch_ops(threads: int) -> Ops:
    """The torch fallback kernels; torch is optional (the engine's `torch` extra)."""
    try:
        from strata_engine.kernels.torch_backend import TorchOps
    except ImportError as exc:
        raise ModelLoadError(
            f"kernels torch need torch ({exc}): pip install torch==2.13.0 "
            "(or, from the Strata repository, './packages/strata-engine[torch]')"
        ) from exc
    return TorchOps(threads)


def describe(kernels: str, invariant: bool) -> str:
    """One line for logs and CLIs, like llama.cpp's system info."""
    kind = "batch-invariant, the same bits on every CPU" if invariant else "NOT batch-invariant"
    return f"kernels: {kernels} ({kind})"
