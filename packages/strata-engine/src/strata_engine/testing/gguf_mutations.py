"""Where each header field of a GGUF lies (found by gguf-py's own reader, not the engine's
parser), and seeded mutations of a file at those places: the malformed files of the
model-file tests and the fuzz test."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader


@dataclass(frozen=True)
class Field:
    """One number in the header: `label` is "<key or tensor name>:<part index>"."""

    label: str
    offset: int
    nbytes: int


def header_fields(path: Path) -> list[Field]:
    """Every integer part of the header (counts, lengths, value types, values, n_dims, dims,
    tensor types and offsets), in file order."""
    reader = GGUFReader(path)
    groups = [(name, f.offset, f.parts) for name, f in reader.fields.items()]
    groups += [(t.name, t.field.offset, t.field.parts) for t in reader.tensors]
    out = []
    for name, offset, parts in groups:
        for j, part in enumerate(parts):
            if np.issubdtype(part.dtype, np.integer) and part.dtype.itemsize > 1:
                for k in range(part.size):
                    size = part.dtype.itemsize
                    out.append(
                        Field(f"{name}:{j}" + (f"[{k}]" if part.size > 1 else ""), offset + k * size, size)
                    )
            offset += part.nbytes
    return sorted(out, key=lambda f: f.offset)


def field(fields: list[Field], label: str) -> Field:
    return next(f for f in fields if f.label == label)


def put(data: bytearray, f: Field, value: int) -> None:
    """Write `value` into the field (two's complement, wrapped to its width)."""
    data[f.offset : f.offset + f.nbytes] = (value % 2 ** (8 * f.nbytes)).to_bytes(f.nbytes, "little")


def get(data: bytes, f: Field) -> int:
    return int.from_bytes(data[f.offset : f.offset + f.nbytes], "little")


def mutate(data: bytes, fields: list[Field], seed: int) -> tuple[bytes, str]:
    """One seeded mutation of the file: (new bytes, what was done). Kinds, in turn: a header
    number set to an edge value, a number nudged, random bytes in the header, a cut, random
    bytes in the tensor data."""
    rng = random.Random(seed)
    out = bytearray(data)
    header_end = fields[-1].offset + fields[-1].nbytes
    kind = seed % 5
    groups = sorted({f.label.rsplit(":", 1)[0] for f in fields})
    group = rng.choice(groups)  # a key or a tensor first, so the vocabulary's parts do not dominate
    f = rng.choice([f for f in fields if f.label.rsplit(":", 1)[0] == group])
    if kind == 0:
        edges = [0, 1, 2, 3, 7, 31, 255, 2**31 - 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, len(data), -1]
        value = rng.choice(edges)
        put(out, f, value)
        return bytes(out), f"{f.label} = {value}"
    if kind == 1:
        value = get(data, f) + rng.choice([-2, -1, 1, 2, 32, -32, 256])
        put(out, f, value)
        return bytes(out), f"{f.label} = {value}"
    if kind == 2:
        spots = [rng.randrange(header_end) for _ in range(rng.randint(1, 8))]
        for spot in spots:
            out[spot] = rng.randrange(256)
        return bytes(out), f"random header bytes at {spots}"
    if kind == 3:
        cut = rng.choice([rng.randrange(header_end), rng.randrange(header_end, len(data)), f.offset + 1])
        return bytes(out[:cut]), f"cut at {cut} of {len(data)}"
    spots = [rng.randrange(header_end, len(data)) for _ in range(rng.randint(1, 64))]
    for spot in spots:
        out[spot] = rng.randrange(256)
    return bytes(out), f"{len(spots)} random tensor-data bytes"
