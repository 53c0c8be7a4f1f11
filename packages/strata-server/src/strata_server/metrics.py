"""`/metrics` through `prometheus_client`: vLLM's series under the `strata:` prefix, plus Strata's own.

Every series vLLM also has carries vLLM's name with `strata:` for `vllm:` and vLLM's labels
(`model_name` = the served name, `engine="0"`), so a vLLM dashboard works after replacing the
prefix. Strata's own series (`strata_kernels_info`, `strata_requests_total`, the engine's
scheduler state, ...) carry `model_name` too. Each app owns one registry (never the
process-wide default), so two apps in one process never share a counter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# vLLM's buckets, so its dashboards' quantiles read the same
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TOKEN_GAP_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
HTTP_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
N_BUCKETS = (1, 2, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort")
VLLM_LABELS = ("model_name", "engine")
UNROUTED = "unrouted"  # the route label of requests no route matched (404s)
ENGINE_INDEX = "0"  # one engine per server (replicas are told apart by `replica`, see ray_metrics)


def one_two_five(limit: int) -> tuple[float, ...]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to `limit`."""
    out: list[float] = []
    scale = 1
    while True:
        for step in (1, 2, 5):
            value = step * scale
            if value > limit:
                return tuple(out)
            out.append(float(value))
        scale *= 10


