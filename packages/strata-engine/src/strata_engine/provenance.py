"""What decides a reply's bits besides the request: the model file's sha256 and the arithmetic.

`model_sha256` hashes a GGUF once, streaming, and remembers the digest under
`STRATA_HOME/hashes`, keyed by the file's resolved path, device, inode, size, modification time
and status-change time (hashing a multi-GB file at every start would cost seconds). Any write
to the file moves its ctime, which no one but root can set back (an mtime can be, with utime),
so a changed file is always hashed again. An entry is read only from a private folder and only
when this user alone could have written it (paths.untrusted). `arithmetic` names the kernels' arithmetic, which is what the bits depend
on: every CPU target of the native kernels (AVX-512, AVX2, NEON, plain C) computes the same
bits, so they share one name, and the host's CPU never enters it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from strata_engine.paths import UntrustedPath, read_record, save_record, strata_dir

KERNEL_MODES = (
    "fp32",
    "q8",
    "limb3",
    "limb2",
)  # the named kernel modes besides the default (kernels/choice.py)

CHUNK_BYTES = 1 << 20
DIGEST_CHARS = 64


def hash_cache_dir() -> Path:
    """STRATA_HOME/hashes, checked as all of STRATA_HOME is (UntrustedPath when it fails)."""
    return strata_dir("hashes", "the hash cache")


def _file_key(path: Path) -> dict[str, object]:
    """What must be unchanged for a remembered digest to still be the file's."""
    resolved = path.resolve()
    stat = resolved.stat()
    return {
        "path": str(resolved),
        "dev": stat.st_dev,
        "ino": stat.st_ino,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
    }


def _entry_name(key: dict[str, object]) -> str:
    return hashlib.sha256(str(key["path"]).encode()).hexdigest()[:32] + ".json"


def _cached(entry: Path, key: dict[str, object]) -> str | None:
    if (saved := read_record(entry)) is None:
        return None
    digest = saved.get("sha256")
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

    A cache that cannot be written (read-only home) or is refused (another user's) only costs
    the hash at each start.
    """
    key = _file_key(Path(path))
    try:
        folder: Path | None = hash_cache_dir()
    except (OSError, UntrustedPath):
        folder = None
    if folder is not None and (digest := _cached(folder / _entry_name(key), key)) is not None:
        return digest
    digest = file_sha256(path)
    if _file_key(Path(path)) == key:  # changed while being read: do not remember it
        record_sha256(path, digest, key)
    return digest


def record_sha256(path: str | os.PathLike[str], digest: str, key: dict[str, object] | None = None) -> None:
    """Remember `digest` as the sha256 of `path` as it is now (`key`: as it was when hashed), so
    a file whose bytes were just checked (a download) is not hashed again at the next start."""
    key = key or _file_key(Path(path))
    try:
        save_record(hash_cache_dir() / _entry_name(key), {**key, "sha256": digest})
    except (OSError, UntrustedPath):
        pass


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
