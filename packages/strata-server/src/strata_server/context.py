"""What every route needs: the engine, the limits, the served name, and the metrics."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from strata_engine.api import ChatOptions, Request, RequestError
from strata_engine.protocol import ChoiceStream, EngineClient, EngineTokenizer
from strata_server.checks import Limits
from strata_server.errors import engine_refusal
from strata_server.metrics import Metrics
from strata_server.protocol import ChatMessage
from strata_server.render import message_dicts

_request_counter = itertools.count(1)


@dataclass(frozen=True)
class ServerSettings:
    """Server flags that are not engine flags."""

    served_model_name: str | None = None  # None: the engine's model name
    max_logprobs: int = 20
    api_key: str | None = None


@dataclass
class ServerContext:
    engine: EngineClient  # strata_engine.AsyncEngine, or a test's stand-in
    settings: ServerSettings
    metrics: Metrics = field(default_factory=Metrics)

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

    def submit(self, requests: Sequence[Request], prompt_param: str) -> ChoiceStream:
        """Queue a reply's requests; an engine refusal is a 400 naming the wire field."""
        try:
            return self.engine.submit(requests)
        except RequestError as exc:
            raise engine_refusal(exc, prompt_param) from None

    @property
    def limits(self) -> Limits:
        return Limits(
            vocab_size=self.engine.vocab_size,
            ctx_size=self.engine.ctx_size,
            max_logprobs=self.settings.max_logprobs,
        )


def new_request_id(prefix: str) -> str:
    """A unique, readable id per reply (`cmpl-…`, `chatcmpl-…`)."""
    return f"{prefix}-{int(time.time() * 1000):x}{next(_request_counter):06d}"
