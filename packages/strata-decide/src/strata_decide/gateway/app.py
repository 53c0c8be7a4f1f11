"""The Litestar app: ``POST /v1/systemone``, ``GET /v1/models``, ``GET /health``; the
playground page at ``/`` (`page.py`) and the server's routes it needs under ``/upstream/``
(`passthrough.py`).

Each question of a request is decided on its own (see ``strata_decide.decider``), all of
them concurrently; the state's prompt prefix is shared through the upstream's prefix cache.
``model`` may be the served model's name or an alias (``jev``, ``jev-latest``, any
``jev-*``); the response names the served model.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.exceptions import HTTPException
from pydantic import ValidationError

from strata_client import APIConnectionError, APIStatusError, AsyncStrataClient

from ..answers import answer_json
from ..decider import DecideOptions, Decider, Decision
from ..errors import ContextOverflowError, LabelError, UpstreamError
from ..labels import LabelBook
from ..operations import accepted, upstream_key
from ..questions import Content, Question
from ..slots import DEFAULT_MAX_READS, FairSlots, caller
from .browsers import allowed_hosts_middleware, require_json
from .disconnect import CallerLeft, until_disconnect
from .encoding import MAX_BODY_BYTES, decode_body
from .errors import Refusal, json_response, refusal_response, validation_response
from .page import page_routes
from .passthrough import Passthrough
from .request_id import forward_request_ids, request_id_middleware
from .schema import SystemOneRequest, parse_request, validation_detail
from .trace import fingerprint_of, parity_of, trace_of

ALIASES = ("jev", "jev-latest")
CLIENT_CLOSED_REQUEST = 499  # nginx's code: the caller left before its answer
ALIAS_PREFIX = "jev-"


@dataclass(frozen=True)
class GatewayConfig:
    """Where the upstream is, how to reach it, and how decisions are made."""

    upstream: str = "http://127.0.0.1:8000"
    api_key: str | None = None
    api_keys: tuple[str, ...] = ()  # more accepted keys (see strata_decide.operations)
    upstream_api_key: str | None = None
    upstream_timeout: float = 120.0
    decide: DecideOptions = field(default_factory=DecideOptions)
    allowed_hosts: tuple[str, ...] = ()  # Host names answered (empty: any; see browsers.py)
    max_reads: int = DEFAULT_MAX_READS  # upstream reads one request may ask for (questions x rotations)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every accepted API key (empty: no key required)."""
        return tuple(dict.fromkeys(k for k in (self.api_key, *self.api_keys) if k))


