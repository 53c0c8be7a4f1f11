"""Replay hostile inputs against a live strata-server and report what each one did.

    python tools/hostile.py [--model default] [--skip-models] [--row TEXT ...]

Starts `strata-server` on the model (a free port on 127.0.0.1) and sends each hostile request
of the table in docs/server.md#limits while another thread polls `/health`; prints, per row,
the HTTP status, the answer's size, the worst `/health` latency during the row, and whether
the server was still alive after it. The server trusts request chat templates
(--trust-request-chat-template), so hostile templates are rows too; strata-decide's gateway,
started in-process in front of the same server, gets its own rows (`--row gateway`). Then the
model-file rows: copies of the model's GGUF
made hostile with gguf-py (`llama.vocab_size` of 40,000,000 then a request for id 30,000,000;
a file cut in half; a tensor offset past the end), each served by a fresh `strata-server`,
reporting its exit status and the first line it wrote (or the request's status when it
loaded).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from hostile_requests import alive, post, request_rows  # beside this script

from strata_server.launch import free_port, server_process

HEALTH_POLL_S = 0.01


class HealthPoller:
    """Polls /health from its own thread; keeps the worst latency (a failed poll counts as inf)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=60.0) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    client.get(f"{self.url}/health")
                    self.worst = max(self.worst, time.perf_counter() - started)
                except httpx.HTTPError:
                    self.worst = float("inf")
                    return
                time.sleep(HEALTH_POLL_S)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Row:
    name: str
    status: str
    size: int
    worst_health_ms: float
    alive: bool


def run_requests(model: str, only: list[str] | None = None) -> list[Row]:
    """Each request row (those whose name contains one of `only`, when given) on one fresh server."""
    rows = []
    chosen = [(n, s) for n, s in request_rows() if not only or any(text in n for text in only)]
    flags = ("--model", model, "--parallel", "2", "--log-level", "warning", "--trust-request-chat-template")
    with server_process(*flags) as server:
        for name, send in chosen:
            with HealthPoller(server.url) as poller:
                status, size = send(server.url)
            rows.append(Row(name, status, size, poller.worst * 1000, alive(server.url)))
            print(format_row(rows[-1]), flush=True)
        if not only or any("gateway" in text for text in only):
            rows += run_gateway_rows(server.url)
        log = server.log()
        print(
            f"server log: {len(log.splitlines())} lines, {len(log)} bytes, {log.count('Traceback')} tracebacks"
        )
    return rows


# ---------------------------------------------------------------- the gateway in front


def run_gateway_rows(server_url: str) -> list[Row]:
    """strata-decide's gateway (in-process) in front of the same server: bodies and reads."""
    from strata_decide.gateway import GatewayConfig
    from strata_decide.gateway.serve import background

    options = {f"option {k}": None for k in range(5)}

    def body(count: int, rotations: bool = True) -> dict[str, Any]:
        questions = {
            f"q{i}": {"type": "choice", "instructions": f"Which {i}?", "criteria": options}
            for i in range(count)
        }
        return {
            "model": "jev-latest",
            "state": "A customer writes.",
            "questions": questions,
            "x_strata": {"rotations": rotations},
        }

    def double_gzip(url: str) -> tuple[str, int]:
        import gzip

        content = gzip.compress(gzip.compress(b'"' + b"x" * 16_000_000 + b'"'))
        headers = {"content-type": "application/json", "content-encoding": "gzip, gzip"}
        reply = httpx.post(f"{url}/v1/systemone", content=content, headers=headers, timeout=60)
        return f"{reply.status_code} ({len(content)} B in)", len(reply.content)

    def caller_leaves(url: str) -> tuple[str, int]:
        httpx.post(f"{url}/v1/systemone", json=body(1, False), timeout=120)  # labels fetched
        before = completions_answered(server_url)
        try:
            httpx.post(f"{url}/v1/systemone", json=body(40), timeout=3.0)
        except httpx.TimeoutException:
            pass
        left = completions_answered(server_url)
        time.sleep(5.0)
        return f"left at 3 s: +{completions_answered(server_url) - left} reads in 5 s after", left - before

    rows = []
    with background(GatewayConfig(upstream=server_url)) as url:
        for name, send in (
            ("gateway: Content-Encoding gzip, gzip", double_gzip),
            ("gateway: 60 questions x 5 rotations", lambda u: post(u, "/v1/systemone", body(60))),
            ("gateway: 40 x 5 rotations, caller leaves at 3 s", caller_leaves),
        ):
            with HealthPoller(server_url) as poller:
                status, size = send(url)
            rows.append(Row(name, status, size, poller.worst * 1000, alive(server_url)))
            print(format_row(rows[-1]), flush=True)
    return rows


