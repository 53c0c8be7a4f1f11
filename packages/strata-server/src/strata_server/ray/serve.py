"""`strata-server --ray`: N engine replicas behind one HTTP ingress on Ray Serve.

Two deployments make the application:

- `StrataReplica` (N replicas): loads the engine and runs the single server's Litestar app
  (`create_app`) on each request the ingress forwards (`forward.run_asgi`), so routes,
  checks, error envelopes and per-replica metrics are the single server's own.
- `StrataIngress` (one replica, no CPU reserved): Serve's HTTP ingress. It reads the body,
  forwards it through a `DeploymentHandle` whose router (`router`) keeps requests that
  share a prompt prefix on one replica, and streams the reply back. Failures of the Ray
  layer become envelopes: a replica that dies mid-request is a 503 (`replica_unavailable`;
  clients retry, Ray replaces the replica), a full cluster a 429. `/health` reports the
  replicas Serve runs; `/metrics` merges every replica's series with a `replica` label.

Strata's rows are bit-identical whatever else a replica runs, so which replica answers does
not change a bit of any reply: routing only decides where the prefix cache is warm.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import ray
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError
from ray.serve.handle import DeploymentHandle

from strata_server.admission import RETRY_AFTER_S
from strata_server.errors import error_body
from strata_server.formatting import SSE_DONE, sse
from strata_server.ray.forward import (
    BodyTooSlow,
    ForwardedRequest,
    Message,
    Receive,
    Scope,
    Send,
    key_refusal,
    read_body,
    run_asgi,
)
from strata_server.ray.metrics import merge_replica_metrics
from strata_server.ray.options import ROUTERS, RayOptions, options_from_serve_args
from strata_server.request_log import sane_request_id

log = logging.getLogger("strata_server")

REPLICA_HEADER = b"x-strata-replica"  # which replica answered (tests, benchmarks, debugging)
BOARD_NAMESPACE = "strata"
METRICS_PUSH_S = 1.0  # how often a replica publishes its /metrics text
METRICS_MAX_AGE_S = 5.0  # older texts belong to replicas that are gone
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024  # request bodies and replies are small


def board_name(app_name: str) -> str:
    return f"metrics-{app_name}"


@ray.remote(num_cpus=0)
class MetricsBoard:
    """The replicas' latest `/metrics` texts, for the ingress to merge (one per application)."""

    def __init__(self) -> None:
        self.texts: dict[str, tuple[float, str]] = {}

    def put(self, replica: str, text: str) -> None:
        self.texts[replica] = (time.monotonic(), text)

    def fresh(self, max_age_s: float) -> dict[str, str]:
        now = time.monotonic()
        self.texts = {r: (t, text) for r, (t, text) in self.texts.items() if now - t <= max_age_s}
        return {r: text for r, (_, text) in self.texts.items()}


class StrataReplica:
    """One engine and the single server's app around it."""

    async def __init__(self, options: RayOptions) -> None:  # type: ignore[misc]  # Ray awaits it
        from strata_engine import AsyncEngine
        from strata_engine.heap import loading_to_serve
        from strata_engine.model_store import resolve_model
        from strata_server.app import create_app
        from strata_server.provenance import Provenance

        logging.getLogger("strata_server.access").setLevel(logging.WARNING)  # Serve logs requests
        path = resolve_model(options.model)
        with loading_to_serve():  # as the single server's load (heap.py)
            self.engine = AsyncEngine.from_path(path, **options.engine)
        provenance = Provenance.of(
            self.engine.kernels,
            self.engine.invariant,
            path,
            chat_template=options.engine.get("chat_template"),
            kv_cache_dtype=self.engine.kv_cache_dtype,
        )
        self.app = create_app(self.engine, options.settings, provenance)
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.board_name = board_name(options.app_name)
        self.pusher = asyncio.get_running_loop().create_task(self._push_metrics())

    async def forward(self, request: ForwardedRequest) -> AsyncIterator[Message]:
        """The app's ASGI messages for one request, with two headers: the replica that answered,
        and `Server-Timing: replica;dur=<ms>`, the time the replica took to the reply's headers
        (the whole reply unless streamed), so the Ray path's own cost can be told apart."""
        started = time.perf_counter()
        async for message in run_asgi(self.app, request):
            if message["type"] == "http.response.start":
                took = f"replica;dur={(time.perf_counter() - started) * 1000:.3f}"
                headers = [
                    *message.get("headers", []),
                    (REPLICA_HEADER, self.replica.encode()),
                    (b"server-timing", took.encode()),
                ]
                message = {**message, "headers": headers}
            yield message

    def metrics_text(self) -> str:
        return self.app.state.ctx.metrics.render(
            self.engine.stats(), kernels=self.engine.kernels, invariant=self.engine.invariant
        )

    async def _push_metrics(self) -> None:
        board = None
        while True:
            try:
                board = board or ray.get_actor(self.board_name, namespace=BOARD_NAMESPACE)
                board.put.remote(self.replica, self.metrics_text())
            except Exception:  # the ingress (which owns the board) is not up yet, or restarting
                board = None
            await asyncio.sleep(METRICS_PUSH_S)

    def check_health(self) -> None:
        """Serve's periodic check: a stopped engine loop makes Ray replace this replica."""
        thread = getattr(self.engine, "_thread", None)
        if thread is not None and not thread.is_alive():
            raise RuntimeError("the engine loop has stopped")

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()


