"""The Litestar app around a loaded engine: it assembles the routes, the API key guard, the
middleware, the error envelopes and the OpenAPI document.

The routes are module-level handlers (generation_routes.py, tokenizer_routes.py,
info_routes.py); each gets the `ServerContext` (and the keyless routes their `OpenPool`) by
Litestar's dependency injection, so a new route is one handler and its line in a router here.
Handlers read the raw body and decode it with `protocol.decode_request` (strict), so every
validation failure takes the same path to the OpenAI error envelope.
"""

from __future__ import annotations

from litestar import Litestar, Router
from litestar.config.cors import CORSConfig
from litestar.di import Provide
from litestar.types import Guard

from strata_engine.protocol import EngineClient
from strata_server.auth import ApiKeyGuard
from strata_server.browsers import allowed_hosts_middleware, require_json
from strata_server.context import ServerContext, ServerSettings
from strata_server.errors import EXCEPTION_HANDLERS
from strata_server.generation_routes import GENERATION_ROUTES
from strata_server.info_routes import health, list_models, metrics, version
from strata_server.metrics import metrics_middleware
from strata_server.open_routes import OpenPool
from strata_server.openapi import openapi_config
from strata_server.provenance import Provenance
from strata_server.request_log import request_log_middleware
from strata_server.shutdown import drain_middleware
from strata_server.slow_clients import body_timeout_middleware
from strata_server.tokenizer_routes import TOKENIZER_ROUTES


def create_app(
    engine: EngineClient, settings: ServerSettings | None = None, provenance: Provenance | None = None
) -> Litestar:
    """Build the app around an already loaded engine (`strata_engine.AsyncEngine`).

    `provenance` names the model file and its sha256 for `/version`, `/v1/models` and the
    replies' `system_fingerprint` (`Provenance.of`); without it they know only the kernels.
    """
    ctx = ServerContext(engine=engine, settings=settings or ServerSettings(), provenance=provenance)
    open_pool = OpenPool()  # the keyless routes' own workers (open_routes.py)
    guards: list[Guard] = [ApiKeyGuard(ctx.settings), require_json]
    v1 = Router(path="/v1", route_handlers=[*GENERATION_ROUTES, list_models], guards=guards)
    # keyless unless --key-on-every-route; /health always (load balancers and probes have no key)
    outside_v1 = Router(
        path="/",
        route_handlers=[*TOKENIZER_ROUTES, version, metrics],
        guards=guards,  # the key only with --key-on-every-route (needs_key)
    )
    app = Litestar(
        route_handlers=[v1, outside_v1, health],
        dependencies={
            "ctx": Provide(lambda: ctx, use_cache=True, sync_to_thread=False),
            "open_pool": Provide(lambda: open_pool, use_cache=True, sync_to_thread=False),
        },
        on_shutdown=[open_pool.close],
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[
            allowed_hosts_middleware(ctx.settings.allowed_hosts),
            body_timeout_middleware(ctx.settings.limits.body_timeout),
            request_log_middleware(),
            drain_middleware(ctx.drain),
            metrics_middleware(ctx.metrics),
        ],
        cors_config=CORSConfig(allow_origins=list(ctx.settings.cors_origins))
        if ctx.settings.cors_origins
        else None,
        openapi_config=openapi_config(),
        request_max_body_size=ctx.settings.limits.max_body_bytes,
        logging_config=None,  # the CLI configures logging; an embedding process keeps its own
    )
    app.state.ctx = ctx
    return app