def completions_answered(server_url: str) -> int:
    text = httpx.get(f"{server_url}/metrics", timeout=30).text
    pattern = r'^strata_requests_total\{[^}]*route="/v1/completions"[^}]*\} ([0-9.e+]+)$'
    return int(sum(float(v) for v in re.findall(pattern, text, re.M)))


def format_row(row: Row) -> str:
    worst = "dead" if row.worst_health_ms == float("inf") else f"{row.worst_health_ms:8.1f} ms"
    return f"{row.name:58s} {row.status:28s} {row.size:>10,d} B  health {worst:>11s}  alive={row.alive}"


# ---------------------------------------------------------------- model files


def crafted_models(source: Path, folder: Path) -> list[tuple[str, Path, bool]]:
    """(row name, path, whether to send the out-of-vocabulary request once it serves)."""
    import gguf  # gguf-py, the engine's own dependency

    vocab = folder / "vocab-40M.gguf"
    shutil.copyfile(source, vocab)
    reader = gguf.GGUFReader(vocab, "r+")
    field = reader.fields["llama.vocab_size"]
    field.parts[field.data[0]][0] = 40_000_000
    del reader

    truncated = folder / "truncated.gguf"
    with open(source, "rb") as src, open(truncated, "wb") as dst:
        dst.write(src.read(source.stat().st_size // 2))

    offset = folder / "bad-offset.gguf"
    shutil.copyfile(source, offset)
    reader = gguf.GGUFReader(offset, "r+")
    info = reader.tensors[-1].field
    info.parts[-1][0] = 1 << 40  # the last tensor's data offset, far past the end
    del reader
    return [
        ("llama.vocab_size 40,000,000 + prompt id 30,000,000", vocab, True),
        ("file cut in half", truncated, False),
        ("tensor offset past the end", offset, False),
    ]


def run_model_rows(model: str) -> None:
    from strata_engine.model_store import resolve_model

    source = Path(resolve_model(model))
    with tempfile.TemporaryDirectory(prefix="strata-hostile-") as tmp:
        for name, path, ask in crafted_models(source, Path(tmp)):
            print(f"{name:58s} {serve_crafted(path, ask)}", flush=True)


def serve_crafted(path: Path, ask: bool, startup_s: float = 120.0) -> str:
    """Start strata-server on `path`: its exit status and first line if it stops, else what the
    out-of-vocabulary request did to it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "strata_server",
        "--model",
        str(path),
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + startup_s
        while process.poll() is None and time.monotonic() < deadline and not alive(url):
            time.sleep(0.25)
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            first = next((line for line in output.splitlines() if line.strip()), "")
            return f"exit {process.returncode}: {first[:150]}"
        if not ask:
            return "loaded and served (no refusal)"
        status, _ = post(url, "/v1/completions", {"prompt": [1, 2, 30_000_000], "max_tokens": 1}, 60)
        time.sleep(0.5)
        code = process.poll()
        return f"loaded; the request got {status}; server {'alive' if code is None else f'died, exit {code}'}"
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="default")
    parser.add_argument("--skip-models", action="store_true", help="only the request rows")
    parser.add_argument(
        "--row", action="append", help="only the request rows whose name contains this text (repeatable)"
    )
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, port {free_port()} free; requests against --model {args.model}")
    run_requests(args.model, args.row)
    if not args.skip_models:
        run_model_rows(args.model)


if __name__ == "__main__":
    main()
