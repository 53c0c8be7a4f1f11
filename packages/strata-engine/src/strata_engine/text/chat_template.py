"""The GGUF's chat template (`tokenizer.chat_template`), rendered in a jinja2 sandbox.

Templates come from model files and, with `--trust-request-chat-template`, from requests:
from strangers. They run in an immutable sandbox, and every way one can fail (bad syntax,
`raise_exception`, undefined names, sandbox violations, malformed messages) becomes a
`ChatTemplateError` the server can report as a 4xx.

A sandbox stops a template reaching Python's internals, not from asking for unbounded work,
so each render also has bounds (`Budget`), checked where work can grow:

- nothing is folded at compile time (jinja2 evaluates constant expressions while compiling,
  outside any bound): arithmetic goes through `call_binop`, every filter takes the context
  (which jinja2 never folds), and loops and `~` become calls the budget sees;
- arithmetic, filters, method calls and `~` refuse a result past `MAX_CHARS` characters (or
  `MAX_ITEMS` items, `MAX_INT_BITS` bits) before making it, and what they make is charged to a
  per-render `MAX_WORK_CHARS`;
- the rendered text is at most `MAX_CHARS` characters;
- loop iterations and calls together are at most `MAX_STEPS`, within `RENDER_SECONDS`.

Compiling has no deadline, so a template's source is at most `MAX_SOURCE_CHARS`; compiled
request templates are kept in a cache bounded by their compiled bytes (`TemplateCache`).
"""

from __future__ import annotations

import json
import marshal
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, Protocol, cast

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.filters import make_attrgetter
from jinja2.runtime import Context, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, _PassArg, pass_context, pass_eval_context
from jinja2.visitor import NodeTransformer

from strata_engine.api import DEFAULT_CHAT, ChatOptions, ErrorCode, RequestError

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


def _raise_exception(message: str) -> NoReturn:
    """Templates call this to reject a conversation (e.g. roles out of order)."""
    raise ChatTemplateError(f"chat template rejected the messages: {message}", "messages")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kw: Any) -> str:
    # Like HF's: no HTML escaping (jinja's built-in would turn "<" into "\u003c").
    if indent is not None and not (isinstance(indent, int) and 0 <= indent <= MAX_JSON_INDENT):
        _refuse(f"tojson's indent must be 0 to {MAX_JSON_INDENT}")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kw)


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


_BUDGET: ContextVar[Budget | None] = ContextVar("strata_chat_template_budget", default=None)


def _budget() -> Budget:
    """The current render's budget (outside a render, e.g. compiling, a fresh one)."""
    return _BUDGET.get() or Budget()


def _refuse(why: str) -> NoReturn:
    raise ChatTemplateError(f"chat template exceeded its size limit: {why}", _budget().param)


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


def _size(value: Any) -> int:
    """What a result costs: its length when it has one (str, list, dict), else nothing."""
    try:
        return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 0
    except TypeError:
        return 0


def _check_ints(args: Iterable[Any]) -> None:
    """No width, count or size argument past MAX_CHARS (center, indent, ljust, zfill, ...)."""
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > MAX_CHARS:
            _refuse(f"an argument of {arg.bit_length()} bits")


_NUMBERS = re.compile(r"\d{8,}")


def _check_format(fmt: str | bytes, values: Any) -> None:
    """`%` and `format`: widths and precisions within MAX_CHARS, the values' text too."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    if any(int(m.group()) > MAX_CHARS for m in _NUMBERS.finditer(text)):
        _refuse("a format width past the limit")
    items = values if isinstance(values, tuple) else (values,)
    _check_ints(items)
    _budget().charge(len(text) + text_size(values), "a formatted string")


def _check_replace(text: Any, old: Any, new: Any, count: Any = None) -> None:
    if not (
        isinstance(text, (str, bytes)) and isinstance(old, (str, bytes)) and isinstance(new, (str, bytes))
    ):
        text, old, new = str(text), str(old), str(new)
    found = len(text) + 1 if not old else text.count(old)
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    _budget().charge(len(text) + found * max(len(new) - len(old), 0), "a replaced string")


def _check_join(separator: Any, items: list[Any]) -> None:
    _budget().charge(text_size(items) + len(str(separator)) * len(items), "a joined string")


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be past the bounds, before computing it."""
    ints = isinstance(left, int) and isinstance(right, int)
    if operator == "**" and ints and right > 0 and abs(left) > 1:
        if left.bit_length() * right > MAX_INT_BITS:
            _refuse(f"{left.bit_length()}-bit ** {right} is past {MAX_INT_BITS} bits")
    elif operator == "*" and ints:
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            _refuse(f"a product past {MAX_INT_BITS} bits")
    elif operator == "*":
        seq, times = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(times, int) and isinstance(seq, (str, bytes, list, tuple)):
            most = MAX_ITEMS if isinstance(seq, (list, tuple)) else MAX_CHARS
            _budget().charge(len(seq) * max(times, 0), "a repeated value", most)
    elif operator == "+" and isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
        _budget().charge(len(left) + len(right), "a concatenated string")
    elif operator == "+" and isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        _budget().charge(len(left) + len(right), "a concatenated list", MAX_ITEMS)
    elif operator == "%" and isinstance(left, (str, bytes)):
        _check_format(left, right)


