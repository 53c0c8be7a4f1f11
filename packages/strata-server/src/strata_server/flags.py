"""Flags generated from dataclass fields, so a flag is declared once, where its value lives.

vLLM declares its server options on config dataclasses and generates argparse from them; this is
the same idea, small: `option(...)` is a dataclass field whose metadata holds the flag's names,
help text and argparse details; `add_group` adds one argparse flag per such field, and
`values_from_args` reads the parsed values back into the field's type (lists of an
`extend`/`append` flag become tuples, `convert` turns a flag's spelling into the field's, e.g.
-1 into None), checking each with its `check`. Fields without `option` metadata are not flags.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, field, fields
from typing import Any

Check = Callable[[Any], "str | None"]  # a value -> what is wrong with it ("must be ..."), or None


def option(
    default: Any,
    help: str | Callable[[], str],
    *,
    flag: str | tuple[str, ...],
    cli_default: Any = MISSING,
    convert: Callable[[Any], Any] | None = None,
    check: Check | None = None,
    **argparse_kwargs: Any,
) -> Any:
    """A dataclass field that is also a flag.

    `flag`: its name(s), the first the main one; `help`: the `--help` text (a callable when it
    names something only known at run time); `cli_default`: the flag's default where it differs
    from the field's (an embedder's `ServerSettings()` has no request timeout, the CLI 600 s);
    `convert`: the parsed value -> the field's value; `check`: refuses a bad parsed value;
    `argparse_kwargs`: `type`, `choices`, `action`, `nargs`, `metavar` as argparse takes them
    (`type` defaults to the default's type)."""
    metadata = {
        "flags": (flag,) if isinstance(flag, str) else flag,
        "help": help,
        "cli_default": default if cli_default is MISSING else cli_default,
        "convert": convert,
        "check": check,
        "argparse": argparse_kwargs,
    }
    if isinstance(default, (list, dict, set)):
        raise TypeError("a flag's default must be immutable (a tuple, not a list)")
    return field(default=default, metadata={"option": metadata})


def option_fields(cls: type) -> Iterator[Field[Any]]:
    """The fields of `cls` that are flags, in declaration order."""
    return (f for f in fields(cls) if "option" in f.metadata)


def flag_of(f: Field[Any]) -> str:
    """A field's main flag (the one errors name)."""
    return str(f.metadata["option"]["flags"][0])


def cli_default(f: Field[Any]) -> Any:
    """What the flag parses to when not given (a list for a repeatable flag, as argparse needs)."""
    meta = f.metadata["option"]
    if meta["argparse"].get("action") in ("append", "extend"):
        return list(meta["cli_default"])
    return meta["cli_default"]


def add_group(parser: argparse.ArgumentParser, cls: type, title: str | None = None) -> None:
    """One flag per option field of `cls` (dest: the field's name), in a group when titled."""
    group: Any = parser.add_argument_group(title) if title else parser
    for f in option_fields(cls):
        meta = f.metadata["option"]
        kwargs = dict(meta["argparse"])
        default = cli_default(f)
        if "action" not in kwargs and "type" not in kwargs and default is not None:
            kwargs["type"] = type(default)
        if kwargs.get("action") not in ("store_true", "store_false") and "choices" not in kwargs:
            kwargs.setdefault("metavar", meta["flags"][0].lstrip("-").replace("-", "_").upper())
        help_text = meta["help"]() if callable(meta["help"]) else meta["help"]
        group.add_argument(*meta["flags"], dest=f.name, default=default, help=help_text, **kwargs)


def problems(cls: type, args: argparse.Namespace) -> Iterator[str]:
    """'--flag must be ...' for each parsed value of `cls`'s flags its `check` refuses."""
    for f in option_fields(cls):
        check = f.metadata["option"]["check"]
        if check is not None and (problem := check(getattr(args, f.name))) is not None:
            yield f"{flag_of(f)} {problem}"


def values_from_args(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The option fields' values as `cls` holds them, from parsed flags (missing ones: the
    flag's default); raises ValueError naming the flag for a value its `check` refuses."""
    for problem in problems(cls, args):
        raise ValueError(problem)
    values = {}
    for f in option_fields(cls):
        meta = f.metadata["option"]
        value = getattr(args, f.name, cli_default(f))
        if isinstance(value, list):
            value = tuple(value)
        values[f.name] = meta["convert"](value) if meta["convert"] else value
    return values


def at_least(low: int) -> Check:
    """A check: None (no bound) or at least `low`."""
    return lambda value: None if value is None or value >= low else f"must be at least {low}"


def not_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be >= 0"


def positive(value: Any) -> str | None:
    return None if value > 0 else f"must be positive, got {value}"