class Gateway:
    """Holds the upstream client and the decider; resolves model names."""

    def __init__(self, config: GatewayConfig):
        self.config = config
        self.client: AsyncStrataClient | None = None
        self.labels: LabelBook | None = None
        self._deciders: dict[tuple[str, bool], Decider] = {}
        # one key for every upstream call: the client's and the passthrough's (the environment's
        # when none is configured, as strata_client itself would read it)
        self.upstream_key = upstream_key(config.upstream_api_key)
        self.passthrough = Passthrough(config.upstream, self.upstream_key, config.upstream_timeout)
        self._served: list[Any] | None = None
        # every decider's reads share these slots, handed out to requests in turn (slots.py)
        self.slots = FairSlots(config.decide.max_concurrent_reads)

    async def start(self) -> None:
        self.client = AsyncStrataClient(
            base_url=self.config.upstream,
            api_key=self.upstream_key,
            timeout=self.config.upstream_timeout,
            max_retries=1,
        )
        forward_request_ids(self.client)
        self.labels = LabelBook(self.client)
        await self.passthrough.start()

    @property
    def upstream(self) -> AsyncStrataClient:
        """The upstream client (the app starts the gateway before serving any request)."""
        if self.client is None:
            raise RuntimeError("the gateway is not started")
        return self.client

    def decider(self, model: str, rotations: bool | None = None) -> Decider:
        """The decider for a served model (one per model and rotations mode: its own read
        slots, shared labels); ``rotations`` None: the gateway's own setting."""
        options = self.config.decide
        key = (model, options.rotations if rotations is None else rotations)
        if key not in self._deciders:
            options = replace(options, rotations=key[1])
            self._deciders[key] = Decider(self.upstream, model, options, self.labels, self.slots)
        return self._deciders[key]

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self.passthrough.stop()

    async def served_models(self) -> list[Any]:
        """The upstream's models (fetched once; an upstream failure is a 502)."""
        if self._served is None:
            try:
                served = (await self.upstream.models.list()).data
            except (APIStatusError, APIConnectionError) as error:
                raise Refusal(502, "upstream_error", f"upstream model list failed: {error}") from error
            if not served:
                raise Refusal(502, "upstream_error", "the upstream serves no model")
            self._served = served
        return self._served

    async def resolve(self, name: str) -> str:
        """The served model a request's ``model`` names; 404 for a name that is neither."""
        served = [model.id for model in await self.served_models()]
        if name in served:
            return name
        if name in ALIASES or name.startswith(ALIAS_PREFIX):
            return served[0]
        raise Refusal(
            404,
            "model_not_found",
            f"model {name!r} is not served; try {served[0]!r} or 'jev-latest'",
        )

    def check_auth(self, request: Request) -> None:
        """Bearer auth when API keys are set; with none set, any Authorization is ignored."""
        keys = self.config.keys
        if not keys:
            return
        if not accepted(request.headers.get("authorization", ""), keys):
            raise Refusal(
                401,
                "authentication_error",
                "missing or invalid API key (Authorization: Bearer <key>)",
            )

    async def system_one(self, request: Request) -> Response:
        self.check_auth(request)
        require_json(request)
        body = decode_body(await request.body(), request.headers.get("content-encoding"))
        try:
            parsed = parse_request(body)
        except ValidationError as error:
            return validation_response(validation_detail(error))
        model = await self.resolve(parsed.model)
        ids = list(parsed.questions)
        asked = [parsed.questions[i].to_question() for i in ids]
        decider = self.decider(model, parsed.x_strata.rotations)
        reads = sum(decider.reads_for(question) for question in asked)
        if reads > self.config.max_reads:
            raise Refusal(
                400,
                "too_many_reads",
                f"this request needs {reads} reads (questions x rotations); the gateway allows "
                f"{self.config.max_reads} per request (--max-reads)",
            )
        caller.set(object())  # this request's turn at the read slots (its tasks inherit it)
        try:
            return await until_disconnect(request.receive, self._answer(parsed, model, ids, asked, decider))
        except CallerLeft:
            return Response(content=b"", status_code=CLIENT_CLOSED_REQUEST)

    async def _answer(
        self, parsed: SystemOneRequest, model: str, ids: list[str], asked: list[Question], decider: Decider
    ) -> Response:
        """Decide every question of a checked request and build its reply."""
        decisions = await decide_all(decider, parsed.state, asked)
        answers = {qid: answer_json(decision) for qid, decision in zip(ids, decisions, strict=True)}
        check_finite(answers)
        usage = {
            "input_tokens": sum(d.prompt_tokens for d in decisions),
            "output_tokens": sum(d.completion_tokens for d in decisions),
        }
        reply: dict[str, Any] = {"model": model, "answers": answers, "usage": usage}
        if parsed.x_strata.trace or parsed.x_strata.parity:
            await self.inspect(parsed, model, decider, dict(zip(ids, decisions, strict=True)), reply)
        return json_response(reply)

    async def inspect(
        self,
        parsed: SystemOneRequest,
        model: str,
        decider: Decider,
        decisions: dict[str, Decision],
        reply: dict[str, Any],
    ) -> None:
        """The extensions a request asked for, added to its answers (see ``trace.py``)."""
        with library_refusals():
            for qid, decision in decisions.items():
                answer = reply["answers"][qid]
                if parsed.x_strata.trace:
                    answer["x_trace"] = await trace_of(self.upstream, decider, parsed.state, decision)
                if parsed.x_strata.parity:
                    wire = parsed.questions[qid].model_dump()
                    labels = decider.labels
                    answer["x_parity"] = await parity_of(
                        self.upstream, labels, decider, model, parsed.state, decision, wire
                    )
        if parsed.x_strata.trace:
            reply["x_system_fingerprint"] = fingerprint_of(list(decisions.values()))
        check_finite(reply["answers"])

    async def models(self, request: Request) -> Response:
        self.check_auth(request)
        served = await self.served_models()
        names = [model.id for model in served] + list(ALIASES)
        released = datetime.fromtimestamp(served[0].created or 0, UTC).date().isoformat()
        return json_response(
            {
                "object": "list",
                "data": [{"id": name, "object": "model", "owned_by": "strata"} for name in names],
                "models": [
                    {
                        "name": name,
                        "description": f"{served[0].id} served by Strata",
                        "release_date": released,
                    }
                    for name in names
                ],
            }
        )


