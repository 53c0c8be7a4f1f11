"""What every route needs: the engine, the limits, the served name, and the metrics."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from strata_server.checks import Limits
from strata_server.metrics import Metrics

_request_counter = itertools.count(1)


@dataclass(frozen=True)
class ServerSettings:
    """Server flags that are not engine flags."""

    served_model_name: str | None = None  # None: the engine's model name
    max_logprobs: int = 20
    api_key: str | None = None


@dataclass
class ServerContext:
    engine: Any  # strata_engine.AsyncEngine (duck-typed so the server imports only api.py)
    settings: ServerSettings
    metrics: Metrics = field(default_factory=Metrics)

    @property
    def served_name(self) -> str:
        return self.settings.served_model_name or self.engine.model_name

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

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
