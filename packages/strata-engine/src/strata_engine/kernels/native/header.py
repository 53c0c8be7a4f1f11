"""The C library's interface, read from its one header (strata_kernels.h) into ctypes.

The header is the only statement of what the kernels export: every kernel file includes it, so the
compiler holds every definition to it, and the Python side binds the library from it here. The
parser is small and strict: it reads exactly the forms the header's opening comment lists and
refuses anything else (an unknown type, a stray statement), so the binding cannot silently drift
from the C. Enumerations give the type codes, structs become ctypes Structures (field for field,
in order), each function's arguments and result become its ctypes argtypes and restype, and a
`static const` table (strata_wtypes: the weight types) becomes rows of named integers, so its
sizes are stated once, in C, for both sides.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEADER = Path(__file__).with_name("strata_kernels.h")

SCALARS: dict[str, Any] = {
    "void": None,
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64,
    "float": ctypes.c_float,
}
POINTEES = {"void", "int", "int32_t", "int64_t", "float", "uint8_t", "int8_t"}  # and the structs

_ENUM = re.compile(r"enum\s+(\w+)\s*\{([^{}]*)\}\s*;")
_STRUCT = re.compile(r"typedef\s+struct\s*\{([^{}]*)\}\s*(\w+)\s*;")
_FUNCTION = re.compile(r"((?:const\s+)?\w+\s*\**)\s*(strata_\w+)\s*\(([^()]*)\)\s*;")
_TABLE = re.compile(r"static\s+const\s+(\w+)\s+(\w+)\s*\[\s*\]\s*=\s*\{((?:[^{}]|\{[^{}]*\})*)\}\s*;")
_ROW = re.compile(r"\s*\[\s*(\w+)\s*\]\s*=\s*\{([^{}]*)\}\s*")  # [CONSTANT] = {VALUE, ...}
_DECL = re.compile(r"(const\s+)?(\w+)\s*(\*?)\s*(\w+)")  # one argument: [const] type [*] name
# the include guard and <stdint.h>; no macro values, no conditional declarations
_PREPROCESSOR = re.compile(r"#\s*(?:ifndef\s+\w+|define\s+\w+|endif|include\s*<stdint\.h>)")


class HeaderError(ValueError):
    """strata_kernels.h holds something the binding cannot read: fix the header (or the parser)."""


@dataclass(frozen=True)
class Function:
    name: str
    args: tuple[Any, ...]  # ctypes types, in order
    result: Any  # a ctypes type, or None for void


@dataclass(frozen=True)
class Interface:
    enums: dict[str, dict[str, int]]  # enum name -> constant -> value
    structs: dict[str, type[ctypes.Structure]]
    functions: dict[str, Function]
    tables: dict[str, dict[int, dict[str, int]]]  # table name -> index -> field -> value

    def constant(self, name: str) -> int:
        """An enumeration constant by its name, whichever enum holds it."""
        for values in self.enums.values():
            if name in values:
                return values[name]
        raise KeyError(f"strata_kernels.h declares no constant {name}")

    def bind(self, lib: ctypes.CDLL, names: list[str]) -> None:
        """Give each of the functions `names` of `lib` its argument and result types."""
        for name in names:
            fn, decl = getattr(lib, name), self.functions[name]
            fn.argtypes, fn.restype = list(decl.args), decl.result


def _ctype(const: str | None, base: str, pointer: bool, structs: dict[str, Any], what: str) -> Any:
    if pointer:
        if base == "char" and const:
            return ctypes.c_char_p
        if base not in POINTEES and base not in structs:
            raise HeaderError(f"{what}: pointer to unknown type {base}")
        return ctypes.c_void_p
    if base not in SCALARS or (base == "void" and what.endswith("argument")):
        raise HeaderError(f"{what}: unknown type {base}")
    return SCALARS[base]


def _strip(text: str) -> str:
    """The header without comments and with its few allowed preprocessor lines checked and removed."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    lines = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            if not _PREPROCESSOR.fullmatch(line.strip()):
                raise HeaderError(f"preprocessor line the binding cannot follow: {line.strip()}")
            continue
        lines.append(line)
    return "\n".join(lines)


