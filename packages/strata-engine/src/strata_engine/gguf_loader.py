"""Read a GGUF file: metadata as plain Python values, tensors as zero-copy views of the file.

gguf-py's GGUFReader spends seconds turning ~100k vocabulary strings into numpy objects;
this parser reads the same header in a fraction of that, which keeps start-up short.
Tensor data is memory-mapped and left in its stored (possibly quantised) block format.
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from strata_engine.api import ModelLoadError

_SCALARS = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9
_LENGTH = struct.Struct("<Q")  # a string's byte count
_NUMPY_OF = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: its torch-order shape ([out, in] for a weight), type, and raw bytes."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    data: np.ndarray  # uint8 view of the stored blocks (or the raw float bytes)


# Bytes each header record needs at the least: a count larger than the rest of the file
# allows is refused before any loop runs or anything is allocated for it.
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, a one-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset
_MIN_ARRAY_BYTES = 4 + 8  # an array value's element type and count
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 4  # arrays of arrays: deeper nesting is refused, not recursed into
SUPPORTED_VERSIONS = (2, 3)


class _Cursor:
    """Reads the header front to back; every read is checked against the file's end, so a
    malformed header is one `ModelLoadError` naming the field, never a short or wild read."""

    def __init__(self, buf: memoryview, path: Path) -> None:
        self.buf = buf
        self.size = len(buf)
        self.pos = 0
        self.path = path

    def fail(self, what: str, problem: str) -> ModelLoadError:
        return ModelLoadError(f"{self.path}: GGUF {what}: {problem}")

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise self.fail(
                what, f"needs {n} bytes at offset {self.pos}, past the end of the file ({self.size} bytes)"
            )

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        self.need(fmt.size, what)
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def count(self, what: str, min_bytes: int) -> int:
        """A u64 count of records of at least `min_bytes` each, bounded by the bytes left."""
        (n,) = self.unpack(_LENGTH, what)
        if n * min_bytes > self.size - self.pos:
            raise self.fail(what, f"{n} entries cannot fit in the {self.size - self.pos} bytes left")
        return int(n)

    def scalar(self, vtype: int, what: str) -> Any:
        fmt, _ = _SCALARS[vtype]
        return self.unpack(_STRUCTS[fmt], what)[0]

    def string(self, what: str) -> str:
        n = self.count(what, 1)
        start = self.pos
        self.pos = start + n
        return str(self.buf[start : self.pos], "utf-8", "replace")

    def strings(self, count: int, what: str) -> list[str]:
        """`count` strings in a row (a vocabulary, its merges): one tight loop, no call each."""
        buf, pos, size, out = self.buf, self.pos, self.size, []
        length = _LENGTH.unpack_from
        for _ in range(count):
            if pos + 8 > size:
                break
            (n,) = length(buf, pos)
            pos += 8
            if n > size - pos:
                break
            out.append(str(buf[pos : pos + n], "utf-8", "replace"))
            pos += n
        else:
            self.pos = pos
            return out
        self.pos = pos
        raise self.fail(what, f"string {len(out)} of {count} runs past the end of the file")

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise self.fail(what, f"arrays nested deeper than {MAX_ARRAY_DEPTH}")
            (itype,) = self.unpack(_U32, what + " element type")
            if itype in _NUMPY_OF:
                count = self.count(what + " count", _SCALARS[itype][1])
                arr = np.frombuffer(self.buf, dtype=_NUMPY_OF[itype], count=count, offset=self.pos)
                self.pos += arr.nbytes
                return arr.tolist()
            if itype == _STRING:
                return self.strings(self.count(what + " count", 8), what)
            if itype == _ARRAY:
                count = self.count(what + " count", _MIN_ARRAY_BYTES)
                return [self.value(itype, what, depth + 1) for _ in range(count)]
            if itype not in _SCALARS:
                raise self.fail(what, f"unknown array element type {itype}")
            count = self.count(what + " count", _SCALARS[itype][1])
            return [self.scalar(itype, what) for _ in range(count)]
        if vtype not in _SCALARS:
            raise self.fail(what, f"unknown metadata value type {vtype}")
        return self.scalar(vtype, what)


_STRUCTS = {fmt: struct.Struct(fmt) for fmt, _ in _SCALARS.values()}
_U32 = struct.Struct("<I")
_HEADER = struct.Struct("<4sIQ")  # magic, version, tensor count (the metadata count follows)
_TENSOR_TAIL = struct.Struct("<IQ")  # type, offset


class GGUFFile:
    """An open GGUF file: `metadata` (key -> value) and `tensors` (name -> TensorInfo).

    The file is untrusted input: every count, length, shape, type and offset in its header is
    checked against the file's size before anything is read or sliced (see `_Cursor`), and
    every tensor's bytes lie wholly inside the file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot open model file {self.path}: {exc}") from exc
        buf = memoryview(self._mmap)
        if bytes(buf[:4]) != b"GGUF":
            raise ModelLoadError(f"{self.path} is not a GGUF file (bad magic)")
        cur = _Cursor(buf, self.path)
        _, version, n_tensors = cur.unpack(_HEADER, "header")
        if version not in SUPPORTED_VERSIONS:
            raise ModelLoadError(f"{self.path}: GGUF version {version} is not supported (need 2 or 3)")
        n_kv = cur.count("metadata count", _MIN_KV_BYTES)
        self.metadata: dict[str, Any] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key {i}")
            if key in self.metadata:
                raise cur.fail(f"metadata key {shown(key)}", "appears twice")
            (vtype,) = cur.unpack(_U32, f"metadata {shown(key)} type")
            self.metadata[key] = cur.value(vtype, f"metadata {shown(key)}")
        if n_tensors * _MIN_TENSOR_INFO_BYTES > cur.size - cur.pos:
            raise cur.fail(
                "tensor count", f"{n_tensors} tensors cannot fit in the {cur.size - cur.pos} bytes left"
            )
        infos = [_tensor_info(cur, i) for i in range(n_tensors)]
        align = self.metadata.get("general.alignment", 32)
        if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise cur.fail("metadata general.alignment", f"{align!r} is not a power of two")
        data_start = (cur.pos + align - 1) // align * align
        raw = np.frombuffer(self._mmap, dtype=np.uint8)
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, qtype, offset in infos:
            if name in self.tensors:
                raise cur.fail(f"tensor {shown(name)}", "appears twice")
            block, type_size = GGML_QUANT_SIZES[qtype]
            nbytes = math.prod(shape) // block * type_size
            start = data_start + offset
            if offset % align:
                raise cur.fail(
                    f"tensor {shown(name)} offset", f"{offset} is not a multiple of the alignment {align}"
                )
            if start + nbytes > cur.size:
                raise cur.fail(
                    f"tensor {shown(name)} data",
                    f"{nbytes} bytes at offset {start} run past the end of the file ({cur.size} bytes)",
                )
            self.tensors[name] = TensorInfo(name, shape, qtype, raw[start : start + nbytes])

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def release_pages(self) -> None:
        """Let the OS drop the file pages read so far: the loaded model holds its own copies
        (blocks repacked, scales widened), and the pages are clean, so anything that reads
        the file again faults them back in. Keeps the file out of the server's resident memory."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._mmap.madvise(mmap.MADV_DONTNEED)


def required(tensors: Mapping[str, TensorInfo], name: str) -> TensorInfo:
    """The tensor `name`, or the one load error that says the file lacks it."""
    if name not in tensors:
        raise ModelLoadError(f"model file lacks tensor {name}")
    return tensors[name]


def shown(name: str) -> str:
    """A name from the file as an error message shows it: as is when short and printable,
    else escaped and cut, so that a message stays one line whatever the file holds."""
    return name if len(name) <= 200 and name.isprintable() else ascii(name[:200])


def _tensor_info(cur: _Cursor, i: int) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
    """One tensor's header entry, its shape and type checked: 1 to 4 positive dimensions, a
    known type whose block divides the row (the innermost dimension)."""
    name = cur.string(f"tensor {i} name")
    what = f"tensor {shown(name)}"
    (n_dims,) = cur.unpack(_U32, f"{what} n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.fail(f"{what} n_dims", f"{n_dims} is not in 1..{MAX_DIMS}")
    dims = cur.unpack(struct.Struct(f"<{n_dims}Q"), f"{what} dims")
    qtype_id, offset = cur.unpack(_TENSOR_TAIL, f"{what} type and offset")
    if min(dims) < 1 or math.prod(dims) > cur.size * 8:  # no type stores more than 8 values a byte
        raise cur.fail(f"{what} dims", f"{list(dims)} is not a shape this file can hold")
    try:
        qtype = GGMLQuantizationType(qtype_id)
        block, _ = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise cur.fail(f"{what} type", f"unknown GGML type id {qtype_id}") from None
    if dims[0] % block:
        raise cur.fail(
            f"{what} dims", f"a row of {dims[0]} values is not whole {qtype.name} blocks of {block}"
        )
    return name, tuple(int(d) for d in reversed(dims)), qtype, int(offset)
