"""Where Strata keeps what it downloads and builds, and which of it this user alone could have written.

Everything under STRATA_HOME is trusted by the engine: the default model, the digests it
remembers, the compiled kernels (code it loads). So STRATA_HOME and each folder Strata uses in
it are created 0700 and must be directories (not links) this user owns; one another user owns
is refused, and one of ours that others may open is closed to 0700. One check serves them all
(`private_dir`), and one (`untrusted`) serves every file Strata loads from there.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs


class UntrustedPath(Exception):
    """A folder under STRATA_HOME that another user could have written to: nothing in it is used."""


def strata_home() -> Path:
    """STRATA_HOME if set, else the user's cache directory (e.g. ~/.cache/strata)."""
    env = os.environ.get("STRATA_HOME")
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("strata"))


def private_dir(path: Path, what: str) -> Path:
    """`path`, created 0700 if missing; refused (UntrustedPath) unless it is a directory this user
    owns; closed to 0700 when it is ours but others may open it (an older Strata made it so)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise UntrustedPath(f"{what} {path} is not a directory (a link or a file): remove it")
    if info.st_uid != os.geteuid():
        raise UntrustedPath(
            f"{what} {path} belongs to user id {info.st_uid}, not this user ({os.geteuid()}): "
            "what is in it cannot be trusted; set STRATA_HOME to a directory of your own"
        )
    if info.st_mode & 0o077:
        try:
            path.chmod(0o700)
        except OSError:  # a read-only file system: no one else can write to it either
            pass
    return path


def strata_dir(name: str, what: str) -> Path:
    """STRATA_HOME/`name`, STRATA_HOME and it both checked by `private_dir`."""
    return private_dir(private_dir(strata_home(), "STRATA_HOME") / name, what)


def untrusted(info: os.stat_result) -> str | None:
    """Why the file `info` describes (an lstat, or the fstat of the descriptor about to be read)
    must not be used, or None when this user alone could have written it."""
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_uid != os.geteuid():
        return f"it belongs to user id {info.st_uid}, not this user ({os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write to it (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


@contextmanager
def locked(folder: Path, name: str) -> Iterator[None]:
    """An exclusive lock on `folder`/.`name`.lock (fcntl.flock) for the block: processes started
    at once on one STRATA_HOME take turns, so one downloads or builds and the others find its
    result. The kernel drops the lock when its holder dies, even by kill -9."""
    try:
        fd: int | None = os.open(
            folder / f".{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError:  # a folder no one can write to (a read-only image): nothing will be written
        fd = None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd is not None:
            os.close(fd)


def read_record(path: Path) -> dict[str, object] | None:
    """The JSON object Strata saved at `path` (save_record), or None when there is none, it is not
    an object, or someone other than this user could have written it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with open(fd, "rb") as handle:
            if untrusted(os.fstat(fd)) is not None:
                return None
            saved = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def save_record(path: Path, record: dict[str, object]) -> None:
    """`record` as JSON at `path`, written 0600 and renamed into place whole."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        json.dump(record, tmp)
    os.replace(tmp.name, path)
