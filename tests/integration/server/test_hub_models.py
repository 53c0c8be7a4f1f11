"""`--model owner/repo:QUANT` against a stand-in for the Hugging Face Hub on 127.0.0.1.

The stand-in speaks the part of the Hub's HTTP protocol that huggingface_hub uses to list and
download a file: `GET /api/models/{repo}[/revision/{rev}]` (the repo's `siblings`) and
`HEAD`/`GET /{repo}/resolve/{rev}/{file}` with the headers huggingface_hub reads (X-Repo-Commit,
X-Linked-Etag = the file's sha256, X-Linked-Size, Content-Length; `Range` honoured). The real
huggingface_hub runs in a child process with HF_ENDPOINT pointing at it and HF_HOME in tmp, so
nothing here needs the internet. The last test serves the default model's bytes and asks a real
`strata-server --model owner/repo:Q4_1` for a completion.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from openai import OpenAI

from strata_server.launch import free_port, server_process

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class StandInHub:
    """Repos as {repo_id: {filename: bytes}}; what it was asked, and ways to misbehave."""

    repos: dict[str, dict[str, bytes]]
    corrupt: set[str] = field(default_factory=set)  # files served with one byte flipped
    drop_once: set[str] = field(default_factory=set)  # files whose first GET stops half-way
    requests: list[str] = field(default_factory=list)
    url: str = ""

    def file_headers(self, data: bytes) -> dict[str, str]:
        sha = hashlib.sha256(data).hexdigest()
        return {
            "X-Repo-Commit": COMMIT,
            "ETag": f'"{sha}"',
            "X-Linked-Etag": f'"{sha}"',
            "X-Linked-Size": str(len(data)),
            "Accept-Ranges": "bytes",
        }


def sibling(filename: str, data: bytes) -> dict[str, object]:
    """A file's entry in the repo's listing with `?blobs=true`: every file served as an LFS file."""
    lfs = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return {"rfilename": filename, "size": len(data), "lfs": lfs}


def handler_for(hub: StandInHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self.answer(body=False)

        def do_GET(self) -> None:
            self.answer(body=True)

        def send(self, status: int, headers: dict[str, str], payload: bytes, body: bool) -> None:
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(payload))}.items():
                self.send_header(key, value)
            self.end_headers()
            if body:
                self.wfile.write(payload)

        def answer(self, body: bool) -> None:
            hub.requests.append(f"{self.command} {self.path} {self.headers.get('Range', '')}".strip())
            parts = self.path.split("?")[0].strip("/").split("/")
            if parts[:1] == ["api"] and parts[1:2] == ["models"] and len(parts) >= 4:
                repo_id = "/".join(parts[2:4])
                if repo_id not in hub.repos:
                    self.send(404, {"X-Error-Code": "RepoNotFound"}, b'{"error":"no repo"}', body)
                    return
                info = {
                    "id": repo_id,
                    "sha": COMMIT,
                    "private": False,
                    "siblings": [sibling(f, data) for f, data in hub.repos[repo_id].items()],
                }
                self.send(200, {"Content-Type": "application/json"}, json.dumps(info).encode(), body)
                return
            if len(parts) >= 5 and parts[2] == "resolve":
                repo_id, filename = "/".join(parts[:2]), "/".join(parts[4:])
                files = hub.repos.get(repo_id, {})
                if filename not in files:
                    self.send(404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT}, b"", body)
                    return
                data = files[filename]
                headers = hub.file_headers(data)
                served = data[:-1] + bytes([data[-1] ^ 1]) if filename in hub.corrupt else data
                start = int(self.headers.get("Range", "bytes=0-")[6:].split("-")[0] or 0)
                if not body:
                    self.send(200, headers, data, body=False)
                elif start:
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                    self.send(206, headers, served[start:], body=True)
                elif filename in hub.drop_once:
                    hub.drop_once.discard(filename)
                    self.send_response(200)
                    for key, value in {**headers, "Content-Length": str(len(data))}.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(served[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # the connection breaks mid-body
                else:
                    self.send(200, headers, served, body=True)
                return
            self.send(404, {}, b"", body)

    return Handler


@pytest.fixture
def hub() -> Iterator[StandInHub]:
    state = StandInHub(repos={})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def hub_env(hub: StandInHub, tmp_path: Path) -> dict[str, str]:
    """The environment of a process that talks to the stand-in only, with empty caches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {
        **env,
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "STRATA_HOME": str(tmp_path / "strata"),
    }


