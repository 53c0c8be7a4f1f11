"""strata_kernels.h is the one statement of the C interface, and the ctypes binding is read from it.

Checked against references that do not come from the parser: the hand-written ctypes table the
generated binding replaced, the C compiler's own offsets, sizes and types of strata_layer_desc's
fields, GGML's type ids, the compiler's -Wmissing-prototypes (every function a C file defines
outside itself is declared in a header it includes, so each definition is held to it) and the
built library's own table of exports (exactly the header's functions: a helper the files share
stays hidden). The parser refuses what it cannot read.
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from strata_engine.kernels import native
from strata_engine.kernels.base import Q8_PACKED
from strata_engine.kernels.fused_layer import LayerDesc
from strata_engine.kernels.native.header import HEADER, INTERFACE, HeaderError, parse
from strata_engine.kernels.weights import NATIVE_TYPES

_P, _I64, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
# The binding as it was written by hand before the header existed: (arguments, result).
HAND_WRITTEN = {
    "strata_matmul": ([_P, _I64, _I64, _P, _I, _I64, _P, _P, _I], None),
    "strata_gather_rows": ([_P, _I, _I64, _P, _I64, _P], None),
    "strata_rmsnorm": ([_P, _I64, _I64, _P, _F, _P, _I], None),
    "strata_silu_mul": ([_P, _P, _I64, _P, _I], None),
    "strata_attention": ([_P, _I64, _I, _I, _I, _P, _P, _I, _I, _P, _I, _P, _P, _F, _F, _I, _P, _I], None),
    "strata_rope": ([_P, _I64, _I, _I, _I, _P, _P, _P, _I], None),
    "strata_kv_write": ([_P, _P, _I64, _I64, _P, _P, _P, _I, _I], None),
    "strata_log_softmax": ([_P, _I64, _I64, _P, _I], None),
    "strata_exp": ([_P, _I64, _P], None),
    "strata_gelu_mul": ([_P, _P, _I64, _P, _I], None),
    "strata_softcap": ([_P, _I64, _F, _P], None),
    "strata_layer": ([_P, _P, _I64, _P, _P, _P, _I, _I, _P, _P, _P, _I, _I], None),
    "strata_q8_pack": ([_I, _P, _I64, _I64, _P, _I], None),
    "strata_kquant_pack": ([_I, _P, _I64, _P, _I], None),
    "strata_q8_matmul": ([_P, _I64, _I64, _P, _I, _I64, _P, _P, _I], None),
    "strata_q8_packed_bytes": ([_I, _I64, _I64], _I64),
    "strata_q8_supported": ([_I], _I),
    "strata_target": ([], ctypes.c_char_p),
}


def test_the_loaded_library_is_bound_as_the_hand_written_table_had_it() -> None:
    lib, _ = native.load("portable")
    for name, (args, result) in HAND_WRITTEN.items():
        fn = getattr(lib, name)
        assert (list(fn.argtypes), fn.restype) == (args, result), name
    # every function the header declares (later ones too) is bound as declared
    for name, decl in INTERFACE.functions.items():
        if name not in native.PROBE_FUNCTIONS:
            fn = getattr(lib, name)
            assert (tuple(fn.argtypes), fn.restype) == (decl.args, decl.result), name


def _c_view_of_layer_desc(tmp_path: Path) -> list[str]:
    """What the C compiler says of strata_layer_desc: its size, then each field's offset, size and kind."""
    names = [name for name, _ in LayerDesc._fields_]
    kind = '_Generic((d.{0}), float: "float", int32_t: "int32", int64_t: "int64", default: "pointer")'
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "strata_kernels.h"',
        "int main(void) {",
        "    strata_layer_desc d = {0};",
        '    printf("%zu\\n", sizeof(strata_layer_desc));',
        *(
            f'    printf("{n} %zu %zu %s\\n", offsetof(strata_layer_desc, {n}), sizeof(d.{n}), {kind.format(n)});'
            for n in names
        ),
        "    return 0;",
        "}",
    ]
    src, exe = tmp_path / "desc.c", tmp_path / "desc"
    src.write_text("\n".join(lines))
    cc, _ = native.compiler()
    subprocess.run([cc, "-std=c11", f"-I{HEADER.parent}", str(src), "-o", str(exe)], check=True, timeout=120)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")[:-1]


def test_the_layer_struct_has_the_c_compilers_layout(tmp_path: Path) -> None:
    kinds = {
        ctypes.c_float: "float",
        ctypes.c_int32: "int32",
        ctypes.c_int64: "int64",
        ctypes.c_void_p: "pointer",
    }
    python = [str(ctypes.sizeof(LayerDesc))] + [
        f"{name} {getattr(LayerDesc, name).offset} {ctypes.sizeof(t)} {kinds[t]}"
        for name, t in LayerDesc._fields_
    ]
    assert python == _c_view_of_layer_desc(tmp_path)
    assert len(LayerDesc._fields_) == 37  # every field of the struct, none dropped by the parser