class StrataIngress:
    """HTTP in, `ForwardedRequest` to a replica, the replica's messages out."""

    def __init__(self, replicas: DeploymentHandle, options: RayOptions) -> None:
        self.replicas = replicas.options(stream=True)
        self.options = options
        self.failures = 0  # requests answered 503 because their replica failed
        self.board = MetricsBoard.options(  # type: ignore[attr-defined]
            name=board_name(options.app_name), namespace=BOARD_NAMESPACE, get_if_exists=True
        ).remote()

    def __serve_build_asgi_app__(self) -> Any:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:  # a function: ASGI 3
            await self.asgi(scope, receive, send)

        return app

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        given = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
        request_id = sane_request_id(given.decode("latin-1")) or uuid.uuid4().hex
        headers = [(k, v) for k, v in scope["headers"] if k != b"x-request-id"]
        headers.append((b"x-request-id", request_id.encode()))
        if scope["path"] == "/metrics" and scope["method"] == "GET":
            await _reply(send, 200, (await self.metrics()).encode(), b"text/plain; version=0.0.4")
            return
        settings = self.options.settings
        if (refused := key_refusal(scope, settings, request_id)) is not None:  # before the body
            await _reply(send, 401, refused, b"application/json")
            return
        # One byte past the app's body limit (--max-body-bytes): a larger body reaches the
        # replica's app just too large, and the app answers its own 413, as the single server does.
        try:
            body = await read_body(receive, settings.limits.max_body_bytes + 1, settings.limits.body_timeout)
        except BodyTooSlow as exc:
            slow = msgspec.json.encode(error_body(str(exc), 408, request_id=request_id))
            await _reply(send, 408, slow, b"application/json", [(b"connection", b"close")])
            return
        request = ForwardedRequest.of(scope, body, headers)
        if scope["path"] == "/health" and scope["method"] == "GET":
            await self.health(request, send)
            return
        await self.forward(request, send, request_id)

    async def forward(self, request: ForwardedRequest, send: Send, request_id: str) -> None:
        """Stream a replica's reply; a failure of the Ray layer becomes an envelope."""
        started = streaming = False
        try:
            async for message in self.replicas.forward.remote(request):
                if message["type"] == "http.response.start":
                    started = True
                    streaming = any(
                        k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                        for k, v in message.get("headers", [])
                    )
                    # Serve's proxy echoes X-Request-Id itself (the id the replica used)
                    kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                    message = {**message, "headers": kept}
                await send(message)
        except BackPressureError:
            await self._fail(send, started, streaming, request_id, 429, "queue_full", _FULL)
        except (RayActorError, ReplicaUnavailableError, DeploymentUnavailableError) as exc:
            self.failures += 1
            log.warning("request %s: replica failed (%s)", request_id, type(exc).__name__)
            await self._fail(send, started, streaming, request_id, 503, "replica_unavailable", _DIED)

    async def _fail(
        self, send: Send, started: bool, streaming: bool, request_id: str, status: int, code: str, text: str
    ) -> None:
        body = error_body(text, status, code=code, request_id=request_id)
        if not started:
            extra = [(b"retry-after", str(RETRY_AFTER_S).encode())]
            await _reply(send, status, msgspec.json.encode(body), b"application/json", extra)
        elif streaming:  # headers are out: the error becomes an SSE event, as the app does
            await send({"type": "http.response.body", "body": sse(body) + SSE_DONE, "more_body": False})
        else:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def health(self, request: ForwardedRequest, send: Send) -> None:
        """200 while Serve runs at least one replica (with a replica's own /health body)."""
        running, target = await asyncio.to_thread(self._replica_counts)
        body: dict[str, Any] = {"status": "unavailable"}
        status = 503
        if running:
            try:
                status, body = await self._ask(request)
            except Exception as exc:  # no replica answered after all
                body = {"status": "unavailable", "error": type(exc).__name__}
                status = 503
        if status == 200 and running < target:
            body["status"] = "degraded"
        body["replicas"] = {"running": running, "target": target}
        await _reply(send, status, msgspec.json.encode(body), b"application/json")

    async def _ask(self, request: ForwardedRequest) -> tuple[int, dict[str, Any]]:
        status, chunks = 500, []
        async for message in self.replicas.forward.remote(request):
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                chunks.append(message.get("body", b""))
        return status, msgspec.json.decode(b"".join(chunks))

    def _replica_counts(self) -> tuple[int, int]:
        app = serve.status().applications.get(self.options.app_name)
        deployment = app.deployments.get("StrataReplica") if app else None
        running = deployment.replica_states.get("RUNNING", 0) if deployment else 0
        return running, self.options.replicas

    async def metrics(self) -> str:
        texts = await self.board.fresh.remote(METRICS_MAX_AGE_S)
        running, target = await asyncio.to_thread(self._replica_counts)
        own = [
            "# HELP strata:replicas_running Engine replicas Ray Serve runs.",
            "# TYPE strata:replicas_running gauge",
            f"strata:replicas_running {running}",
            "# HELP strata:replicas_target Engine replicas asked for (--replicas).",
            "# TYPE strata:replicas_target gauge",
            f"strata:replicas_target {target}",
            "# HELP strata:replica_failures_total Requests answered 503 because their replica failed.",
            "# TYPE strata:replica_failures_total counter",
            f"strata:replica_failures_total {self.failures}",
        ]
        return merge_replica_metrics(texts, own)


