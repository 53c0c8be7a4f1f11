"""Start a real `strata-server` in a child process, for integration tests and benchmarks.

One launcher so tests and bench scripts start, wait for and stop the server the same way:
a socket bound here to port 0 on 127.0.0.1 and handed to the child already bound (`--fd`),
so no other process can take the port between a check and the server's bind; `/health`
polled until 200; output kept in a temporary log whose tail explains a failed start.
`in_process_server` does the same for an app served on a thread of this process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
LOG_TAIL_CHARS = 4000


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; the message ends with its log's tail."""


def bound_socket() -> socket.socket:
    """A TCP socket bound to a port the OS picked on 127.0.0.1, to hand to a server as it is."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.set_inheritable(True)
    return sock


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for what cannot take a bound
    socket, e.g. torch's rendezvous or Ray's HTTP proxy: another process may take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ServerProcess:
    """A started server: its process (to signal), base URL, and the log it writes."""

    process: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def server_process(
    *args: str, env: dict[str, str] | None = None, startup_timeout_s: float = STARTUP_TIMEOUT_S
) -> Iterator[ServerProcess]:
    """Run `python -m strata_server --fd <bound socket> *args` (extra `env` variables); yield it healthy.

    The server is stopped on exit (terminated, killed if it does not stop in time).
    """
    with (
        bound_socket() as sock,
        tempfile.NamedTemporaryFile(prefix="strata-server-", suffix=".log") as log_file,
    ):
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        command = [sys.executable, "-m", "strata_server", "--fd", str(sock.fileno()), *args]
        log_path = Path(log_file.name)
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=full_env, pass_fds=(sock.fileno(),)
        )
        sock.close()  # the child holds it now
        try:
            _wait_for_health(url, process, log_path, startup_timeout_s)
            yield ServerProcess(process, url, log_path)
        finally:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def in_process_server(app: Any, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[str]:
    """Serve the ASGI `app` with uvicorn on a thread of this process (so a test can plant a
    fault in its engine) on a bound socket; yield its base URL once `/health` answers 200."""
    import uvicorn  # the server's own dependency, imported only where an app is served here

    sock = bound_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not _healthy(url):
            if not thread.is_alive() or time.monotonic() > deadline:
                raise ServerStartError(f"the in-process server on {url} did not become healthy")
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=STOP_TIMEOUT_S)
        sock.close()


@contextmanager
def running_server(*args: str, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[str]:
    """Run `python -m strata_server *args` on a bound socket; yield its base URL (no `/v1`).

    The server is stopped on exit (terminated, killed if it does not stop in time).
    """
    with server_process(*args, startup_timeout_s=startup_timeout_s) as server:
        yield server.url


@contextmanager
def tensor_parallel_server(
    ranks: int, *args: str, startup_timeout_s: float = STARTUP_TIMEOUT_S
) -> Iterator[tuple[ServerProcess, list[subprocess.Popen]]]:
    """`--tensor-parallel ranks` as torchrun would run it: ranks 1.. as worker processes, rank 0
    as the server, each with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set.

    Yields the healthy server and the worker processes (to signal); on exit the server is
    stopped first (it releases the workers), then any worker still running is killed.
    """
    flags = ("--tensor-parallel", str(ranks), *args)
    group = {"WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "strata_server", *flags],
            env={**os.environ, "PYTHONUNBUFFERED": "1", **group, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for r in range(1, ranks)
    ]
    try:
        rank0 = {**group, "RANK": "0", "LOCAL_RANK": "0"}
        with server_process(*flags, env=rank0, startup_timeout_s=startup_timeout_s) as server:
            yield server, workers
    finally:
        for worker in workers:
            try:
                worker.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def _wait_for_health(url: str, process: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"strata-server exited early:\n{_tail(log_path)}")
        if _healthy(url):
            return
        time.sleep(0.25)
    raise ServerStartError(f"strata-server not healthy after {timeout_s}s:\n{_tail(log_path)}")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2.0) as reply:
            return reply.status == 200
    except OSError:  # refused, reset, timed out, or an HTTP error status
        return False


def _tail(log_path: Path) -> str:
    return log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
