"""What decides a reply's bits besides the request: the model file's sha256 and the arithmetic.

`model_sha256` hashes a GGUF once, streaming, and remembers the digest under
`STRATA_HOME/hashes`, keyed by the file's resolved path, size and modification time (hashing
a multi-GB file at every start would cost seconds; a changed file has a new size or mtime and
is hashed again). `arithmetic` names the kernels' arithmetic, which is what the bits depend
on: every CPU target of the native kernels (AVX-512, AVX2, NEON, plain C) computes the same
bits, so they share one name, and the host's CPU never enters it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from strata_engine.paths import strata_home

KERNEL_MODES = (
    "fp32",
    "q8",
    "limb3",
    "limb2",
)  # the named kernel modes besides the default (kernels/choice.py)

CHUNK_BYTES = 1 << 20
DIGEST_CHARS = 64


def hash_cache_dir() -> Path:
    return strata_home() / "hashes"


def _cache_entry(path: Path) -> tuple[Path, dict[str, object]]:
    """Where a file's digest is remembered, and the key it must match there."""
    resolved = path.resolve()
    stat = resolved.stat()
    key: dict[str, object] = {"path": str(resolved), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    name = hashlib.sha256(str(resolved).encode()).hexdigest()[:32]
    return hash_cache_dir() / f"{name}.json", key


def _cached(entry: Path, key: dict[str, object]) -> str | None:
    try:
        saved = json.loads(entry.read_text())
    except (OSError, ValueError):
        return None
    digest = saved.get("sha256") if isinstance(saved, dict) else None
    if not isinstance(digest, str) or len(digest) != DIGEST_CHARS:
        return None
    if any(saved.get(k) != v for k, v in key.items()):
        return None
    return digest


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file, read in 1 MiB chunks (hashlib releases the GIL on each)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def model_sha256(path: str | os.PathLike[str]) -> str:
    """The model file's sha256, from the cache when the file is unchanged, else hashed and saved.

    A cache that cannot be written (read-only home) only costs the hash at the next start.
    """
    entry, key = _cache_entry(Path(path))
    if (digest := _cached(entry, key)) is not None:
        return digest
    digest = file_sha256(path)
    if _cache_entry(Path(path))[1] != key:  # changed while being read: do not remember it
        return digest
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=entry.parent, delete=False, suffix=".tmp") as tmp:
            json.dump({**key, "sha256": digest}, tmp)
        os.replace(tmp.name, entry)
    except OSError:
        pass
    return digest


def arithmetic(kernels: str) -> str:
    """The arithmetic a kernels name computes with: what the bits depend on, not the host.

    "native-avx2", "native-avx512", "native-neon" and "native-portable" are one arithmetic,
    "native" (the default: three-limb integer matmuls); their other builds are "native-fp32",
    "native-q8" and "native-limb2" ("-limb3" is the default's other name). The GPU's Triton
    kernels compute the C kernels' operations in every mode, so "triton" is "native" and
    "triton-q8" is "native-q8" (a GPU's fingerprint still names its model: docs/gpu.md says how
    far that is proven). The torch fallback keeps its own name (it does not promise the C
    kernels' bits).
    """
    mode = _kernel_mode(kernels)
    if mode is not None and mode != "limb3":
        return f"native-{mode}"
    if kernels.startswith("native-") or kernels == "triton":
        return "native"
    return kernels


def _kernel_mode(kernels: str) -> str | None:
    """The mode ("fp32", "q8", "limb3" or "limb2") a kernels name runs, else None (the default)."""
    if kernels.startswith(("native-", "triton-")):
        mode = kernels.rsplit("-", 1)[1]
        if mode in KERNEL_MODES:
            return mode
    return None


def kernel_target(kernels: str) -> str | None:
    """The instruction set the native kernels were built for ("avx2", ...), None for others."""
    if not kernels.startswith("native-"):
        return None
    target = kernels.removeprefix("native-")
    mode = _kernel_mode(kernels)
    return target.removesuffix(f"-{mode}") if mode is not None else target
