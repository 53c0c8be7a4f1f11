"""The routes that say what is served and how it is doing: `/v1/models`, `/version`,
`/health` and `/metrics` (their bodies: info.py, provenance.py, metrics.py)."""

from __future__ import annotations

from litestar import Response, get
from litestar.di import NamedDependency

from strata_server.context import ServerContext
from strata_server.info import health as health_body
from strata_server.info import models
from strata_server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from strata_server.replies import json_response


@get("/models")
async def list_models(ctx: NamedDependency[ServerContext]) -> Response:
    """The one served model."""
    return json_response(models(ctx))


@get("/version")
async def version(ctx: NamedDependency[ServerContext]) -> Response:
    """Which arithmetic answers: versions, kernels, the model file's sha256, the fingerprint."""
    assert ctx.provenance is not None
    return json_response(ctx.provenance.body(ctx.served_name))


@get("/health")
async def health(ctx: NamedDependency[ServerContext]) -> Response:
    """200 once the model is loaded (the app only exists after loading); 503 while draining
    or once the engine has failed for good (a tensor-parallel rank died)."""
    down = ctx.drain.draining or ctx.engine.failure is not None
    return json_response(health_body(ctx), 503 if down else 200)


@get("/metrics", media_type=METRICS_CONTENT_TYPE)
async def metrics(ctx: NamedDependency[ServerContext]) -> str:
    """Prometheus text: requests, tokens, latency histograms, queue depth, KV cache."""
    server = {
        "admitted": ctx.admission.in_flight,
        "max_queue": -1 if ctx.admission.max_queue is None else ctx.admission.max_queue,
        "draining": int(ctx.drain.draining),
    }
    engine = ctx.engine
    return ctx.metrics.render(
        engine.stats(), kernels=engine.kernels, invariant=engine.invariant, server=server
    )
