"""Prometheus text exposition, formatted by hand (no client library needed for a few series).

Series an operator graphs carry vLLM's names with the `strata:` prefix where vLLM has one
(`vllm:num_requests_waiting` -> `strata:num_requests_waiting`); the older `strata_*` series
are kept unchanged for existing dashboards.
"""

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


TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

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
    cached_tokens: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    inter_token: Histogram = field(default_factory=lambda: Histogram(TOKEN_GAP_BUCKETS))
    queue_time: Histogram = field(default_factory=Histogram)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests[(route, status)] += 1
        self.latency.setdefault(route, Histogram()).observe(seconds)

    def add_tokens(self, prompt: int, generated: int, cached: int = 0) -> None:
        self.prompt_tokens += prompt
        self.generated_tokens += generated
        self.cached_tokens += cached

    def render(
        self,
        engine_stats: Mapping[str, object],
        kernels: str,
        invariant: bool,
        server: Mapping[str, float] | None = None,
    ) -> str:
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
        out += self._operator_lines(engine_stats, server or {})
        for key, value in sorted(engine_stats.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out += [
                    f"# HELP strata_engine_{key} Engine scheduler state: {key}.",
                    f"# TYPE strata_engine_{key} gauge",
                    f"strata_engine_{key} {value}",
                ]
        return "\n".join(out) + "\n"

    def _operator_lines(self, stats: Mapping[str, object], server: Mapping[str, float]) -> list[str]:
        """The vLLM-named series (`strata:` prefix): queue, slots, KV cache, prefix cache, latency."""

        def number(key: str) -> float:
            value = stats.get(key, 0)
            return float(value) if isinstance(value, (int, float)) else 0.0

        total, free = number("kv_blocks_total"), number("kv_blocks_free")
        hit_rate = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        gauges = [
            ("num_requests_waiting", number("waiting"), "Engine requests waiting for a slot."),
            ("num_requests_running", number("running"), "Engine requests running."),
            ("num_requests_admitted", server.get("admitted", 0), "Engine requests the server holds."),
            ("max_queue", server.get("max_queue", -1), "The --max-queue bound (-1: none)."),
            ("server_draining", server.get("draining", 0), "1 while shutting down."),
            ("kv_blocks_total", total, "Paged KV-cache blocks."),
            ("kv_blocks_used", total - free, "KV-cache blocks held by requests."),
            ("kv_blocks_free", free, "KV-cache blocks free or evictable."),
            ("kv_cache_usage_perc", (total - free) / total if total else 0.0, "KV-cache usage, 0..1."),
            ("prefix_cache_hit_rate", hit_rate, "Prompt tokens served from the prefix cache, 0..1."),
        ]
        out: list[str] = []
        for name, value, text in gauges:
            out += [f"# HELP strata:{name} {text}", f"# TYPE strata:{name} gauge", f"strata:{name} {value:g}"]
        counters = [
            (
                "prefix_cache_queries_total",
                self.prompt_tokens,
                "Prompt tokens looked up in the prefix cache.",
            ),
            ("prefix_cache_hits_total", self.cached_tokens, "Prompt tokens found in the prefix cache."),
            ("prompt_tokens_total", self.prompt_tokens, "Prompt tokens processed."),
            ("generation_tokens_total", self.generated_tokens, "Tokens generated."),
        ]
        for name, count, text in counters:
            out += [f"# HELP strata:{name} {text}", f"# TYPE strata:{name} counter", f"strata:{name} {count}"]
        histograms = [
            ("time_to_first_token_seconds", self.ttft, "From arrival to a choice's first token."),
            ("inter_token_latency_seconds", self.inter_token, "Between a choice's tokens."),
            ("request_queue_time_seconds", self.queue_time, "From arrival to an engine slot."),
        ]
        for name, histogram, text in histograms:
            out += [f"# HELP strata:{name} {text}", f"# TYPE strata:{name} histogram"]
            out.extend(histogram.lines(f"strata:{name}", 'model="strata"'))
        return out


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