RESOLVE = (
    "import sys\n"
    "from strata_engine.api import ModelLoadError\n"
    "from strata_engine.model_store import resolve_model\n"
    "try:\n"
    "    print(resolve_model(sys.argv[1]))\n"
    "except ModelLoadError as exc:\n"
    "    sys.exit(f'ModelLoadError: {exc}')\n"
)


def resolve(spec: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """resolve_model(spec) in a child process (huggingface_hub reads HF_* when imported)."""
    return subprocess.run(
        [sys.executable, "-c", RESOLVE, spec], env=env, capture_output=True, text=True, timeout=120
    )


def gguf_bytes(tag: str) -> bytes:
    return b"GGUF" + tag.encode() * 1000


QUANTS = {
    "model-Q4_K_M.gguf": gguf_bytes("a"),
    "model-Q4_K_S.gguf": gguf_bytes("b"),
    "model-Q4_K.gguf": gguf_bytes("c"),
    "model-Q8_0.gguf": gguf_bytes("d"),
    "README.md": b"# model\n",
}


def test_a_quant_selects_its_file_case_insensitively(hub: StandInHub, hub_env: dict[str, str]) -> None:
    hub.repos["acme/model-GGUF"] = QUANTS
    done = resolve("acme/model-GGUF:q4_k_m", hub_env)
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.name == "model-Q4_K_M.gguf"
    assert path.read_bytes() == QUANTS["model-Q4_K_M.gguf"]
    assert str(path).startswith(hub_env["HF_HOME"])  # the Hub's cache, not a copy of our own
    # Q4_K names its own file, not Q4_K_M's or Q4_K_S's
    done = resolve("acme/model-GGUF:Q4_K", hub_env)
    assert Path(done.stdout.strip()).read_bytes() == QUANTS["model-Q4_K.gguf"], done.stderr
    # a file named outright
    done = resolve("acme/model-GGUF/model-Q8_0.gguf", hub_env)
    assert Path(done.stdout.strip()).read_bytes() == QUANTS["model-Q8_0.gguf"], done.stderr


def test_several_matching_files_is_a_one_line_error(hub: StandInHub, hub_env: dict[str, str]) -> None:
    hub.repos["acme/split"] = {"m-Q4_0-00001-of-00002.gguf": b"x", "m-Q4_0-00002-of-00002.gguf": b"y"}
    done = resolve("acme/split:Q4_0", hub_env)
    assert done.returncode != 0
    message = done.stderr.strip()
    assert message.startswith("ModelLoadError: acme/split has 2 ") and "\n" not in message
    assert "m-Q4_0-00001-of-00002.gguf" in message and "acme/split/FILE.gguf" in message
    assert not any(r.startswith("GET /acme/split/resolve") for r in hub.requests)  # nothing fetched


def test_no_matching_file_is_a_one_line_error(hub: StandInHub, hub_env: dict[str, str]) -> None:
    hub.repos["acme/model-GGUF"] = QUANTS
    done = resolve("acme/model-GGUF:Q5_K_M", hub_env)
    assert done.returncode != 0
    message = done.stderr.strip()
    assert message.startswith("ModelLoadError: acme/model-GGUF has no matching 'Q5_K_M' file")
    assert "model-Q8_0.gguf" in message and "\n" not in message
    done = resolve("acme/nothing-here:Q4_0", hub_env)
    assert done.returncode != 0
    assert done.stderr.strip().startswith("ModelLoadError: cannot fetch acme/nothing-here:Q4_0 from the Hub")
    assert "\n" not in done.stderr.strip()


def test_bytes_that_differ_from_the_hubs_sha256_are_refused(
    hub: StandInHub, hub_env: dict[str, str], tmp_path: Path
) -> None:
    hub.repos["acme/model-GGUF"] = QUANTS
    hub.corrupt.add("model-Q8_0.gguf")
    done = resolve("acme/model-GGUF:Q8_0", hub_env)
    assert done.returncode != 0
    expected = hashlib.sha256(QUANTS["model-Q8_0.gguf"]).hexdigest()
    assert f"the Hub says {expected}: refused" in done.stderr
    blobs = tmp_path / "hf" / "hub" / "models--acme--model-GGUF" / "blobs"
    assert not (blobs / expected).exists()  # not left in the cache for the next start to use
    # served right the next time: fetched again and accepted
    hub.corrupt.clear()
    done = resolve("acme/model-GGUF:Q8_0", hub_env)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).read_bytes() == QUANTS["model-Q8_0.gguf"]
    # a cached file changed on disk afterwards is caught too
    (blobs / expected).write_bytes(QUANTS["model-Q8_0.gguf"][:-1] + b"!")
    done = resolve("acme/model-GGUF:Q8_0", hub_env)
    assert done.returncode != 0 and "refused" in done.stderr


