"""Models by Hugging Face Hub reference: `owner/repo:QUANT`, `owner/repo/file.gguf`, `owner/repo`.

The file is fetched with `huggingface_hub` into its own cache (HF_HOME / HF_HUB_CACHE, its
progress bar, HF_ENDPOINT and HF_TOKEN honoured) and used from there offline once cached
(HF_HUB_OFFLINE=1, or whenever the Hub cannot be reached). huggingface_hub checks a plain HTTP download's size against the Hub's and
names the cached blob after the Hub's ETag, which for an LFS file (every GGUF) is the file's
sha256; it does not hash the bytes. So Strata does: it hashes the cached file once, compares it
with that sha256 (or, for a small non-LFS file, with the git blob id) and refuses and deletes a
file that differs. A verified file is remembered by size and mtime under STRATA_HOME, so later
starts do not hash it again.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_engine.api import ModelLoadError
from strata_engine.paths import strata_home

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REF = re.compile(rf"^(?P<repo>{_NAME}/{_NAME})(?::(?P<quant>[A-Za-z0-9._-]+)|/(?P<file>.+\.gguf))?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class HubRef:
    """A parsed reference: the repo, and at most one of a quant selector or a file name."""

    repo_id: str
    quant: str | None = None
    filename: str | None = None

    def __str__(self) -> str:
        if self.quant:
            return f"{self.repo_id}:{self.quant}"
        return f"{self.repo_id}/{self.filename}" if self.filename else self.repo_id


def parse_hub_ref(spec: str) -> HubRef | None:
    """The Hub reference `spec` spells, or None when it reads as a local path.

    `owner/file.gguf` (one slash, a .gguf name) and anything starting with `/`, `.` or `~` are
    paths: a mistyped path must say "not found", not reach for the network.
    """
    m = _REF.match(spec)
    if m is None or (m["quant"] is None and m["file"] is None and spec.endswith(".gguf")):
        return None
    return HubRef(m["repo"], quant=m["quant"], filename=m["file"])


def pick_file(ref: HubRef, files: list[str]) -> str:
    """The one GGUF in `files` that `ref` selects; a one-line ModelLoadError for none or several."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf"))
    if ref.filename is not None:
        if ref.filename in files:
            return ref.filename
        raise ModelLoadError(f"{ref.repo_id} has no file {ref.filename} (its GGUFs: {_listing(ggufs)})")
    if ref.quant is None:
        matches = ggufs
    else:
        # the quant as a whole name part: Q4_K matches model-Q4_K.gguf, not model-Q4_K_M.gguf
        part = re.compile(rf"(?<![A-Za-z0-9]){re.escape(ref.quant)}(?![A-Za-z0-9_])", re.IGNORECASE)
        matches = [f for f in ggufs if part.search(f.rsplit("/", 1)[-1])]
    if len(matches) == 1:
        return matches[0]
    what = f"matching {ref.quant!r}" if ref.quant else "GGUF"
    if not matches:
        raise ModelLoadError(f"{ref.repo_id} has no {what} file (its GGUFs: {_listing(ggufs)})")
    raise ModelLoadError(
        f"{ref.repo_id} has {len(matches)} {what} files ({_listing(matches)}); "
        f"name one as {ref.repo_id}/FILE.gguf"
    )


def _listing(files: list[str]) -> str:
    return ", ".join(files) if files else "none"


def fetch(ref: HubRef) -> Path:
    """The local path of the file `ref` selects: downloaded into the Hub cache if not there, verified."""
    import huggingface_hub as hf
    from huggingface_hub import constants

    try:
        if constants.is_offline_mode():
            path = _from_cache(hf, ref)
        else:
            try:
                filename = pick_file(ref, _remote_files(hf, ref.repo_id))
                path = Path(hf.hf_hub_download(ref.repo_id, filename))
            except ModelLoadError:
                raise
            except Exception as exc:  # the Hub unreachable (or refusing): what is cached still serves
                try:
                    path = _from_cache(hf, ref)
                except Exception:
                    raise exc from None
    except ModelLoadError:
        raise
    except Exception as exc:  # huggingface_hub's and httpx's errors differ between versions
        raise ModelLoadError(f"cannot fetch {ref} from the Hub: {_one_line(exc)}") from None
    verify(path)
    return path


def _from_cache(hf: Any, ref: HubRef) -> Path:
    filename = pick_file(ref, _cached_files(ref.repo_id))
    return Path(hf.hf_hub_download(ref.repo_id, filename, local_files_only=True))


def _remote_files(hf: Any, repo_id: str) -> list[str]:
    info = hf.HfApi().model_info(repo_id, revision="main")
    return [s.rfilename for s in info.siblings or []]


def _cached_files(repo_id: str) -> list[str]:
    """The files of the cached snapshot of `main` (what offline mode can choose from)."""
    from huggingface_hub import constants

    repo_dir = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    try:
        commit = (repo_dir / "refs" / "main").read_text().strip()
    except OSError:
        raise ModelLoadError(
            f"{repo_id} is not in the Hub cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set"
        ) from None
    snapshot = repo_dir / "snapshots" / commit
    return [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def verify(path: Path) -> None:
    """Check the cached file's bytes against the Hub's hash (its blob's name); delete it if they differ."""
    blob = Path(os.path.realpath(path))
    expected = blob.name
    if _SHA256.match(expected):
        kind, h = "sha256", hashlib.sha256()
    elif _SHA1.match(expected):  # a non-LFS file: its git blob id
        kind, h = "git blob sha1", hashlib.sha1(b"blob %d\0" % blob.stat().st_size)
    else:
        raise ModelLoadError(f"cannot verify {path}: the Hub cache names it {expected!r}, not a hash")
    stat = blob.stat()
    stamp = f"{stat.st_size} {stat.st_mtime_ns}"
    marker = strata_home() / "hub-verified" / expected
    if marker.is_file() and marker.read_text() == stamp:
        return
    with open(blob, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    if h.hexdigest() != expected:
        for p in {path, blob}:
            p.unlink(missing_ok=True)
        raise ModelLoadError(
            f"{path.name} from the Hub has {kind} {h.hexdigest()}, the Hub says {expected}: "
            "refused and deleted from the cache"
        )
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(stamp)
