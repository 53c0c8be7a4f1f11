"""`LLMEngine` on a worker thread, awaited from asyncio: the engine the server talks to.

Each request's results travel on its own `RequestStream`; the worker writes, the event loop
is woken through one `Wakeup` per group of requests and reads. A group (`Choices`) is the
`n` choices (or several prompts) of one HTTP request: one loop reads them all, so `n > 1`
needs no extra task or queue, and closing the group aborts every request in it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from strata_engine.api import DEFAULT_CHAT, ChatOptions, EngineError, EngineEvent, Request, is_out_of_memory
from strata_engine.engine import LLMEngine, out_of_memory
from strata_engine.output import RequestStream
from strata_engine.text.chat_template import ChatTemplate
from strata_engine.text.tokenizer import Tokenizer

log = logging.getLogger("strata_engine")

IDLE_WAIT_S = 0.05


class Wakeup:
    """Wakes one event loop from the engine thread (callable from any thread)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def __call__(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # the loop is closed; its requests are already aborted
            pass

    async def wait(self) -> None:
        await self._event.wait()
        self._event.clear()


class Choices:
    """The streams of one HTTP request's choices, read as (choice index, event) in arrival order.

    An error in one stream ends them all (the reply is one error); leaving early, by
    `aclose` or cancellation, aborts every request still running.
    """

    def __init__(self, streams: Sequence[RequestStream], wakeup: Wakeup) -> None:
        self.streams = list(streams)
        self._wakeup = wakeup

    def __aiter__(self) -> AsyncIterator[tuple[int, EngineEvent]]:
        return self._events()

    async def _events(self) -> AsyncIterator[tuple[int, EngineEvent]]:
        try:
            while True:
                took = False
                for index, stream in enumerate(self.streams):
                    for event in stream.take():
                        took = True
                        yield index, event
                if all(stream.drained for stream in self.streams):
                    return
                if not took:  # a stream that failed after these events raises on the next take
                    await self._wakeup.wait()
        finally:
            self.abort()

    def abort(self) -> None:
        for stream in self.streams:
            stream.abort()

    @property
    def scheduled_at(self) -> float | None:
        """When the first of these requests got a slot (`time.monotonic()`), None while all queue."""
        times = [s.scheduled_at for s in self.streams if s.scheduled_at is not None]
        return min(times) if times else None


class AsyncEngine:
    """`LLMEngine` on a worker thread; `submit` checks and queues, the caller awaits the streams."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        # model facts (see protocol.EngineClient): fixed once the model is loaded
        self.model_name, self.ctx_size, self.vocab_size = (
            engine.model_name,
            engine.ctx_size,
            engine.vocab_size,
        )
        self.tokenizer: Tokenizer = engine.tokenizer
        self.chat_template: ChatTemplate | None = engine.chat_template
        self.kernels, self.invariant, self.load_seconds = (
            engine.kernels,
            engine.invariant,
            engine.load_seconds,
        )
        self.kv_cache_dtype: str = engine.kv_cache_dtype
        self._inbox: queue.SimpleQueue[tuple[Request, RequestStream]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="strata-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_path(cls, path: str | Path, **kwargs: Any) -> AsyncEngine:
        return cls(LLMEngine(path, **kwargs))

    def stats(self) -> dict[str, int]:
        return self.engine.stats()

    @property
    def failure(self) -> str | None:
        """Why the engine can serve nothing any more (a tensor-parallel rank died); None while healthy."""
        return None if self.engine.failure is None else str(self.engine.failure)

    def render_chat(self, messages: list[dict[str, Any]], options: ChatOptions = DEFAULT_CHAT) -> list[int]:
        return self.engine.render_chat(messages, options)

    # -- requests --------------------------------------------------------------------
    def check(self, requests: Sequence[Request]) -> None:
        """Refuse what can never run (`RequestError`), queueing nothing; callable from any
        thread, so a server does this work (ids, grammars) off its event loop."""
        for request in requests:
            self.engine.check(request)

    def submit(self, requests: Sequence[Request], *, checked: bool = False) -> Choices:
        """Check every request (all or none are queued), queue them, return their streams.

        Raises `RequestError` before anything runs, so a refusal is never a failure after
        a reply has started. `checked`: `check` already passed (only the engine's health is
        looked at again). Must be called on the event loop that will read the streams.
        """
        if checked:
            self.engine.check_alive()
        else:
            self.check(requests)
        wakeup = Wakeup()
        streams = [RequestStream(wakeup, self._wake.set) for _ in requests]
        for request, stream in zip(requests, streams, strict=True):
            self._inbox.put((request, stream))
        self._wake.set()
        return Choices(streams, wakeup)

    async def generate(self, request: Request) -> AsyncIterator[EngineEvent]:
        """One request's events; leaving early (closing, cancelling) aborts it."""
        choices = self.submit([request])
        try:
            async for _, event in choices:
                yield event
        finally:
            choices.abort()

    def _loop(self) -> None:
        while not self._stopped:
            while True:
                try:
                    request, stream = self._inbox.get_nowait()
                except queue.Empty:
                    break
                self.engine.admit(
                    request, stream
                )  # checked by `submit`; an aborted one ends at the next step
            if not self.engine.has_work():
                self.engine.heartbeat()  # tensor parallelism: notice a lost rank while idle
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()
                continue
            try:
                self.engine.step()
            except Exception as exc:  # a bug must not wedge the engine: fail what is in flight, go on
                log.exception("engine step failed")
                oom = is_out_of_memory(exc)  # a passing fault (503), not a bug (500)
                self.engine.fail_all(
                    out_of_memory(exc) if oom else EngineError(f"internal engine error: {exc}")
                )

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():  # the other ranks are released only when no step runs
            self.engine.close()