def test_type_codes_are_the_ggml_ids_and_the_packed_flag_is_apart() -> None:
    assert {qt: code for qt, code in NATIVE_TYPES.items()} == {qt: int(qt) for qt in NATIVE_TYPES}
    assert set(NATIVE_TYPES) == {
        QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q2_K, QT.Q4_K, QT.Q5_K,
        QT.Q3_K, QT.Q6_K, QT.IQ1_M, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S, QT.IQ4_NL, QT.IQ4_XS,
        QT.MXFP4,
    }  # fmt: skip
    assert Q8_PACKED == 256 and all(code < Q8_PACKED for code in NATIVE_TYPES.values())
    features = INTERFACE.enums["strata_cpu"]
    assert {name: bit for name, (bit, _) in native.TARGETS.items()} == {
        "avx512": features["HAS_AVX512"],
        "avxvnni": features["HAS_AVX2_FMA"] | features["HAS_AVX_VNNI"],
        "avx2": features["HAS_AVX2_FMA"],
        "neon": features["HAS_NEON"],
        "portable": 0,
    }


def _syntax_check(source: Path, flags: list[str], include: Path) -> subprocess.CompletedProcess[str]:
    cc, _ = native.compiler()
    cmd = [cc, "-fsyntax-only", "-std=c11", "-Werror=missing-prototypes", f"-I{include}", *flags, str(source)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("target", native.targets_to_test())
def test_every_exported_function_is_declared_in_the_header(target: str) -> None:
    for source in (*native.SOURCES, native.PROBE):
        proc = _syntax_check(source, native.TARGETS[target][1], native.HERE)
        assert proc.returncode == 0, (source.name, proc.stderr[-2000:])


def test_an_undeclared_export_would_be_caught(tmp_path: Path) -> None:
    planted, source = tmp_path / "matmul.c", native.HERE / "matmul.c"
    planted.write_text(source.read_text() + "\nint strata_undeclared(int x) { return x; }\n")
    proc = _syntax_check(planted, native.TARGETS["portable"][1], native.HERE)
    assert proc.returncode != 0 and "strata_undeclared" in proc.stderr


def _exported_functions(lib: Path) -> set[str]:
    """The functions the shared library `lib` exports, as the dynamic linker sees them (nm -D)."""
    nm = shutil.which("nm")
    if nm is None or platform.system() != "Linux":
        pytest.skip("needs binutils' nm and an ELF library (Linux)")
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    rows = [line.split() for line in out.stdout.splitlines()]  # address, kind, name
    return {row[2] for row in rows if len(row) == 3 and row[1] in ("T", "W", "i")}  # code, not data


def test_the_library_exports_exactly_the_header_functions() -> None:
    """The shared helpers the C files define once (the scratch memory, q8's unpacking) are not
    exports: only what strata_kernels.h declares is the library's interface."""
    portable = native.TARGETS["portable"][1]
    lib = native.compile_library(list(native.SOURCES), portable, "strata_kernels_portable")  # as the engine
    exported = {name for name in _exported_functions(lib) if not name.startswith("_")}  # _init, _fini
    assert exported == set(INTERFACE.functions) - set(native.PROBE_FUNCTIONS)


def test_an_exported_helper_would_be_caught() -> None:
    """The check above can fail: a shared helper left visible is an export."""
    unhidden = [*native.TARGETS["portable"][1], "-DSTRATA_HIDDEN="]  # internal.h keeps a -D definition
    lib = native.compile_library([native.HERE / "common.c"], unhidden, "unhidden")
    assert "scratch" in _exported_functions(lib)


def test_the_parser_reads_the_forms_it_lists() -> None:
    interface = parse(
        """/* a comment */
        #ifndef X
        #define X
        #include <stdint.h>
        enum e { A = 1, B = -2 };
        typedef struct { const float *p, *q; int32_t n; } s;
        int64_t strata_f(const s *d, int64_t n, float x, uint8_t *out);
        const char *strata_g(void);
        #endif
        """
    )
    assert interface.enums == {"e": {"A": 1, "B": -2}}
    assert [(n, t) for n, t in interface.structs["s"]._fields_] == [
        ("p", _P),
        ("q", _P),
        ("n", ctypes.c_int32),
    ]
    f, g = interface.functions["strata_f"], interface.functions["strata_g"]
    assert (f.args, f.result) == ((_P, _I64, _F, _P), _I64)
    assert (g.args, g.result) == ((), ctypes.c_char_p)


@pytest.mark.parametrize(
    "text",
    [
        "void strata_f(size_t n);",  # a type the binding does not know
        "void strata_f(double x);",
        "void strata_f(int n)",  # no semicolon
        "enum e { A };",  # a constant without its value
        "struct s;",  # not a form the parser reads
        "#if defined(X)\n#endif",  # conditional declarations
        "#define N 4",  # a macro constant instead of an enum
        "typedef struct { long n; } s;",
        "void strata_f(int n, void);",
        "float *strata_f(void); int strata_g(char **p);",
    ],
)
def test_the_parser_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(HeaderError):
        parse(text)