_DIED = "The replica serving this request failed; retry (Ray Serve replaces the replica)."
_FULL = f"Every replica is at capacity; retry after {RETRY_AFTER_S} s."


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _reply(
    send: Send, status: int, body: bytes, content_type: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def build_app(options: RayOptions) -> Any:
    """The Serve application: the ingress bound to `options.replicas` engine replicas."""
    if options.router not in ROUTERS:
        raise ValueError(f"router must be one of {ROUTERS}, not {options.router!r}")
    replicas = (
        serve.deployment(StrataReplica, name="StrataReplica")
        .options(
            num_replicas=options.replicas,
            max_ongoing_requests=options.max_ongoing,
            max_queued_requests=-1 if options.settings.max_queue is None else options.settings.max_queue,
            ray_actor_options={"num_cpus": options.cpus_per_replica, "num_gpus": options.gpus_per_replica},
            request_router_config=options.router_config,
            graceful_shutdown_timeout_s=options.shutdown_grace,
        )
        .bind(options)
    )
    ingress = serve.deployment(serve.ingress()(StrataIngress), name="StrataIngress").options(
        num_replicas=1,
        max_ongoing_requests=options.replicas * options.max_ongoing + 64,
        ray_actor_options={"num_cpus": 0},
    )
    return ingress.bind(replicas, options)


def app_builder(args: dict[str, Any]) -> Any:
    """For `serve run strata_server.ray.serve:app_builder replicas=2 threads=1 ...` and
    `serve deploy` configs: the application from the CLI's flags given as arguments."""
    return build_app(options_from_serve_args(args))


def connect(options: RayOptions, address: str | None = None) -> None:
    """Join Ray at `address`, or start a local instance sized for the replicas."""
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, namespace=BOARD_NAMESPACE)
        return
    cpus = max(os.cpu_count() or 1, int(options.replicas * options.cpus_per_replica + 0.999))
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        object_store_memory=LOCAL_OBJECT_STORE_BYTES,
        namespace=BOARD_NAMESPACE,
    )


def deploy(options: RayOptions, host: str, port: int) -> None:
    """Start Serve's HTTP proxy on host:port and deploy; returns once every replica has loaded
    the model.

    Serve's proxy takes --keep-alive-timeout (whole seconds); the ingress itself applies the
    key check before reading a body and --body-timeout. Serve has no setting for
    --header-timeout, --max-connections, --max-client-connections or --max-header-bytes: a
    reverse proxy in front must bound those, as the log line says."""
    limits = options.settings.limits
    serve.start(
        http_options={
            "host": host,
            "port": port,
            "keep_alive_timeout_s": math.ceil(limits.keep_alive_timeout),
        }
    )
    log.warning(
        "--ray: Ray Serve's HTTP proxy does not apply --header-timeout, --max-connections, "
        "--max-client-connections or --max-header-bytes; bound them in a reverse proxy in front"
    )
    serve.run(build_app(options), name=options.app_name, route_prefix="/", blocking=False)


def start(options: RayOptions, host: str, port: int, address: str | None = None) -> None:
    """`connect`, then `deploy` (tests and benchmarks run the application in their process)."""
    connect(options, address)
    deploy(options, host, port)


def stop() -> None:
    serve.shutdown()
    ray.shutdown()


def serve_replicas(options: RayOptions, host: str, port: int, address: str | None) -> None:
    """`strata-server --ray`: start, serve until SIGTERM/Ctrl-C, then shut Serve and Ray down."""
    connect(options, address)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # after Ray's own handlers are installed
        signal.signal(sig, lambda *_: stopping.set())
    try:
        deploy(options, host, port)
        log.info(
            "serving %d replicas of %s on http://%s:%d (router: %s)",
            options.replicas,
            options.model,
            host,
            port,
            options.router,
        )
        while not stopping.wait(0.5):
            pass
    finally:
        log.info("shutting down the replicas (up to %.1f s for requests in flight)", options.shutdown_grace)
        stop()
