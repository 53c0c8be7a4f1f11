"""Prometheus text exposition, formatted by hand (no client library needed for a few series)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from litestar.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


@dataclass
class Histogram:
    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.total += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                return
        self.counts[-1] += 1

    def lines(self, name: str, labels: str) -> Iterable[str]:
        cumulative = 0
        for bound, count in zip(self.buckets, self.counts[:-1], strict=True):
            cumulative += count
            yield f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}'
        cumulative += self.counts[-1]
        yield f'{name}_bucket{{{labels},le="+Inf"}} {cumulative}'
        yield f"{name}_sum{{{labels}}} {self.total}"
        yield f"{name}_count{{{labels}}} {cumulative}"


@dataclass
class Metrics:
    """Counters the routes and the middleware update; `render` writes the exposition text."""

    requests: Counter = field(default_factory=Counter)  # (route, status) -> count
    latency: dict[str, Histogram] = field(default_factory=dict)  # route -> histogram
    prompt_tokens: int = 0
    generated_tokens: int = 0

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests[(route, status)] += 1
        self.latency.setdefault(route, Histogram()).observe(seconds)

    def add_tokens(self, prompt: int, generated: int) -> None:
        self.prompt_tokens += prompt
        self.generated_tokens += generated

    def render(self, engine_stats: Mapping[str, object], kernels: str, invariant: bool) -> str:
        out = [
            "# HELP strata_kernels_info The kernels the engine runs (1 for the active backend).",
            "# TYPE strata_kernels_info gauge",
            f'strata_kernels_info{{kernels="{kernels}",invariant="{str(invariant).lower()}"}} 1',
            "# HELP strata_requests_total HTTP requests by route and status.",
            "# TYPE strata_requests_total counter",
        ]
        for (route, status), count in sorted(self.requests.items()):
            out.append(f'strata_requests_total{{route="{route}",status="{status}"}} {count}')
        out += [
            "# HELP strata_prompt_tokens_total Prompt tokens processed.",
            "# TYPE strata_prompt_tokens_total counter",
            f"strata_prompt_tokens_total {self.prompt_tokens}",
            "# HELP strata_generated_tokens_total Tokens generated.",
            "# TYPE strata_generated_tokens_total counter",
            f"strata_generated_tokens_total {self.generated_tokens}",
            "# HELP strata_request_duration_seconds Time from request to last response byte.",
            "# TYPE strata_request_duration_seconds histogram",
        ]
        for route, histogram in sorted(self.latency.items()):
            out.extend(histogram.lines("strata_request_duration_seconds", f'route="{route}"'))
        for key, value in sorted(engine_stats.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out += [
                    f"# HELP strata_engine_{key} Engine scheduler state: {key}.",
                    f"# TYPE strata_engine_{key} gauge",
                    f"strata_engine_{key} {value}",
                ]
        return "\n".join(out) + "\n"


def metrics_middleware(metrics: Metrics) -> Callable[[ASGIApp], ASGIApp]:
    """ASGI middleware factory timing every routed HTTP request, labelled by route template."""

    def factory(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            status = 500
            route = scope.get("path_template") or scope["path"]

            async def timed_send(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await app(scope, receive, timed_send)
            finally:
                metrics.observe_request(route, status, time.perf_counter() - started)

        return middleware

    return factory
