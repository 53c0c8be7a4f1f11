"""The bounds of one chat-template render, and the checks that keep a result inside them.

A sandbox stops a template reaching Python's internals, not from asking for unbounded work,
so each render has bounds (`Budget`), checked where work can grow (template_sandbox.py routes
every operation that can grow through the checks here):

- arithmetic, filters, method calls and `~` refuse a result past `MAX_CHARS` characters (or
  `MAX_ITEMS` items, `MAX_INT_BITS` bits) before making it, and what they make is charged to a
  per-render `MAX_WORK_CHARS`;
- the rendered text is at most `MAX_CHARS` characters;
- loop iterations and calls together are at most `MAX_STEPS`, within `RENDER_SECONDS`.

Compiling has no deadline, so a template's source is at most `MAX_SOURCE_CHARS`; compiled
request templates are kept in a cache bounded by their compiled bytes (`CACHE_BYTES`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn

from jinja2.utils import Namespace

from strata_engine.api import ErrorCode, RequestError

MAX_SOURCE_CHARS = 64 * 1024  # a template's source: real ones are a few KB; compiling 64 KB takes ~1 s
MAX_CHARS = 2**22  # characters of the rendered text, and of any one string a template makes
MAX_ITEMS = 100_000  # items of any one list a template makes (jinja2's own range() bound)
MAX_INT_BITS = 2**14  # bits of any integer a template computes (str() refuses ~4,300 digits anyway)
MAX_WORK_CHARS = 16 * MAX_CHARS  # characters (and items) all of one render's operations make
MAX_STEPS = 1_000_000  # loop iterations and calls in one render
RENDER_SECONDS = 2.0  # one render's deadline
MAX_JSON_INDENT = 16  # `tojson(indent=...)`
CACHE_BYTES = 16 * 2**20  # compiled request templates kept (marshalled code + source)
TEMPLATE_CACHE = 16  # and at most this many of them


class ChatTemplateError(RequestError):
    """The chat template could not render these messages."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message, param, ErrorCode.CHAT_TEMPLATE)


# -- the bounds of one render -------------------------------------------------------------


@dataclass
class Budget:
    """What one render may still do; `param` is the field its refusals name."""

    param: str | None = None
    deadline: float = float("inf")
    steps: int = MAX_STEPS
    work: int = MAX_WORK_CHARS

    def tick(self) -> None:
        """One loop iteration or call."""
        self.steps -= 1
        if self.steps < 0:
            raise ChatTemplateError(
                f"chat template took more than {MAX_STEPS:,} loop iterations and calls", self.param
            )
        if time.monotonic() > self.deadline:
            raise ChatTemplateError(f"chat template took more than {RENDER_SECONDS} s to render", self.param)

    def charge(self, size: int, what: str, most: int = MAX_CHARS) -> None:
        """Refuse a value of `size` past `most`, then count it against the render's work."""
        if size > most:
            raise ChatTemplateError(
                f"chat template exceeded its size limit: {what} would be {size:,} long (at most {most:,})",
                self.param,
            )
        self.work -= size
        if self.work < 0:
            raise ChatTemplateError(
                f"chat template made more than {MAX_WORK_CHARS:,} characters in one render", self.param
            )

    @classmethod
    def for_render(cls, param: str | None) -> Budget:
        """A fresh render's budget, from the bounds as they are now (tests lower them)."""
        return cls(param, time.monotonic() + RENDER_SECONDS, MAX_STEPS, MAX_WORK_CHARS)


BUDGET: ContextVar[Budget | None] = ContextVar("strata_chat_template_budget", default=None)


def current_budget() -> Budget:
    """The current render's budget (outside a render, e.g. compiling, a fresh one)."""
    return BUDGET.get() or Budget()


def refuse(why: str) -> NoReturn:
    """A size bound passed: the template's error, naming the current render's field."""
    raise ChatTemplateError(f"chat template exceeded its size limit: {why}", current_budget().param)


def text_size(value: Any, limit: int = MAX_CHARS) -> int:
    """About len(str(value)), stopping once past `limit`: a list may hold one long string many
    times, so its text can be far larger than anything the template made."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        total += 2  # quotes, or a separator
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, bool) or item is None:
            pass
        elif isinstance(item, int):
            total += item.bit_length() // 3
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, Namespace):
            stack.append(object.__getattribute__(item, "_Namespace__attrs"))
        else:
            total += 16  # numbers, undefined values, macros: short texts
    return total


def result_size(value: Any) -> int:
    """What a result costs: its length when it has one (str, list, dict), else nothing."""
    try:
        return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 0
    except TypeError:
        return 0


# -- each result bounded before it is made -------------------------------------------------


def check_ints(args: Iterable[Any]) -> None:
    """No width, count or size argument past MAX_CHARS (center, indent, ljust, zfill, ...)."""
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > MAX_CHARS:
            refuse(f"an argument of {arg.bit_length()} bits")


_NUMBERS = re.compile(r"\d{8,}")


def check_format(fmt: str | bytes, values: Any) -> None:
    """`%` and `format`: widths and precisions within MAX_CHARS, the values' text too."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    if any(int(m.group()) > MAX_CHARS for m in _NUMBERS.finditer(text)):
        refuse("a format width past the limit")
    items = values if isinstance(values, tuple) else (values,)
    check_ints(items)
    current_budget().charge(len(text) + text_size(values), "a formatted string")


def check_replace(text: Any, old: Any, new: Any, count: Any = None) -> None:
    if not (
        isinstance(text, (str, bytes)) and isinstance(old, (str, bytes)) and isinstance(new, (str, bytes))
    ):
        text, old, new = str(text), str(old), str(new)
    found = len(text) + 1 if not old else text.count(old)
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    current_budget().charge(len(text) + found * max(len(new) - len(old), 0), "a replaced string")


def check_join(separator: Any, items: list[Any]) -> None:
    current_budget().charge(text_size(items) + len(str(separator)) * len(items), "a joined string")


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be past the bounds, before computing it."""
    ints = isinstance(left, int) and isinstance(right, int)
    if operator == "**" and ints and right > 0 and abs(left) > 1:
        if left.bit_length() * right > MAX_INT_BITS:
            refuse(f"{left.bit_length()}-bit ** {right} is past {MAX_INT_BITS} bits")
    elif operator == "*" and ints:
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            refuse(f"a product past {MAX_INT_BITS} bits")
    elif operator == "*":
        seq, times = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(times, int) and isinstance(seq, (str, bytes, list, tuple)):
            most = MAX_ITEMS if isinstance(seq, (list, tuple)) else MAX_CHARS
            current_budget().charge(len(seq) * max(times, 0), "a repeated value", most)
    elif operator == "+" and isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
        current_budget().charge(len(left) + len(right), "a concatenated string")
    elif operator == "+" and isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        current_budget().charge(len(left) + len(right), "a concatenated list", MAX_ITEMS)
    elif operator == "%" and isinstance(left, (str, bytes)):
        check_format(left, right)


def check_text_method(name: str, owner: str | bytes, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A str (or bytes) method's result bounded before it is made."""
    check_ints((*args, *kwargs.values()))
    if name in ("translate", "maketrans"):
        refuse(f"str.{name} is not available to chat templates")
    elif name == "replace" and len(args) >= 2:
        check_replace(owner, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count"))
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
        current_budget().charge(len(owner) + tabs * size, "a string with tabs expanded")
    elif name in ("format", "format_map"):
        check_format(owner, (*args, *kwargs.values()))
