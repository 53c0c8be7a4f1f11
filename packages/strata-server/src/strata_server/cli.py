"""`strata-server`: load a GGUF model into the engine and serve it over HTTP with uvicorn."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from strata_server.limits import not_on_ray
from strata_server.log_format import configure_logging
from strata_server.settings import api_keys, build_parser, check_flags, engine_options, server_settings

__all__ = ["build_parser", "main"]  # every flag is declared in strata_server.settings


def serve_on_ray(args: argparse.Namespace, keys: tuple[str, ...]) -> None:
    """`--ray`: the same app on --replicas engine replicas (strata_server.ray)."""
    if args.replicas < 1:
        sys.exit("strata-server: --replicas must be at least 1")
    if args.tensor_parallel != 1:
        sys.exit(
            "strata-server: --ray runs one engine per replica; --tensor-parallel is not supported with it"
        )
    if unsupported := not_on_ray(args):  # refused, not silently left unapplied
        sys.exit(
            f"strata-server: --ray: Ray Serve's HTTP proxy has no setting for {', '.join(unsupported)}; "
            "bound them in a reverse proxy in front of it (docs/scaling.md), or leave them out"
        )
    try:
        from strata_server.ray.options import RayOptions
        from strata_server.ray.serve import serve_replicas
    except ImportError as exc:
        sys.exit(
            "strata-server: --ray needs Ray Serve: from the Strata repository, "
            f"pip install './packages/strata-server[ray]' ({exc})"
        )
    from strata_engine.api import EngineError
    from strata_engine.model_store import resolve_model

    try:
        resolve_model(args.model)  # fail here, not in every replica (each resolves it again)
    except EngineError as exc:
        sys.exit(f"strata-server: cannot load model: {exc}")
    serve_replicas(RayOptions.from_args(args, keys), args.host, args.port, args.ray_address)


def follow_rank(path: Path, engine_args: dict[str, Any]) -> int:
    """A tensor-parallel rank other than 0 serves no HTTP: it loads its shard and runs rank 0's
    steps until rank 0 stops (exit 0) or the group breaks (exit 1, loudly)."""
    from strata_engine.api import EngineUnavailable
    from strata_engine.engine import LLMEngine

    # torchrun (and Ctrl-C) signal every rank at once: a worker keeps running rank 0's steps while
    # rank 0 drains, and exits when rank 0 releases it (or is gone: its collectives fail)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    engine = LLMEngine(path, **engine_args)
    try:
        engine.follow()
    except EngineUnavailable as exc:
        logging.getLogger("strata_server").error("strata-server rank %d: %s", engine.tp.rank, exc)
        return 1
    finally:
        engine.close()
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    check_flags(args)
    try:
        keys = api_keys(args)
    except OSError as exc:
        sys.exit(f"strata-server: cannot read --api-key-file: {exc}")
    configure_logging(args.log_level, args.log_format)
    if args.ray:
        serve_on_ray(args, keys)
        return

    import uvicorn  # imported here so `--help` stays instant

    from strata_engine import AsyncEngine
    from strata_engine.api import EngineError
    from strata_engine.heap import loading_to_serve
    from strata_engine.kernels.choice import describe
    from strata_engine.kernels.native import NativeUnavailable
    from strata_engine.model_store import resolve_model
    from strata_engine.provenance import model_sha256
    from strata_engine.tensor_parallel import init_from_env
    from strata_server.app import create_app
    from strata_server.provenance import Provenance
    from strata_server.shutdown import GracefulServer
    from strata_server.slow_clients import connection_options

    with loading_to_serve():  # large freed blocks go back to the OS (heap.py)
        try:
            path = resolve_model(args.model)
            tp = init_from_env(args.tensor_parallel, args.device)
            engine_args = {**engine_options(args), "tensor_parallel": tp}
            if tp.rank != 0:
                sys.exit(follow_rank(path, engine_args))
            with ThreadPoolExecutor(1, thread_name_prefix="strata-hash") as pool:
                sha256 = pool.submit(model_sha256, path)  # beside the load (hashlib releases the GIL)
                engine = AsyncEngine.from_path(path, **engine_args)
                provenance = Provenance.of(
                    engine.kernels,
                    engine.invariant,
                    path,
                    tp.world,
                    engine_args.get("chat_template"),
                    sha256.result(),
                    engine.kv_cache_dtype,
                )
        except (EngineError, NativeUnavailable) as exc:
            sys.exit(f"strata-server: cannot load model: {exc}")
        except OSError as exc:
            sys.exit(f"strata-server: cannot read the model file: {exc}")
    logging.getLogger("strata_server").info(
        "%s; model %s loaded in %.2f s",
        describe(engine.kernels, engine.invariant),
        path.name,
        engine.load_seconds,
    )
    settings = server_settings(args, keys)
    try:
        app = create_app(engine, settings, provenance)
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=False,  # one JSON line per request instead (strata_server.access)
            log_config=None,  # uvicorn's loggers go through configure_logging's handler
            timeout_graceful_shutdown=1,  # after --shutdown-grace, close what is left quickly
            **connection_options(settings.limits),
        )
        server = GracefulServer(config, app.state.ctx.drain, args.shutdown_grace)
        server.run(sockets=None if args.fd is None else [socket.socket(fileno=args.fd)])
        if not server.started:
            sys.exit(3)  # uvicorn's own status for a failed start (port taken, ...)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
