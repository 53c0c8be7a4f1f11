"""Read a GGUF file: metadata as plain Python values, tensors as zero-copy views of the file.

gguf-py's GGUFReader spends seconds turning ~100k vocabulary strings into numpy objects;
this parser reads the same header in a fraction of that, which keeps start-up short.
Tensor data is memory-mapped and left in its stored (possibly quantised) block format.
"""

from __future__ import annotations

import mmap
import struct
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


class _Cursor:
    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def scalar(self, vtype: int) -> Any:
        fmt, size = _SCALARS[vtype]
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        (n,) = struct.unpack_from("<Q", self.buf, self.pos)
        start = self.pos + 8
        self.pos = start + n
        return bytes(self.buf[start : self.pos]).decode("utf-8", errors="replace")

    def strings(self, count: int) -> list[str]:
        """`count` strings in a row (a vocabulary, its merges): one tight loop, no call each."""
        buf, pos, out = self.buf, self.pos, []
        length = _LENGTH.unpack_from
        for _ in range(count):
            (n,) = length(buf, pos)
            pos += 8
            out.append(str(buf[pos : pos + n], "utf-8", "replace"))
            pos += n
        self.pos = pos
        return out

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            (itype, count) = struct.unpack_from("<IQ", self.buf, self.pos)
            self.pos += 12
            if itype == _STRING:
                return self.strings(count)
            if itype in _NUMPY_OF:
                arr = np.frombuffer(self.buf, dtype=_NUMPY_OF[itype], count=count, offset=self.pos)
                self.pos += arr.nbytes
                return arr.tolist()
            return [self.value(itype) for _ in range(count)]
        if vtype not in _SCALARS:
            raise ModelLoadError(f"GGUF: unknown metadata value type {vtype}")
        return self.scalar(vtype)


class GGUFFile:
    """An open GGUF file: `metadata` (key -> value) and `tensors` (name -> TensorInfo)."""

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
        cur = _Cursor(buf)
        cur.pos = 4
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        cur.pos = 24
        if version < 2:
            raise ModelLoadError(f"GGUF version {version} is not supported (need 2 or 3)")
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            (vtype,) = struct.unpack_from("<I", buf, cur.pos)
            cur.pos += 4
            self.metadata[key] = cur.value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            (n_dims,) = struct.unpack_from("<I", buf, cur.pos)
            dims = struct.unpack_from(f"<{n_dims}Q", buf, cur.pos + 4)
            qtype, offset = struct.unpack_from("<IQ", buf, cur.pos + 4 + 8 * n_dims)
            cur.pos += 4 + 8 * n_dims + 12
            infos.append((name, tuple(int(d) for d in reversed(dims)), qtype, offset))
        align = int(self.metadata.get("general.alignment", 32))
        data_start = (cur.pos + align - 1) // align * align
        raw = np.frombuffer(self._mmap, dtype=np.uint8)
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, qtype_id, offset in infos:
            try:
                qtype = GGMLQuantizationType(qtype_id)
            except ValueError as exc:
                raise ModelLoadError(f"tensor {name}: unknown GGML type id {qtype_id}") from exc
            block, type_size = GGML_QUANT_SIZES[qtype]
            nbytes = int(np.prod(shape)) // block * type_size
            start = data_start + offset
            self.tensors[name] = TensorInfo(name, shape, qtype, raw[start : start + nbytes])

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def release_pages(self) -> None:
        """Let the OS drop the file pages read so far: the loaded model holds its own copies
        (blocks repacked, scales widened), and the pages are clean, so anything that reads
        the file again faults them back in. Keeps the file out of the server's resident memory."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._mmap.madvise(mmap.MADV_DONTNEED)