class Metrics:
    """The series the routes and the middleware update; `render` writes the exposition text.

    `model_name` is the served name (vLLM's label); `max_model_len` bounds the token-count
    histograms as vLLM's do.
    """

    def __init__(self, model_name: str = "strata", max_model_len: int = 8192) -> None:
        self.model_name = model_name
        self.registry = registry = CollectorRegistry(auto_describe=True)
        ids = (model_name, ENGINE_INDEX)

        def gauge(name: str, text: str) -> Gauge:
            return Gauge(f"strata:{name}", text, VLLM_LABELS, registry=registry)

        def counter(name: str, text: str) -> Counter:
            return Counter(f"strata:{name}", text, VLLM_LABELS, registry=registry)

        def histogram(name: str, text: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(f"strata:{name}", text, VLLM_LABELS, registry=registry, buckets=tuple(buckets))

        # scheduler and cache state (set from the engine's stats at every scrape)
        self.running = gauge("num_requests_running", "Requests in the engine's running batch.").labels(*ids)
        self.waiting = gauge("num_requests_waiting", "Requests waiting for an engine slot.").labels(*ids)
        self.kv_usage = gauge("kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.").labels(*ids)
        self.kv_usage_old = gauge(
            "gpu_cache_usage_perc", "The same as kv_cache_usage_perc (vLLM's older name)."
        ).labels(*ids)
        self.admitted = gauge("num_requests_admitted", "Engine requests the server holds.").labels(*ids)
        self.max_queue = gauge("max_queue", "The --max-queue bound (-1: none).").labels(*ids)
        self.draining = gauge("server_draining", "1 while shutting down.").labels(*ids)
        self.kv_total = gauge("kv_blocks_total", "Paged KV-cache blocks.").labels(*ids)
        self.kv_used = gauge("kv_blocks_used", "KV-cache blocks held by requests.").labels(*ids)
        self.kv_free = gauge("kv_blocks_free", "KV-cache blocks free or evictable.").labels(*ids)
        self.hit_rate = gauge(
            "prefix_cache_hit_rate", "Prompt tokens served from the prefix cache, 0..1."
        ).labels(*ids)
        # tokens and requests
        self.cache_queries = counter(
            "prefix_cache_queries", "Prompt tokens looked up in the prefix cache."
        ).labels(*ids)
        self.cache_hits = counter("prefix_cache_hits", "Prompt tokens found in the prefix cache.").labels(
            *ids
        )
        self.prompt_counter = counter("prompt_tokens", "Prompt tokens processed.").labels(*ids)
        self.generation_counter = counter("generation_tokens", "Tokens generated.").labels(*ids)
        success = Counter(
            "strata:request_success",
            "Finished choices by finish reason.",
            (*VLLM_LABELS, "finished_reason"),
            registry=registry,
        )
        self.success = {reason: success.labels(*ids, reason) for reason in FINISH_REASONS}
        token_buckets = one_two_five(max_model_len)
        self.request_prompt_tokens = histogram(
            "request_prompt_tokens", "Prompt tokens per request.", token_buckets
        ).labels(*ids)
        self.request_generation_tokens = histogram(
            "request_generation_tokens", "Generated tokens per request.", token_buckets
        ).labels(*ids)
        self.params_n = histogram("request_params_n", "The n request parameter.", N_BUCKETS).labels(*ids)
        self.params_max_tokens = histogram(
            "request_params_max_tokens", "The max_tokens request parameter.", token_buckets
        ).labels(*ids)
        # timings
        self.ttft = histogram(
            "time_to_first_token_seconds", "From arrival to a choice's first token.", TTFT_BUCKETS
        ).labels(*ids)
        self.inter_token = histogram(
            "inter_token_latency_seconds", "Between a choice's tokens.", TOKEN_GAP_BUCKETS
        ).labels(*ids)
        self.e2e = histogram(
            "e2e_request_latency_seconds", "From arrival to a reply's last token.", REQUEST_LATENCY_BUCKETS
        ).labels(*ids)
        self.queue_time = histogram(
            "request_queue_time_seconds", "From arrival to an engine slot.", REQUEST_LATENCY_BUCKETS
        ).labels(*ids)
        self.inference_time = histogram(
            "request_inference_time_seconds",
            "From an engine slot to the last token.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(*ids)
        self.prefill_time = histogram(
            "request_prefill_time_seconds", "From an engine slot to the first token.", REQUEST_LATENCY_BUCKETS
        ).labels(*ids)
        self.decode_time = histogram(
            "request_decode_time_seconds", "From the first token to the last.", REQUEST_LATENCY_BUCKETS
        ).labels(*ids)
        # Strata's own series
        self.kernels_info = Gauge(
            "strata_kernels_info",
            "The kernels the engine runs (1 for the active backend).",
            ("model_name", "kernels", "invariant"),
            registry=registry,
        )
        self.requests = Counter(
            "strata_requests",
            "HTTP requests by route and status.",
            ("model_name", "route", "status"),
            registry=registry,
        )
        self.request_duration = Histogram(
            "strata_request_duration_seconds",
            "Time from request to last response byte.",
            ("model_name", "route"),
            registry=registry,
            buckets=HTTP_LATENCY_BUCKETS,
        )
        self.engine_gauges: dict[str, Gauge] = {}
        self.prompt_tokens = 0  # totals for the hit rate
        self.cached_tokens = 0

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """One HTTP request, by route template and status (the middleware calls it)."""
        self.requests.labels(self.model_name, route, str(status)).inc()
        self.request_duration.labels(self.model_name, route).observe(seconds)

    def add_tokens(self, prompt: int, generated: int, cached: int = 0) -> None:
        """A reply's usage: the token counters and the prefix cache's queries and hits."""
        self.prompt_tokens += prompt
        self.cached_tokens += cached
        self.prompt_counter.inc(prompt)
        self.generation_counter.inc(generated)
        self.cache_queries.inc(prompt)
        self.cache_hits.inc(cached)

    def observe_reply(
        self,
        prompt_tokens: int,
        generation_tokens: int,
        n: int,
        max_tokens: int | None,
        finish_reasons: Iterable[str | None],
    ) -> None:
        """A generation reply's shape: its token counts, its parameters, each choice's finish."""
        self.request_prompt_tokens.observe(prompt_tokens)
        self.request_generation_tokens.observe(generation_tokens)
        self.params_n.observe(n)
        if max_tokens is not None:
            self.params_max_tokens.observe(max_tokens)
        for reason in finish_reasons:
            self.success[reason if reason in self.success else "abort"].inc()

    def render(
        self,
        engine_stats: Mapping[str, object],
        kernels: str,
        invariant: bool,
        server: Mapping[str, float] | None = None,
    ) -> str:
        """The exposition text, with the gauges read from `engine_stats` and `server` now."""
        self._set_gauges(engine_stats, server or {})
        self.kernels_info.clear()
        self.kernels_info.labels(self.model_name, kernels, str(invariant).lower()).set(1)
        return generate_latest(self.registry).decode()

    def _set_gauges(self, stats: Mapping[str, object], server: Mapping[str, float]) -> None:
        def number(key: str) -> float:
            value = stats.get(key, 0)
            return float(value) if isinstance(value, (int, float)) else 0.0

        total, free = number("kv_blocks_total"), number("kv_blocks_free")
        usage = (total - free) / total if total else 0.0
        self.running.set(number("running"))
        self.waiting.set(number("waiting"))
        self.kv_usage.set(usage)
        self.kv_usage_old.set(usage)
        self.kv_total.set(total)
        self.kv_used.set(total - free)
        self.kv_free.set(free)
        self.hit_rate.set(self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0)
        self.admitted.set(server.get("admitted", 0))
        self.max_queue.set(server.get("max_queue", -1))
        self.draining.set(server.get("draining", 0))
        for key, value in sorted(stats.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if key not in self.engine_gauges:
                    self.engine_gauges[key] = Gauge(
                        f"strata_engine_{key}",
                        f"Engine scheduler state: {key}.",
                        ("model_name",),
                        registry=self.registry,
                    )
                self.engine_gauges[key].labels(self.model_name).set(value)


def metrics_middleware(metrics: Metrics) -> Callable[[ASGIApp], ASGIApp]:
    """ASGI middleware factory timing every routed HTTP request, labelled by route template."""

    def factory(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            status = 500
            route = scope.get("path_template") or UNROUTED  # never the raw path: bounded labels

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
