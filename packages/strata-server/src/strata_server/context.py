"""What every route needs: the engine, the limits, the served name, and the metrics."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from strata_engine.api import ChatOptions, Request, RequestError
from strata_engine.protocol import EngineClient, EngineTokenizer
from strata_server.admission import Admission
from strata_server.checks import Limits
from strata_server.errors import engine_refusal
from strata_server.metrics import Metrics
from strata_server.protocol import ChatMessage
from strata_server.provenance import Provenance
from strata_server.render import message_dicts
from strata_server.settings import ServerSettings
from strata_server.shutdown import Drain
from strata_server.tracked import TrackedStream

_request_counter = itertools.count(1)


@dataclass
class ServerContext:
    engine: EngineClient  # strata_engine.AsyncEngine, or a test's stand-in
    settings: ServerSettings
    drain: Drain = field(default_factory=Drain)
    provenance: Provenance | None = None  # None: the engine's kernels only (no model file known)
    admission: Admission = field(init=False)
    metrics: Metrics = field(init=False)

    def __post_init__(self) -> None:
        if self.provenance is None:
            self.provenance = Provenance(kernels=self.engine.kernels, invariant=self.engine.invariant)
        self.metrics = Metrics(self.served_name, self.engine.ctx_size)
        self.admission = Admission(slots=self.settings.slots, max_queue=self.settings.max_queue)

    @property
    def system_fingerprint(self) -> str:
        """What every completion, chat and candidate reply carries (see provenance.py)."""
        assert self.provenance is not None  # set in __post_init__
        return self.provenance.system_fingerprint

    @property
    def served_name(self) -> str:
        return self.settings.served_model_name or self.engine.model_name

    @property
    def tokenizer(self) -> EngineTokenizer:
        return self.engine.tokenizer

    def render_chat(self, messages: list[ChatMessage], options: ChatOptions) -> list[int]:
        """Messages -> ids by the engine's one rendering; its refusals become 400s on `messages`."""
        try:
            return self.engine.render_chat(message_dicts(messages), options)
        except RequestError as exc:
            raise engine_refusal(exc, "messages") from None

    def check(
        self, requests: Sequence[Request], prompt_param: str, structured_param: str = "response_format"
    ) -> None:
        """Everything that must hold before queueing, on the caller's (worker) thread.

        The request's sequences must fit the admission bound at all (a request larger than
        --parallel + --max-queue could never run: 400 on `n`), and the engine's checks must
        pass (refusals become 400s naming the wire fields).
        """
        self.admission.check_size(len(requests))
        try:
            self.engine.check(requests)
        except RequestError as exc:
            raise engine_refusal(exc, prompt_param, structured_param) from None

    def submit(
        self,
        requests: Sequence[Request],
        prompt_param: str,
        started: float | None = None,
        *,
        checked: bool = False,
    ) -> TrackedStream:
        """Queue a reply's requests within the admission bound and the request's deadline.

        A full queue is a 429, an engine refusal a 400 naming the wire field; both before
        anything runs. `started` (monotonic) is when the request arrived (default: now);
        `checked` says `check` already ran (off the event loop), so the engine skips its checks.
        """
        ticket = self.admission.enter(len(requests))
        try:
            events = self.engine.submit(requests, checked=checked)
        except RequestError as exc:
            ticket.release()
            raise engine_refusal(exc, prompt_param) from None
        except BaseException:
            ticket.release()
            raise
        timeout = self.settings.request_timeout
        arrived = time.monotonic() if started is None else started
        deadline = None if timeout is None else arrived + timeout
        return TrackedStream(events, ticket, self.metrics, deadline, timeout, arrived)

    @property
    def limits(self) -> Limits:
        return Limits(
            vocab_size=self.engine.vocab_size,
            ctx_size=self.engine.ctx_size,
            max_logprobs=self.settings.max_logprobs,
            max_n=self.settings.max_n,
            max_tokens=self.settings.max_tokens_limit,
            max_prompt_tokens=self.settings.max_prompt_tokens,
            request=self.settings.limits,
        )


def new_request_id(prefix: str) -> str:
    """A unique, readable id per reply (`cmpl-…`, `chatcmpl-…`)."""
    return f"{prefix}-{int(time.time() * 1000):x}{next(_request_counter):06d}"
