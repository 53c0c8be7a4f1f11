"""What this host offers the kernels: its CPUs and whether CUDA can run."""

from __future__ import annotations

import os
from pathlib import Path


def default_threads() -> int:
    """The CPUs this process may run on (the kernels' thread count unless one is given)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cuda_present() -> bool:
    """Whether CUDA can run here, asked without importing torch unless an NVIDIA driver is loaded."""
    if not Path("/proc/driver/nvidia/version").exists():
        return False
    import torch

    return torch.cuda.is_available()
