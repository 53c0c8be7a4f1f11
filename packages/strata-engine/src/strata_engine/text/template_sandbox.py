"""The jinja2 sandbox chat templates are compiled and rendered in.

Templates come from model files and, with `--trust-request-chat-template`, from requests:
from strangers. They run in an immutable sandbox, and every way one can fail (bad syntax,
`raise_exception`, undefined names, sandbox violations) becomes a `ChatTemplateError`.
Nothing is folded at compile time (jinja2 evaluates constant expressions while compiling,
outside any bound): arithmetic goes through `call_binop`, every filter takes the context
(which jinja2 never folds), and loops and `~` become calls the render's budget sees
(template_budget.py holds the bounds and their checks).
"""

from __future__ import annotations

import json
import marshal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, cast

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.filters import make_attrgetter
from jinja2.runtime import Context, markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg, pass_context, pass_eval_context
from jinja2.visitor import NodeTransformer

from strata_engine.text.template_budget import (
    MAX_ITEMS,
    MAX_JSON_INDENT,
    MAX_SOURCE_CHARS,
    ChatTemplateError,
    check_binop,
    check_format,
    check_ints,
    check_join,
    check_replace,
    check_text_method,
    current_budget,
    refuse,
    result_size,
    text_size,
)


def _raise_exception(message: str) -> NoReturn:
    """Templates call this to reject a conversation (e.g. roles out of order)."""
    raise ChatTemplateError(f"chat template rejected the messages: {message}", "messages")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kw: Any) -> str:
    # Like HF's: no HTML escaping (jinja's built-in would turn "<" into "\u003c").
    if indent is not None and not (isinstance(indent, int) and 0 <= indent <= MAX_JSON_INDENT):
        refuse(f"tojson's indent must be 0 to {MAX_JSON_INDENT}")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kw)


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
        check_replace(*args[:4])
    elif name == "indent" and args:
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        per_line = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        text = str(args[0])
        current_budget().charge(len(text) + (text.count("\n") + 1) * per_line, "an indented string")
    elif name == "wordwrap" and args:
        width = args[1] if len(args) > 1 else kwargs.get("width", 79)
        wrap = args[3] if len(args) > 3 else kwargs.get("wrapstring") or "\n"
        text = str(args[0])
        current_budget().charge(
            len(text) + (len(text) // max(int(width), 1) + 1) * len(str(wrap)), "a wrapped string"
        )
    elif name == "format" and args:
        check_format(str(args[0]), (*args[1:], *kwargs.values()))
    elif name in ("slice", "batch") and len(args) > 1 and isinstance(args[1], int) and args[1] > MAX_ITEMS:
        refuse(f"{name} into more than {MAX_ITEMS:,} parts")
    elif name == "sum":
        start = args[2] if len(args) > 2 else kwargs.get("start", 0)
        if not isinstance(start, (int, float)):
            refuse("sum adds numbers only")


def _guarded_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` behind the budget; it takes the context, so jinja2 never runs it while compiling."""
    pass_arg = _PassArg.from_obj(func)
    serializes = name not in _KEEPS_VALUE

    @pass_context
    def guarded(context: Context, *args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        budget.tick()
        check_ints((*args[1:], *kwargs.values()))
        if name == "join" and args:  # its items, counted before they are joined
            items = list(args[0])
            if attribute := kwargs.pop("attribute", None):
                getter = make_attrgetter(context.environment, attribute)
                items = [getter(item) for item in items]
            check_join(args[1] if len(args) > 1 else kwargs.get("d", ""), items)
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
        budget.charge(result_size(result), f"the {name} filter's result")
        return result

    return guarded


# -- loops and `~`, as calls the budget sees ----------------------------------------------


def _iterate(iterable: Iterable[Any]) -> Iterator[Any]:
    """A `{% for %}` loop's items, each one a step."""
    budget = current_budget()
    for item in iterable:
        budget.tick()
        yield item


@pass_eval_context
def _concat(eval_ctx: nodes.EvalContext, *values: Any) -> str:
    """`a ~ b`: the joined text bounded before it is made."""
    current_budget().charge(sum(text_size(v) for v in values), "a concatenated string")
    return markup_join(values) if eval_ctx.autoescape else str_join(values)


def _finalize(value: Any) -> Any:
    """Every `{{ value }}`: its text bounded before jinja2 makes it."""
    current_budget().charge(text_size(value), "an output value")
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
        check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        budget.tick()
        target = getattr(__obj, "__wrapped__", __obj)  # str.format arrives wrapped by the sandbox
        owner = getattr(target, "__self__", None)
        if isinstance(owner, (str, bytes)):
            name = getattr(target, "__name__", "")
            if name == "join" and args:
                items = list(args[0])
                check_join(owner, items)
                args = (items, *args[1:])
            check_text_method(name, owner, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        budget.charge(result_size(result), "a call's result")
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


_ENV = _environment()  # one for all templates: per-render state lives in BUDGET


# -- compiling -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    """A template's source compiled once: what the cache keeps, failures included."""

    template: jinja2.Template | None
    error: str | None  # why it does not compile (then `template` is None)
    size: int  # bytes it holds: its source and its marshalled code


def compile_template(source: str, what: str) -> Compiled:
    """`source` compiled in the sandbox; any failure is the template's (`what` names it)."""
    if len(source) > MAX_SOURCE_CHARS:
        return Compiled(None, f"{what} is {len(source):,} characters; at most {MAX_SOURCE_CHARS:,}", 0)
    try:
        code = _ENV.compile(source, filename="<chat_template>")
        template = _ENV.template_class.from_code(_ENV, code, _ENV.make_globals(None))
    except jinja2.TemplateError as e:
        return Compiled(None, f"{what} does not compile: {str(e)[:500]}", len(source))
    except Exception as e:  # RecursionError, ValueError (a 5,000-digit literal), ...
        return Compiled(None, f"{what} does not compile: {type(e).__name__}: {str(e)[:500]}", len(source))
    return Compiled(template, None, len(source) + len(marshal.dumps(code)))