def _struct(name: str, body: str, structs: dict[str, Any]) -> type[ctypes.Structure]:
    fields: list[tuple[str, Any]] = []
    for statement in filter(str.strip, body.split(";")):
        m = re.fullmatch(r"\s*(const\s+)?(\w+)\s+(.*?)\s*", statement, flags=re.S)
        if m is None:
            raise HeaderError(f"struct {name}: cannot read {statement.strip()!r}")
        for declarator in m.group(3).split(","):
            d = re.fullmatch(r"\s*(\*?)\s*(\w+)\s*", declarator)
            if d is None:
                raise HeaderError(f"struct {name}: cannot read {declarator.strip()!r}")
            what = f"struct {name} field {d.group(2)}"
            fields.append((d.group(2), _ctype(m.group(1), m.group(2), bool(d.group(1)), structs, what)))
    return type(name, (ctypes.Structure,), {"_fields_": fields, "__doc__": f"{name} (strata_kernels.h)"})


def _function(result: str, name: str, params: str, structs: dict[str, Any]) -> Function:
    r = re.fullmatch(r"(const\s+)?(\w+)\s*(\**)", result.strip())
    if r is None or len(r.group(3)) > 1:
        raise HeaderError(f"{name}: cannot read its result type {result!r}")
    restype = _ctype(r.group(1), r.group(2), bool(r.group(3)), structs, f"{name} result")
    args = []
    if params.strip() != "void":
        for i, param in enumerate(params.split(",")):
            d = _DECL.fullmatch(param.strip())
            if d is None:
                raise HeaderError(f"{name}: cannot read argument {i} {param.strip()!r}")
            args.append(_ctype(d.group(1), d.group(2), bool(d.group(3)), structs, f"{name} argument"))
    return Function(name, tuple(args), restype)


def _value(item: str, constants: dict[str, int], what: str) -> int:
    """An integer, or enumeration constants or'ed together."""
    value = 0
    for part in item.split("|"):
        part = part.strip()
        if re.fullmatch(r"-?\d+", part):
            value |= int(part)
        elif part in constants:
            value |= constants[part]
        else:
            raise HeaderError(f"{what}: cannot read {part!r} (an integer or a constant above)")
    return value


def _table(
    name: str, struct: str, body: str, structs: dict[str, Any], enums: dict[str, dict[str, int]]
) -> dict[int, dict[str, int]]:
    """A table of int32_t structs, row by row: index (a constant's value) -> field -> value."""
    fields = getattr(structs.get(struct), "_fields_", None)
    if not fields or any(t is not ctypes.c_int32 for _, t in fields):
        raise HeaderError(f"table {name}: {struct} is not a struct of int32_t fields above")
    constants = {k: v for values in enums.values() for k, v in values.items()}
    rows: dict[int, dict[str, int]] = {}
    for item in re.split(r"(?<=\})\s*,", body.strip().rstrip(",")):
        r = _ROW.fullmatch(item)
        if r is None:
            raise HeaderError(f"table {name}: cannot read {item.strip()!r} (write [CONSTANT] = {{...}})")
        index = _value(r.group(1), constants, f"table {name}")
        values = [_value(v, constants, f"table {name} row {r.group(1)}") for v in r.group(2).split(",")]
        if len(values) != len(fields) or index in rows:
            raise HeaderError(f"table {name} row {r.group(1)}: {len(values)} values for {len(fields)} fields")
        rows[index] = {field: v for (field, _), v in zip(fields, values, strict=True)}
    return rows


def parse(text: str) -> Interface:
    """The interface stated by a header's text (raises HeaderError on anything unexpected)."""
    text = _strip(text)
    enums: dict[str, dict[str, int]] = {}
    structs: dict[str, type[ctypes.Structure]] = {}
    functions: dict[str, Function] = {}
    tables: dict[str, dict[int, dict[str, int]]] = {}
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            break
        if m := _ENUM.match(text, pos):
            values = {}
            for item in filter(str.strip, m.group(2).split(",")):
                c = re.fullmatch(r"\s*(\w+)\s*=\s*(-?\d+)\s*", item)
                if c is None:
                    raise HeaderError(f"enum {m.group(1)}: cannot read {item.strip()!r} (give every value)")
                values[c.group(1)] = int(c.group(2))
            enums[m.group(1)] = values
        elif m := _STRUCT.match(text, pos):
            structs[m.group(2)] = _struct(m.group(2), m.group(1), structs)
        elif m := _TABLE.match(text, pos):
            tables[m.group(2)] = _table(m.group(2), m.group(1), m.group(3), structs, enums)
        elif m := _FUNCTION.match(text, pos):
            functions[m.group(2)] = _function(m.group(1), m.group(2), m.group(3), structs)
        else:
            line = text.count("\n", 0, pos) + 1
            raise HeaderError(f"line {line}: not a declaration the binding reads: {text[pos : pos + 60]!r}")
        pos = m.end()
    return Interface(enums, structs, functions, tables)


INTERFACE = parse(HEADER.read_text())
