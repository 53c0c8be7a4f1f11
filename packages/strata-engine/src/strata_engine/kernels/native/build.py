"""Building the C kernels into a private cache, and trusting only what this user built there.

A shared library is code: loading one that someone else could have written runs their code in
the engine. So the cache directory is created 0700 and must belong to this user (a directory
another user owns, or that others can write to, is refused: the kernels are then unavailable,
with the reason); each library is written 0600 and checked before it is loaded (a regular file,
owned by this user, writable by no one else), and loaded from the descriptor that was checked
(load_checked). A library that fails the check is never loaded: it is rebuilt in its place.
Processes started at once take turns on a lock in the cache, so one builds and the others load
its library. The compiler runs under a time limit, so a compiler that hangs costs a bounded
wait and a clear NativeUnavailable, not a server that never starts.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from strata_engine.paths import UntrustedPath, locked, strata_dir, untrusted

logger = logging.getLogger("strata_engine")

# -ffp-contract=off: no multiply-add fused by the compiler's choice; every fma is written out.
BASE_FLAGS = ["-O3", "-std=c11", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC"]
OPENMP = ["-fopenmp"]
TIMEOUT_ENV = "STRATA_KERNELS_COMPILE_TIMEOUT"  # seconds one compiler run may take
DEFAULT_TIMEOUT_S = 300.0  # the kernels take seconds; a slow, loaded machine a minute or two
BUILDING = ".building-"  # the prefix of a build's temporary folder in the cache
_HELD: list[int] = []  # the descriptors libraries were loaded from (load_checked)


class NativeUnavailable(RuntimeError):
    """The kernels cannot be built or run here (no C compiler, unknown target): callers fall back."""


@cache
def compiler() -> tuple[str, str]:
    """The C compiler's path and identity (its --version banner), part of every build key."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise NativeUnavailable("no C compiler found (install gcc or clang, or set CC)")
    try:
        banner = _run([cc, "--version"], timeout=30.0).stdout
    except subprocess.TimeoutExpired as exc:
        raise NativeUnavailable(f"the C compiler {cc} did not answer --version within 30 s") from exc
    except (OSError, subprocess.SubprocessError) as exc:
        raise NativeUnavailable(f"the C compiler {cc} does not run: {exc}") from exc
    return cc, banner.strip()


def compile_timeout() -> float:
    """Seconds one compiler run may take ($STRATA_KERNELS_COMPILE_TIMEOUT, else 300)."""
    value = os.environ.get(TIMEOUT_ENV)
    try:
        seconds = float(value) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        raise NativeUnavailable(f"{TIMEOUT_ENV} must be a number of seconds, not {value!r}") from None
    if not seconds > 0:
        raise NativeUnavailable(f"{TIMEOUT_ENV} must be positive, not {value!r}")
    return seconds


def _run(cmd: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`cmd` with its output captured, killed with everything it started once `timeout` passes
    (its own process group: a compiler driver's children would otherwise hold the pipes open)."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def cache_dir() -> Path:
    """The build cache (STRATA_HOME/build), checked as all of STRATA_HOME is (paths.private_dir)."""
    try:
        return strata_dir("build", "the kernel cache")
    except UntrustedPath as exc:
        raise NativeUnavailable(str(exc)) from None


def _trusted(target: Path) -> bool:
    """Whether the cached library `target` is there and may be loaded (else it is built again)."""
    if not (target.exists() or target.is_symlink()):
        return False
    reason = untrusted(target.lstat())
    if reason is not None:
        logger.warning("not loading the cached kernels %s: %s; building them again", target, reason)
    return reason is None


def load_checked(lib: Path) -> ctypes.CDLL:
    """The library at `lib`, loaded from the descriptor whose fstat passed `untrusted`: a file put
    at `lib` after the check is never the one loaded. Without /proc (macOS) it is loaded by path
    and refused unless the path still names the file checked."""
    fd = os.open(lib, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        checked = os.fstat(fd)
        reason = untrusted(checked)
        if reason is not None:
            raise NativeUnavailable(f"not loading the kernels {lib}: {reason}")
        if os.path.isdir("/proc/self/fd"):
            loaded = ctypes.CDLL(f"/proc/self/fd/{fd}")
            # kept open while the library is loaded (ctypes never unloads one): the dynamic
            # loader knows a library by the name it was opened under, and a closed descriptor's
            # number, reused for the next library, would be answered with this one
            _HELD.append(fd)
            return loaded
        loaded = ctypes.CDLL(str(lib))
        now = os.stat(lib)
        if (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino):
            raise NativeUnavailable(f"the kernels {lib} were replaced while being loaded")
        return loaded
    finally:
        if fd not in _HELD:
            os.close(fd)


def build_library(
    sources: list[Path], headers: Sequence[Path], flags: list[str], name: str, warn_serial: bool
) -> Path:
    """Build (once) and return a shared library this user can trust; the cache key covers the
    sources, headers, flags, compiler and machine. `warn_serial`: say so when OpenMP is missing."""
    cc, banner = compiler()
    key = hashlib.sha256()
    for part in [
        *(p.read_bytes() for p in sources),
        *(h.read_bytes() for h in headers),
        *map(str.encode, flags),
    ]:
        key.update(part + b"\0")
    key.update(f"{cc}\0{banner}\0{platform.system()}\0{platform.machine()}".encode())
    target = cache_dir() / f"{name}_{key.hexdigest()[:16]}.so"
    if _trusted(target):
        return target
    with locked(target.parent, "build"):  # one build for processes started at once
        if _trusted(target):  # another process built it while this one waited
            return target
        _remove_leftovers(target.parent)
        return _compile(cc, sources, flags, name, target, warn_serial)


def _remove_leftovers(folder: Path) -> None:
    """Temporary build folders of builds killed midway (only the lock's holder builds, so any
    there now is a dead process's)."""
    for leftover in folder.glob(f"{BUILDING}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _compile(
    cc: str, sources: list[Path], flags: list[str], name: str, target: Path, warn_serial: bool
) -> Path:
    """Compile into a temporary folder beside `target`, then rename into place whole."""
    if warn_serial:  # the kernels themselves (not the small CPU probe): the first start waits here
        logger.info("compiling the kernels for this CPU (once, about 20 s): %s", target.name)
    errors: list[str] = []
    timeout = compile_timeout()
    # OpenMP first; without it (e.g. Apple clang has no libomp) the kernels run on one thread
    for extra in (OPENMP, []):
        with tempfile.TemporaryDirectory(prefix=BUILDING, dir=target.parent) as tmp:
            out = Path(tmp) / target.name
            cmd = [cc, *BASE_FLAGS, *extra, *flags, *map(str, sources), "-o", str(out), "-lm"]
            try:
                proc = _run(cmd, timeout)
            except subprocess.TimeoutExpired:
                raise NativeUnavailable(
                    f"compiling {name} with {cc} did not finish within {timeout:g} s (stopped); "
                    f"set {TIMEOUT_ENV} to allow longer"
                ) from None
            except OSError as exc:
                raise NativeUnavailable(f"the C compiler {cc} does not run: {exc}") from exc
            if proc.returncode == 0:
                if not extra and warn_serial:
                    logger.warning(
                        "kernels built without OpenMP (%s): they run on one thread", errors[-1][:200]
                    )
                out.chmod(0o600)
                os.replace(out, target)  # atomic: concurrent builders never see a half-written file
                return target
            errors.append(proc.stderr.strip())
    raise NativeUnavailable(f"compiling {name} failed: {errors[-1][:2000]}")
