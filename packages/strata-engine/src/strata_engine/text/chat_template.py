"""The GGUF's chat template (`tokenizer.chat_template`): messages rendered into prompt ids.

Templates come from model files and, with `--trust-request-chat-template`, from requests:
from strangers. They are compiled and rendered in a jinja2 sandbox (template_sandbox.py)
within per-render bounds (template_budget.py), and every way one can fail (bad syntax,
`raise_exception`, undefined names, sandbox violations, malformed messages, a bound passed)
becomes a `ChatTemplateError` the server can report as a 4xx.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Generator, Mapping
from typing import Any, Protocol

import jinja2
from jinja2.exceptions import SecurityError

from strata_engine.api import DEFAULT_CHAT, ChatOptions
from strata_engine.text.template_budget import (
    BUDGET,
    CACHE_BYTES,
    MAX_CHARS,
    TEMPLATE_CACHE,
    Budget,
    ChatTemplateError,
)
from strata_engine.text.template_sandbox import Compiled, compile_template

__all__ = [
    "CACHE",
    "ChatTemplate",
    "ChatTemplateError",
    "PromptTokenizer",
    "TemplateCache",
    "compiled",
    "render_ids",
]


# -- caching -------------------------------------------------------------------------------


class TemplateCache:
    """Compiled request templates, least recently used first, within CACHE_BYTES."""

    def __init__(self, max_bytes: int = CACHE_BYTES, max_entries: int = TEMPLATE_CACHE) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        self._entries: OrderedDict[str, Compiled] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, source: str) -> Compiled:
        with self._lock:
            if (hit := self._entries.get(source)) is not None:
                self._entries.move_to_end(source)
                return hit
        result = compile_template(source, "`chat_template`")  # outside the lock: others keep rendering
        with self._lock:
            if source not in self._entries and result.size <= self.max_bytes:
                self._entries[source] = result
                self.bytes += result.size
                while self.bytes > self.max_bytes or len(self._entries) > self.max_entries:
                    _, old = self._entries.popitem(last=False)
                    self.bytes -= old.size
        return result

    def __len__(self) -> int:
        return len(self._entries)


CACHE = TemplateCache()


# -- the template ------------------------------------------------------------------------


def _content_text(content: Any, index: int) -> str:
    """A message's content as text: a string, or a list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (
                isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
            ):
                raise ChatTemplateError(
                    f"messages[{index}].content: only text parts are supported "
                    '({"type": "text", "text": "..."})',
                    "messages",
                )
            texts.append(part["text"])
        return "".join(texts)
    raise ChatTemplateError(f"messages[{index}].content must be a string or a list of text parts", "messages")


def _normalise_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise ChatTemplateError("messages must be a non-empty list", "messages")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ChatTemplateError(f"messages[{i}] must be an object", "messages")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ChatTemplateError(f"messages[{i}].role must be a non-empty string", "messages")
        if "content" not in message:
            raise ChatTemplateError(f"messages[{i}] has no content", "messages")
        out.append({**message, "content": _content_text(message["content"], i)})
    return out


class ChatTemplate:
    """A compiled chat template; `render` turns messages into the prompt text.

    `request`: the template came with a request (vLLM's `chat_template`): it is compiled
    through the shared cache, and its failures name `chat_template`.
    """

    def __init__(
        self, source: str, bos_token: str = "", eos_token: str = "", *, request: bool = False
    ) -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.param = "chat_template" if request else None
        # A template that does not compile must not stop the model from loading: plain
        # completions still work, and each chat request gets this error instead.
        result = CACHE.get(source) if request else compile_template(source, "the model's chat template")
        self._template = result.template
        self.compile_error = result.error

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text for `messages`; `extra` become template variables (e.g. tools)."""
        if self._template is None:
            raise ChatTemplateError(self.compile_error or "no chat template", self.param)
        context = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
            "messages": _normalise_messages(messages),
            "add_generation_prompt": add_generation_prompt,
        }
        budget = Budget.for_render(self.param)
        token = BUDGET.set(budget)
        pieces: Generator[str, None, None] = self._template.generate(**context)  # type: ignore[assignment]
        try:
            return self._collect(pieces, budget)
        except ChatTemplateError:
            raise
        except SecurityError as e:
            raise ChatTemplateError(f"chat template did something unsafe: {e}", self.param) from e
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"chat template failed: {e}", self.param) from e
        except Exception as e:  # the template is foreign code: any failure is its error
            raise ChatTemplateError(
                f"chat template failed: {type(e).__name__}: {str(e)[:500]}", self.param
            ) from e
        finally:
            pieces.close()
            BUDGET.reset(token)

    @staticmethod
    def _collect(pieces: Generator[str, None, None], budget: Budget) -> str:
        """The rendered text, refused once past MAX_CHARS or the deadline."""
        out: list[str] = []
        total = 0
        for piece in pieces:
            total += len(piece)
            if total > MAX_CHARS:
                raise ChatTemplateError(
                    f"chat template's output is longer than {MAX_CHARS:,} characters", budget.param
                )
            if time.monotonic() > budget.deadline:
                budget.tick()  # raises with the deadline's message
            out.append(piece)
        return "".join(out)


def compiled(source: str, bos_token: str = "", eos_token: str = "") -> ChatTemplate:
    """A request's template, compiled once in the same sandbox (per-request templates repeat)."""
    return ChatTemplate(source, bos_token, eos_token, request=True)


class PromptTokenizer(Protocol):
    """What rendering needs of a tokenizer (the engine's, or a test's stand-in)."""

    bos_id: int | None
    add_bos: bool

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...


def render_ids(
    template: ChatTemplate | None,
    tokenizer: PromptTokenizer,
    messages: list[dict[str, Any]],
    options: ChatOptions = DEFAULT_CHAT,
) -> list[int]:
    """Messages -> prompt ids: the one rendering used by chat, `/tokenize` and the CLI.

    The text is encoded with special tokens parsed and no automatic BOS (templates usually
    write their own); one BOS is added when the model wants it (`add_bos`) or the caller
    asks (`options.add_special`) and the text does not already start with it.
    The caller resolves `options.template` (a per-request source) into `template`.
    """
    if template is None:
        raise ChatTemplateError(
            "This model has no chat template; use /v1/completions with a rendered prompt.", "messages"
        )
    text = template.render(
        messages, add_generation_prompt=options.add_generation_prompt, **options.template_kwargs
    )
    ids = tokenizer.encode(text, add_special=False, parse_special=True)
    bos = tokenizer.bos_id
    if (tokenizer.add_bos or options.add_special) and bos is not None and (not ids or ids[0] != bos):
        ids.insert(0, bos)
    return ids