def _check_text_method(name: str, owner: str | bytes, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A str (or bytes) method's result bounded before it is made."""
    _check_ints((*args, *kwargs.values()))
    if name in ("translate", "maketrans"):
        _refuse(f"str.{name} is not available to chat templates")
    elif name == "replace" and len(args) >= 2:
        _check_replace(owner, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count"))
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
        _budget().charge(len(owner) + tabs * size, "a string with tabs expanded")
    elif name in ("format", "format_map"):
        _check_format(owner, (*args, *kwargs.values()))


# -- filters: each one checked, and each one unfoldable -----------------------------------

# filters that do not turn their value into text (the others are charged its text's size)
_KEEPS_VALUE = frozenset(
    [
        "abs",
        "attr",
        "batch",
        "count",
        "d",
        "default",
        "dictsort",
        "first",
        "float",
        "groupby",
        "int",
        "items",
        "last",
        "length",
        "list",
        "map",
        "max",
        "min",
        "random",
        "reject",
        "rejectattr",
        "reverse",
        "round",
        "select",
        "selectattr",
        "slice",
        "sort",
        "sum",
        "unique",
    ]
)
_DROPPED_FILTERS = ("urlize",)  # inserts its arguments once per URL found; no chat template uses it


def _check_filter(name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    """The filters whose result can outgrow their value and arguments."""
    if name == "replace" and len(args) >= 3:
        _check_replace(*args[:4])
    elif name == "indent" and args:
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        per_line = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        text = str(args[0])
        _budget().charge(len(text) + (text.count("\n") + 1) * per_line, "an indented string")
    elif name == "wordwrap" and args:
        width = args[1] if len(args) > 1 else kwargs.get("width", 79)
        wrap = args[3] if len(args) > 3 else kwargs.get("wrapstring") or "\n"
        text = str(args[0])
        _budget().charge(
            len(text) + (len(text) // max(int(width), 1) + 1) * len(str(wrap)), "a wrapped string"
        )
    elif name == "format" and args:
        _check_format(str(args[0]), (*args[1:], *kwargs.values()))
    elif name in ("slice", "batch") and len(args) > 1 and isinstance(args[1], int) and args[1] > MAX_ITEMS:
        _refuse(f"{name} into more than {MAX_ITEMS:,} parts")
    elif name == "sum":
        start = args[2] if len(args) > 2 else kwargs.get("start", 0)
        if not isinstance(start, (int, float)):
            _refuse("sum adds numbers only")


def _guarded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` behind the budget; it takes the context, so jinja2 never runs it while compiling."""
    pass_arg = _PassArg.from_obj(func)
    serializes = name not in _KEEPS_VALUE

    @pass_context
    def guarded(context: Context, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        _check_ints((*args[1:], *kwargs.values()))
        if name == "join" and args:  # its items, counted before they are joined
            items = list(args[0])
            if attribute := kwargs.pop("attribute", None):
                getter = make_attrgetter(context.environment, attribute)
                items = [getter(item) for item in items]
            _check_join(args[1] if len(args) > 1 else kwargs.get("d", ""), items)
            args = (items, *args[1:])
        elif args and serializes:
            budget.charge(text_size(args[0]), f"the {name} filter's value")
        _check_filter(name, list(args), kwargs)
        if pass_arg is _PassArg.context:
            result = func(context, *args, **kwargs)
        elif pass_arg is _PassArg.eval_context:
            result = func(context.eval_ctx, *args, **kwargs)
        elif pass_arg is _PassArg.environment:
            result = func(context.environment, *args, **kwargs)
        else:
            result = func(*args, **kwargs)
        budget.charge(_size(result), f"the {name} filter's result")
        return result

    return guarded


# -- loops and `~`, as calls the budget sees ----------------------------------------------


def _iterate(iterable: Iterable[Any]) -> Iterator[Any]:
    """A `{% for %}` loop's items, each one a step."""
    budget = _budget()
    for item in iterable:
        budget.tick()
        yield item


@pass_eval_context
def _concat(eval_ctx: nodes.EvalContext, *values: Any) -> str:
    """`a ~ b`: the joined text bounded before it is made."""
    _budget().charge(sum(text_size(v) for v in values), "a concatenated string")
    return markup_join(values) if eval_ctx.autoescape else str_join(values)


def _finalize(value: Any) -> Any:
    """Every `{{ value }}`: its text bounded before jinja2 makes it."""
    _budget().charge(text_size(value), "an output value")
    return value


class _Guard(NodeTransformer):
    """Loops' iterables through `_iterate` and `~` through `_concat` (both env attributes)."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)  # changes `node` in place
        node.iter = _env_call("strata_iterate", [cast(nodes.Expr, node.iter)], node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _env_call("strata_concat", node.nodes, node.lineno)


def _env_call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
    return nodes.Call(nodes.EnvironmentAttribute(name, lineno=lineno), args, [], None, None, lineno=lineno)


class _Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the budget's checks; fails on any unsafe attribute (jinja's
    default would quietly render it as "")."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    strata_iterate = staticmethod(_iterate)
    strata_concat = staticmethod(_concat)

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        raise SecurityError(
            f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is not allowed"
        )

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        _Guard().visit(tree)
        return tree

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.tick()
        target = getattr(__obj, "__wrapped__", __obj)  # str.format arrives wrapped by the sandbox
        owner = getattr(target, "__self__", None)
        if isinstance(owner, (str, bytes)):
            name = getattr(target, "__name__", "")
            if name == "join" and args:
                items = list(args[0])
                _check_join(owner, items)
                args = (items, *args[1:])
            _check_text_method(name, owner, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        budget.charge(_size(result), "a call's result")
        return result


def _environment() -> _Sandbox:
    # Lenient undefined names, as in Hugging Face: templates test optional variables
    # (`{% if tools %}`); using an undefined value in an operation still fails.
    env = _Sandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols"],
        finalize=_finalize,
        optimized=False,  # the optimizer folds constants; nothing here is folded
    )
    env.filters["tojson"] = _tojson
    for name in _DROPPED_FILTERS:
        env.filters.pop(name, None)
    env.filters = {name: _guarded_filter(name, func) for name, func in env.filters.items()}
    env.globals.pop("lipsum", None)  # paragraphs by the count asked for
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()  # one for all templates: per-render state lives in _BUDGET


# -- compiling and caching -----------------------------------------------------------------


@dataclass(frozen=True)
class _Compiled:
    template: jinja2.Template | None
    error: str | None  # why it does not compile (then `template` is None)
    size: int  # bytes it holds: its source and its marshalled code


def _compile(source: str, what: str) -> _Compiled:
    """`source` compiled in the sandbox; any failure is the template's (`what` names it)."""
    if len(source) > MAX_SOURCE_CHARS:
        return _Compiled(None, f"{what} is {len(source):,} characters; at most {MAX_SOURCE_CHARS:,}", 0)
    try:
        code = _ENV.compile(source, filename="<chat_template>")
        template = _ENV.template_class.from_code(_ENV, code, _ENV.make_globals(None))
    except jinja2.TemplateError as e:
        return _Compiled(None, f"{what} does not compile: {str(e)[:500]}", len(source))
    except Exception as e:  # RecursionError, ValueError (a 5,000-digit literal), ...
        return _Compiled(None, f"{what} does not compile: {type(e).__name__}: {str(e)[:500]}", len(source))
    return _Compiled(template, None, len(source) + len(marshal.dumps(code)))


class TemplateCache:
    """Compiled request templates, least recently used first, within CACHE_BYTES."""

    def __init__(self, max_bytes: int = CACHE_BYTES, max_entries: int = TEMPLATE_CACHE) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        self._entries: OrderedDict[str, _Compiled] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, source: str) -> _Compiled:
        with self._lock:
            if (hit := self._entries.get(source)) is not None:
                self._entries.move_to_end(source)
                return hit
        result = _compile(source, "`chat_template`")  # outside the lock: others keep rendering
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
        result = CACHE.get(source) if request else _compile(source, "the model's chat template")
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
        budget = Budget(self.param, time.monotonic() + RENDER_SECONDS, MAX_STEPS, MAX_WORK_CHARS)
        token = _BUDGET.set(budget)
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
            _BUDGET.reset(token)

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
