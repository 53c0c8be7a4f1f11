"""The GGUF's chat template (`tokenizer.chat_template`), rendered in a jinja2 sandbox.

Templates come from model files, i.e. from strangers: they run in an immutable sandbox, and
every way one can fail (bad syntax, `raise_exception`, undefined names, sandbox violations,
malformed messages) becomes a `ChatTemplateError` the server can report as a 4xx.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any, NoReturn, Protocol

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .api import DEFAULT_CHAT, ChatOptions, ErrorCode, RequestError


class ChatTemplateError(RequestError):
    """The chat template could not render these messages."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message, param, ErrorCode.CHAT_TEMPLATE)


def _raise_exception(message: str) -> NoReturn:
    """Templates call this to reject a conversation (e.g. roles out of order)."""
    raise ChatTemplateError(f"chat template rejected the messages: {message}", "messages")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kw: Any) -> str:
    # Like HF's: no HTML escaping (jinja's built-in would turn "<" into "\u003c").
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kw)


class _Sandbox(ImmutableSandboxedEnvironment):
    """Fails on any unsafe attribute (jinja's default would quietly render it as "")."""

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        raise SecurityError(
            f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is not allowed"
        )


def _environment() -> _Sandbox:
    # Lenient undefined names, as in Hugging Face: templates test optional variables
    # (`{% if tools %}`); using an undefined value in an operation still fails.
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


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
    """A compiled chat template; `render` turns messages into the prompt text."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        # A template that does not compile must not stop the model from loading: plain
        # completions still work, and each chat request gets this error instead.
        self._template: jinja2.Template | None = None
        self.compile_error: str | None = None
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateError as e:
            self.compile_error = f"the model's chat template does not compile: {e}"

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text for `messages`; `extra` become template variables (e.g. tools)."""
        if self._template is None:
            raise ChatTemplateError(self.compile_error or "no chat template")
        context = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
            "messages": _normalise_messages(messages),
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            return self._template.render(**context)
        except ChatTemplateError:
            raise
        except SecurityError as e:
            raise ChatTemplateError(f"chat template did something unsafe: {e}") from e
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"chat template failed: {e}") from e
        except Exception as e:  # the template is foreign code: any failure is its error
            raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from e


TEMPLATE_CACHE = 16  # compiled per-request templates kept (a client reuses one template)


@lru_cache(maxsize=TEMPLATE_CACHE)
def compiled(source: str, bos_token: str = "", eos_token: str = "") -> ChatTemplate:
    """A template source compiled once in the same sandbox (per-request templates repeat)."""
    return ChatTemplate(source, bos_token, eos_token)


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
