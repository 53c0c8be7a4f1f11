"""Models by Hugging Face Hub reference: `owner/repo:QUANT`, `owner/repo/file.gguf`, `owner/repo`.

The file is fetched with `huggingface_hub` into its own cache (HF_HOME / HF_HUB_CACHE, its
progress bar, HF_ENDPOINT and HF_TOKEN honoured) and used from there offline once cached
(HF_HUB_OFFLINE=1, or whenever the Hub cannot be reached). huggingface_hub checks a plain
HTTP download's size against the Hub's and names the cached blob after the Hub's ETag; it does
not hash the bytes, and a blob's name says nothing about who wrote it. So Strata hashes the file
and compares it with a hash it got itself: online, the sha256 in the Hub's listing of the repo
(or, for a small non-LFS file, its git blob id); offline, the sha256 Strata recorded under
STRATA_HOME/hub-verified when it last checked that file of that commit online. A file that
differs is refused and deleted; one Strata never checked online is refused offline. The file's
digest is remembered by provenance.model_sha256 (keyed by inode, size, mtime and ctime), so an
unchanged file is not hashed again.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from strata_engine.api import ModelLoadError
from strata_engine.paths import UntrustedPath, read_record, save_record, strata_dir
from strata_engine.provenance import model_sha256

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REF = re.compile(rf"^(?P<repo>{_NAME}/{_NAME})(?::(?P<quant>[A-Za-z0-9._-]+)|/(?P<file>.+\.gguf))?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
HubHash = tuple[str, str]  # ("sha256" or "git blob sha1", the hex digest) from the Hub's listing


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

    hub_says: HubHash | None = None
    try:
        if constants.is_offline_mode():
            filename, path = _from_cache(hf, ref)
        else:
            try:
                listing = _remote_files(hf, ref.repo_id)
                filename = pick_file(ref, list(listing))
                path = Path(hf.hf_hub_download(ref.repo_id, filename))
                hub_says = listing[filename]
            except ModelLoadError:
                raise
            except Exception as exc:  # the Hub unreachable (or refusing): what is cached still serves
                try:
                    filename, path = _from_cache(hf, ref)
                except Exception:
                    raise exc from None
    except ModelLoadError:
        raise
    except Exception as exc:  # huggingface_hub's and httpx's errors differ between versions
        raise ModelLoadError(f"cannot fetch {ref} from the Hub: {_one_line(exc)}") from None
    verify(ref.repo_id, filename, path, hub_says)
    return path


def _from_cache(hf: Any, ref: HubRef) -> tuple[str, Path]:
    filename = pick_file(ref, _cached_files(ref.repo_id))
    return filename, Path(hf.hf_hub_download(ref.repo_id, filename, local_files_only=True))


def _remote_files(hf: Any, repo_id: str) -> dict[str, HubHash | None]:
    """The repo's files on `main`, each with the hash the Hub's listing gives for it."""
    info = hf.HfApi().model_info(repo_id, revision="main", files_metadata=True)
    files: dict[str, HubHash | None] = {}
    for s in info.siblings or []:
        if s.lfs is not None and _SHA256.match(str(s.lfs.sha256)):
            files[s.rfilename] = ("sha256", s.lfs.sha256)
        else:
            files[s.rfilename] = ("git blob sha1", s.blob_id) if s.blob_id else None
    return files


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


def _record(repo_id: str, filename: str, path: Path) -> Path:
    """Where Strata records the sha256 of `filename` of the commit the cached `path` is from."""
    commit = path.parents[len(PurePosixPath(filename).parts) - 1].name  # snapshots/<commit>/<filename>
    try:
        folder = strata_dir("hub-verified", "the Hub files' record")
    except (UntrustedPath, OSError) as exc:
        raise ModelLoadError(str(exc)) from None
    key = hashlib.sha256(f"{repo_id}\0{commit}\0{filename}".encode()).hexdigest()[:32]
    return folder / f"{key}.json"


def _git_blob_sha1(path: Path) -> str:
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def verify(repo_id: str, filename: str, path: Path, hub_says: HubHash | None) -> None:
    """Check the cached file's bytes against the Hub's listing (online) or the sha256 Strata
    recorded when it checked the file online (offline), never the blob's name; delete it if
    they differ. A file never checked online has nothing to be checked against: refused."""
    blob = Path(os.path.realpath(path))
    record = _record(repo_id, filename, path)
    saved = read_record(record) or {}
    recorded = saved.get("sha256") if saved.get("file") == filename else None
    if hub_says is not None:
        (kind, expected), whose = hub_says, "the Hub says"
    elif isinstance(recorded, str):
        kind, expected, whose = "sha256", recorded, "Strata recorded"
    else:
        raise ModelLoadError(
            f"cannot verify {path}: Strata has no sha256 recorded for {repo_id}/{filename} (it was put "
            "in the Hub cache by something else); fetch it once with the Hub reachable"
        )
    actual = model_sha256(blob) if kind == "sha256" else _git_blob_sha1(blob)
    if actual != expected:
        for p in {path, blob}:
            p.unlink(missing_ok=True)
        raise ModelLoadError(
            f"{path} from the Hub has {kind} {actual}, {whose} {expected}: refused and deleted from the cache"
        )
    digest = actual if kind == "sha256" else model_sha256(blob)
    if recorded != digest:
        try:
            save_record(record, {"repo": repo_id, "file": filename, "sha256": digest})
        except OSError:
            pass  # a read-only home: checked online each time, refused offline