def test_a_broken_download_resumes_where_it_stopped(hub: StandInHub, hub_env: dict[str, str]) -> None:
    data = os.urandom(24 << 20)  # huggingface_hub writes 10 MiB chunks: the first survives the break
    hub.repos["acme/big"] = {"big-Q4_0.gguf": data}
    hub.drop_once.add("big-Q4_0.gguf")
    done = resolve("acme/big:Q4_0", hub_env)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).read_bytes() == data
    ranges = [r for r in hub.requests if r.startswith("GET /acme/big/resolve") and "bytes=" in r]
    assert len(ranges) == 1 and ranges[0].endswith(f"bytes={10 << 20}-"), hub.requests


def test_offline_once_cached(hub: StandInHub, hub_env: dict[str, str]) -> None:
    hub.repos["acme/model-GGUF"] = QUANTS
    online = resolve("acme/model-GGUF:Q4_K_S", hub_env)
    assert online.returncode == 0, online.stderr
    hub.requests.clear()
    offline_env = {**hub_env, "HF_HUB_OFFLINE": "1"}
    for spec in ("acme/model-GGUF:Q4_K_S", "acme/model-GGUF/model-Q4_K_S.gguf"):
        done = resolve(spec, offline_env)
        assert done.returncode == 0, done.stderr
        assert done.stdout == online.stdout
    assert hub.requests == []  # not one request
    # what was never fetched cannot be had offline, and says so in one line
    done = resolve("acme/model-GGUF:Q8_0", offline_env)
    assert done.returncode != 0 and "\n" not in done.stderr.strip()
    done = resolve("acme/other:Q8_0", offline_env)
    assert "HF_HUB_OFFLINE is set" in done.stderr


def test_a_local_path_never_reaches_for_the_hub(hub: StandInHub, hub_env: dict[str, str]) -> None:
    done = resolve("models/missing.gguf", hub_env)
    assert done.stderr.strip() == "ModelLoadError: model file not found: models/missing.gguf"
    assert hub.requests == []


def test_strata_server_serves_a_hub_reference(
    hub: StandInHub, hub_env: dict[str, str], engine_model_path: Path, client: OpenAI, model: str
) -> None:
    """The one command a new user runs: the default model's bytes from the stand-in Hub; its
    answer is the default server's, bit for bit."""
    hub.repos["HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"] = {
        "smollm2-135m-instruct-q4_1.gguf": engine_model_path.read_bytes(),
        "smollm2-135m-instruct-q8_0.gguf": b"GGUF not this one",
    }
    ask = {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0, "logprobs": 3}
    # this process's STRATA_HOME, whose kernels are built already (the launcher merges os.environ)
    env = {k: v for k, v in hub_env.items() if k != "STRATA_HOME"}
    with server_process(
        "--model",
        "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1",
        "--log-level",
        "warning",
        env=env,
        startup_timeout_s=300,
    ) as server:
        hub_client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
        hub_model = hub_client.models.list().data[0].id
        reply = hub_client.completions.create(model=hub_model, **ask)  # type: ignore[call-overload]
    assert hub_model == "smollm2-135m-instruct-q4_1"
    reference = client.completions.create(model=model, **ask)  # type: ignore[call-overload]
    assert reply.choices[0].text == reference.choices[0].text
    assert reply.choices[0].logprobs == reference.choices[0].logprobs


