"""`RayOptions`: what the Ray Serve application needs, from the same flags as the single server.

It turns the parsed flags into the engine's keywords and the app's settings through
strata_server.settings, as the CLI does, so both ways of serving read each flag the same way.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from ray.serve.config import RequestRouterConfig

from strata_server.settings import ServerSettings, api_keys, build_parser, engine_options, server_settings

APP_NAME = "strata"
ROUTERS = ("affinity", "pow2")
# Route by prefix only when a replica has seen at least half of the prompt; below that the
# emptier replica takes it. Ray's default (10%) lets a shared template plus a token or two of
# chance overlap pin new, unrelated states to one replica (bench/bench_ray.py showed 45:15).
AFFINITY_MIN_MATCH = 0.5
UNBOUNDED_QUEUE_HELD = 1024  # with --max-queue -1: requests a replica holds beyond --parallel


@dataclass(frozen=True)
class RayOptions:
    """Everything the application needs, from the same flags as the single server."""

    model: str
    engine: dict[str, Any]  # AsyncEngine.from_path keywords (strata_server.settings.EngineOptions)
    settings: ServerSettings = field(default_factory=ServerSettings)
    replicas: int = 2
    router: str = "affinity"  # or "pow2": Ray Serve's default power-of-two choices
    cpus_per_replica: float = 1.0
    gpus_per_replica: float = 0.0  # 1 with --device cuda: Ray gives each replica its own GPU
    shutdown_grace: float = 30.0
    app_name: str = APP_NAME

    @classmethod
    def from_args(cls, args: argparse.Namespace, keys: tuple[str, ...]) -> RayOptions:
        engine = engine_options(args)
        if engine.get("num_threads") is None:  # share the host's cores between the replicas
            engine["num_threads"] = max(1, (os.cpu_count() or 1) // args.replicas)
        return cls(
            model=args.model,
            engine=engine,
            settings=server_settings(args, keys),
            replicas=args.replicas,
            router=args.router,
            cpus_per_replica=float(engine["num_threads"]),
            gpus_per_replica=1.0 if args.device == "cuda" else 0.0,
            shutdown_grace=args.shutdown_grace,
        )

    @property
    def max_ongoing(self) -> int:
        """HTTP requests one replica holds: its slots and its queue (its app refuses beyond)."""
        queue = self.settings.max_queue
        return self.settings.slots + (UNBOUNDED_QUEUE_HELD if queue is None else queue)

    @property
    def router_config(self) -> RequestRouterConfig:
        if self.router == "pow2":
            return RequestRouterConfig()
        from strata_server.ray.router import ROUTER_PATH

        # Prefix affinity while the replicas' queues differ by at most one batch.
        return RequestRouterConfig(
            request_router_class=ROUTER_PATH,
            request_router_kwargs={
                "imbalanced_threshold": self.settings.slots,
                "match_rate_threshold": AFFINITY_MIN_MATCH,
            },
        )


def options_from_serve_args(args: dict[str, Any]) -> RayOptions:
    """Serve's application arguments are the CLI's flags without dashes (`no_prefix_cache=true`
    for a switch), parsed by the CLI's own parser."""
    parser = build_parser()
    switches = {s for a in parser._actions if a.nargs == 0 for s in a.option_strings}
    argv: list[str] = []
    for key, value in args.items():
        flag = f"--{key.replace('_', '-')}"
        if flag in switches:
            argv += [flag] if str(value).lower() in ("1", "true", "yes") else []
        else:
            argv += [flag, str(value)]
    parsed = parser.parse_args(argv)
    return RayOptions.from_args(parsed, api_keys(parsed))
