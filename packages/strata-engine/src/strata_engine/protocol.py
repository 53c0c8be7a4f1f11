"""The contract between a front end (the HTTP server) and an engine, as typing Protocols.

`AsyncEngine` satisfies `EngineClient`; so must any stand-in (the server's test fake). A
front end calls only what is written here: model facts, the tokenizer, chat rendering,
`submit`, and stats. Like vLLM's `EngineClient`, it is the one place to read what the
server may ask of the engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from strata_engine.api import ChatOptions, EngineEvent, Request


class Decoder(Protocol):
    """Incremental detokenizer: text released as soon as it is whole UTF-8."""

    def push(self, token_id: int) -> str: ...

    def flush(self) -> str: ...


class EngineTokenizer(Protocol):
    """What a front end reads of the model's tokenizer."""

    @property
    def bos_id(self) -> int | None: ...

    @property
    def eos_id(self) -> int | None: ...

    @property
    def pad_id(self) -> int | None: ...

    @property
    def add_bos(self) -> bool: ...

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str: ...

    def token_text(self, token_id: int) -> str: ...

    def token_bytes(self, token_id: int) -> bytes: ...

    def new_decoder(self) -> Decoder: ...


class ChatTemplateSource(Protocol):
    @property
    def source(self) -> str: ...


class ChoiceStream(Protocol):
    """The events of a group of submitted requests as (index, event), in arrival order."""

    def __aiter__(self) -> AsyncIterator[tuple[int, EngineEvent]]: ...

    def abort(self) -> None: ...

    @property
    def scheduled_at(self) -> float | None:
        """`time.monotonic()` when the first request got an engine slot; None while queued."""
        ...


@runtime_checkable
class EngineClient(Protocol):
    """Everything the server may call on an engine (`isinstance` checks that every member exists)."""

    @property
    def model_name(self) -> str: ...

    @property
    def ctx_size(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def kernels(self) -> str: ...

    @property
    def invariant(self) -> bool: ...

    @property
    def load_seconds(self) -> float: ...

    @property
    def tokenizer(self) -> EngineTokenizer: ...

    @property
    def chat_template(self) -> ChatTemplateSource | None: ...

    @property
    def failure(self) -> str | None:
        """Why the engine can serve nothing any more (a tensor-parallel rank died); None while healthy."""
        ...

    def stats(self) -> Mapping[str, int]: ...

    def render_chat(self, messages: list[dict[str, Any]], options: ChatOptions = ...) -> list[int]:
        """Messages -> prompt ids (template, then one BOS by the model's rule); raises `RequestError`."""
        ...

    def check(self, requests: Sequence[Request]) -> None:
        """Refuse what can never run (`RequestError`) without queueing; callable from any thread."""
        ...

    def submit(self, requests: Sequence[Request], *, checked: bool = False) -> ChoiceStream:
        """Check every request (`RequestError` before anything runs; skipped when `checked`:
        `check` already passed), queue them all, stream their events."""
        ...
