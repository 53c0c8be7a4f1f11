"""strata_kernels.h's weight types as Triton constexprs: the kernels test a type and step over its
blocks by these names (`if WT == Q6_K`, `b * Q8_0_BYTES`), never by literals, so a code or a
size is the C table's (weight_types.py reads it from the header). Every row of the table gives
two names, made here (a new row needs no line in this file):

- `<GGML name>` (Q4_0, Q6_K, ...): its kernel type code;
- `<GGML name>_BYTES`: bytes a block in the layout the Triton dequantiser reads
  (WeightType.device_bytes).
"""

from __future__ import annotations

import triton.language as tl

from strata_engine.kernels.weight_types import TYPES

NAMES: dict[str, tl.constexpr] = {}
for _qtype, _row in TYPES.items():
    NAMES[_qtype.name] = tl.constexpr(_row.code)
    NAMES[f"{_qtype.name}_BYTES"] = tl.constexpr(_row.device_bytes)


def __getattr__(name: str) -> tl.constexpr:
    """`from wtypes import Q4_K`: the name's constexpr (PEP 562), for every row of the table."""
    try:
        return NAMES[name]
    except KeyError:
        raise AttributeError(f"{__name__} has no {name}: strata_wtypes has no such type") from None