async def decide_all(decider: Decider, state: Content, questions: list[Question]) -> list[Decision]:
    """Every question decided on its own, concurrently; library errors become refusals."""
    with library_refusals():
        return await asyncio.gather(*(decider.decide(state, q) for q in questions))


@contextmanager
def library_refusals() -> Iterator[None]:
    """The decide library's errors as the gateway's refusals."""
    try:
        yield
    except ContextOverflowError as error:
        raise Refusal(400, "tokens_exceeded", str(error)) from error
    except LabelError as error:
        raise Refusal(400, "unsupported_options", str(error)) from error
    except UpstreamError as error:
        raise Refusal(502, "upstream_error", str(error)) from error
    except ValueError as error:  # non-finite upstream values
        raise Refusal(502, "upstream_error", f"upstream values unusable: {error}") from error


def check_finite(value: Any) -> None:
    """A response must never carry NaN or inf; if the upstream led us there, that is a 502."""
    if isinstance(value, float) and not math.isfinite(value):
        raise Refusal(502, "upstream_error", "upstream logprobs gave a non-finite answer")
    if isinstance(value, dict):
        for item in value.values():
            check_finite(item)


def _http_exception(_: Request, error: HTTPException) -> Response:
    """Litestar's own refusals (unknown route, wrong method, body too large) in the gateway shape."""
    error_type = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
        error.status_code, "bad_request"
    )
    return refusal_response(Refusal(error.status_code, error_type, str(error.detail)))


def _refusal(_: Request, error: Refusal) -> Response:
    return refusal_response(error)


def _unexpected(_: Request, error: Exception) -> Response:
    return refusal_response(Refusal(500, "unknown", f"internal error: {type(error).__name__}: {error}"))


def create_app(config: GatewayConfig) -> Litestar:
    """The gateway app for ``config`` (the upstream client opens on startup)."""
    gateway = Gateway(config)

    @post("/v1/systemone", status_code=200)
    async def system_one(request: Request) -> Response:
        return await gateway.system_one(request)

    @get("/v1/models")
    async def models(request: Request) -> Response:
        return await gateway.models(request)

    @get("/health")
    async def health() -> Response:
        return json_response({"status": "ok"})

    return Litestar(
        route_handlers=[
            system_one,
            models,
            health,
            *gateway.passthrough.routes(gateway.check_auth),
            *page_routes(),
        ],
        on_startup=[gateway.start],
        on_shutdown=[gateway.stop],
        exception_handlers={
            Refusal: _refusal,
            HTTPException: _http_exception,
            Exception: _unexpected,
        },
        request_max_body_size=MAX_BODY_BYTES,
        middleware=[allowed_hosts_middleware(config.allowed_hosts), request_id_middleware()],
        openapi_config=None,
        logging_config=None,  # uvicorn logs requests; upstream calls stay quiet
    )