def test_the_howtos_hub_commands(hub: StandInHub, hub_env: dict[str, str]) -> None:
    """docs/howto-own-gguf.md's Hub commands, online then offline, pick the documented file."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "howto-own-gguf.md").read_text()
    commands = re.findall(r"^(\S+=\S+ )?strata-server --model (\w\S*/\S+)$", doc, re.MULTILINE)
    assert [env for env, _ in commands] == ["", "HF_HUB_OFFLINE=1 "]
    repo = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"
    hub.repos[repo] = {
        f"Qwen2.5-0.5B-Instruct-{q}.gguf": gguf_bytes(q) for q in ("Q4_K_M", "Q4_K_S", "Q4_K_L", "Q8_0")
    }
    for env, spec in commands:
        assert spec == f"{repo}:Q4_K_M"
        name, _, value = env.strip().partition("=")
        done = resolve(spec, {**hub_env, name: value} if name else hub_env)
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()).name == "Qwen2.5-0.5B-Instruct-Q4_K_M.gguf"
    assert f"`{repo}/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf`" in doc  # the file named outright


def test_the_cache_serves_when_the_hub_is_unreachable(hub: StandInHub, hub_env: dict[str, str]) -> None:
    hub.repos["acme/model-GGUF"] = QUANTS
    online = resolve("acme/model-GGUF:Q4_K_M", hub_env)
    assert online.returncode == 0, online.stderr
    gone = {**hub_env, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}  # nothing listens there
    done = resolve("acme/model-GGUF:Q4_K_M", gone)
    assert done.returncode == 0, done.stderr
    assert done.stdout == online.stdout
    done = resolve("acme/model-GGUF:Q8_0", gone)  # never fetched: the connection error, in one line
    assert done.returncode != 0
    message = done.stderr.strip()
    assert message.startswith("ModelLoadError: cannot fetch acme/model-GGUF:Q8_0 from the Hub: ")
    assert "\n" not in message


def _plant(path: Path, data: bytes) -> str:
    """Put `data` in the Hub cache at the snapshot file `path` as huggingface_hub would have: a
    blob named after its own sha256, the snapshot's link pointing at it."""
    blobs = path.parents[2] / "blobs"  # models--o--r/snapshots/<commit>/<file>
    sha = hashlib.sha256(data).hexdigest()
    blobs.mkdir(parents=True, exist_ok=True)
    (blobs / sha).write_bytes(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.symlink_to(blobs / sha)
    return sha


def test_a_planted_blob_named_after_its_own_sha256_is_refused(
    hub: StandInHub, hub_env: dict[str, str]
) -> None:
    """A blob's name is no evidence: the bytes are checked against the Hub's listing (online) or
    the sha256 Strata recorded when it fetched the file (offline)."""
    hub.repos["acme/model-GGUF"] = QUANTS
    done = resolve("acme/model-GGUF:Q8_0", hub_env)
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    real = hashlib.sha256(QUANTS["model-Q8_0.gguf"]).hexdigest()
    for env, whose in (({**hub_env, "HF_HUB_OFFLINE": "1"}, "Strata recorded"), (hub_env, "the Hub says")):
        planted = _plant(path, gguf_bytes("evil"))
        done = resolve("acme/model-GGUF:Q8_0", env)
        assert done.returncode != 0, f"a planted file was served ({whose})"
        message = done.stderr.strip()
        assert "\n" not in message and str(path) in message, message
        assert f"has sha256 {planted}, {whose} {real}: refused and deleted from the cache" in message
        assert not (path.parents[2] / "blobs" / planted).exists()


def test_a_changed_file_with_its_mtime_set_back_is_caught(hub: StandInHub, hub_env: dict[str, str]) -> None:
    """What was verified is remembered by inode, size, mtime and ctime: same-size bytes written
    with the old mtime put back (utime) still move the ctime, so the file is hashed again."""
    hub.repos["acme/model-GGUF"] = QUANTS
    done = resolve("acme/model-GGUF:Q4_K_M", hub_env)
    assert done.returncode == 0, done.stderr
    blob = Path(done.stdout.strip()).resolve()
    before = blob.stat()
    blob.write_bytes(QUANTS["model-Q4_K_M.gguf"][:-1] + b"!")
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (blob.stat().st_size, blob.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    done = resolve("acme/model-GGUF:Q4_K_M", {**hub_env, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0 and "refused and deleted" in done.stderr, done.stderr


def test_offline_a_file_strata_never_checked_is_refused(hub_env: dict[str, str], tmp_path: Path) -> None:
    """A file in the Hub cache that another tool put there has no sha256 recorded by Strata: offline
    there is nothing trustworthy to check it against, so it is refused, saying what to do."""
    repo = tmp_path / "hf" / "hub" / "models--acme--model-GGUF"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    _plant(repo / "snapshots" / COMMIT / "model-Q4_K_S.gguf", QUANTS["model-Q4_K_S.gguf"])
    done = resolve("acme/model-GGUF:Q4_K_S", {**hub_env, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0, "a file Strata never checked was served offline"
    assert "Strata has no sha256 recorded for acme/model-GGUF/model-Q4_K_S.gguf" in done.stderr
    assert "fetch it once with the Hub reachable" in done.stderr and "\n" not in done.stderr.strip()
