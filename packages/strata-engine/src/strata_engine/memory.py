"""Does a model fit in the memory there is? Checked at load, before any weight is read.

A model that does not fit would otherwise load for a while and then be killed by the kernel's
OOM killer (or its cgroup's) with no message, or serve until its KV cache filled. The memory
available is the lowest of /proc/meminfo's MemAvailable, the cgroup's limit less its usage
(v2 or v1; reclaimable file pages not counted as used) and `STRATA_MEMORY_LIMIT`, an
operator's own figure ("512M", "2G", bytes) for when neither tells the truth (a container
whose limit is enforced elsewhere, or memory to leave to other processes).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strata_engine.api import ModelLoadError

MEMORY_LIMIT_ENV = "STRATA_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_CGROUP = Path("/sys/fs/cgroup")
_NO_LIMIT = 2**60  # cgroup v1 writes "no limit" as a number near 2**63


def parse_size(text: str) -> int:
    """`STRATA_MEMORY_LIMIT`'s value: bytes, or a number with K, M, G or T (binary; "iB" optional)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if match is None:
        raise ModelLoadError(f"{MEMORY_LIMIT_ENV}={text!r} is not a size (e.g. 2G, 512M or bytes)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def mem_available() -> int | None:
    """The kernel's estimate of memory available without swapping (None off Linux)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_available(root: Path = _CGROUP) -> int | None:
    """This process's memory cgroup limit less its usage, v2 or v1 (None: no limit set)."""
    for folder, limit_name, usage_name, inactive in (
        (root, "memory.max", "memory.current", "inactive_file"),
        (root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
    ):
        limit = _read_int(folder / limit_name)  # v2's "max" (no limit) is not a number
        usage = _read_int(folder / usage_name)
        if limit is not None and usage is not None and limit < _NO_LIMIT:
            stat = "memory.stat"
            return max(limit - max(usage - _stat(folder / stat, inactive), 0), 0)
    return None


@dataclass(frozen=True)
class Available:
    """The memory a model may take, and which source said so (for the refusal's line)."""

    bytes: int
    source: str


def available_memory(
    sources: tuple[tuple[str, Callable[[], int | None]], ...] = (
        ("MemAvailable", mem_available),
        ("the cgroup's limit less its usage", cgroup_available),
    ),
) -> Available | None:
    """The lowest of what each source says, `STRATA_MEMORY_LIMIT` included (None: none says)."""
    found = [Available(value, name) for name, read in sources if (value := read()) is not None]
    if (text := os.environ.get(MEMORY_LIMIT_ENV, "").strip()) != "":
        found.append(Available(parse_size(text), MEMORY_LIMIT_ENV))
    return min(found, key=lambda a: a.bytes, default=None)


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def check_fits(name: str, weight_bytes: int, kv_bytes: int, ctx_size: int) -> None:
    """Refuse (`ModelLoadError`, one line with the three numbers) a model whose weights and one
    full context of KV cache need more memory than is available."""
    available = available_memory()
    if available is None or weight_bytes + kv_bytes <= available.bytes:
        return
    raise ModelLoadError(
        f"{name} does not fit in memory: its weights take {mib(weight_bytes)} and the KV cache of "
        f"one full {ctx_size:,}-token context {mib(kv_bytes)}, but {mib(available.bytes)} is "
        f"available ({available.source}); use a smaller --ctx-size or a smaller model, or free memory"
    )
