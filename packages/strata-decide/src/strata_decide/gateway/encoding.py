"""Request bodies sent compressed (``Content-Encoding``), as typed-decision SDKs may send them.

The official SDK compresses bodies of 1 KiB and more with zstd when zstd is available to it,
so the gateway reads ``zstd`` (with ``backports.zstd`` or Python 3.14's ``compression.zstd``),
``gzip`` and ``deflate``. Decompressed bodies are capped, so a small bomb cannot eat memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from .errors import Refusal

MAX_BODY_BYTES = 16 * 1024 * 1024


def _zstd() -> Callable[[bytes], bytes] | None:
    try:
        from compression.zstd import ZstdDecompressor  # type: ignore[import-not-found]
    except ImportError:
        try:
            from backports.zstd import ZstdDecompressor  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return None

    def decompress(data: bytes) -> bytes:
        out = ZstdDecompressor().decompress(data, max_length=MAX_BODY_BYTES + 1)
        return out

    return decompress


def _zlib(wbits: int) -> Callable[[bytes], bytes]:
    def decompress(data: bytes) -> bytes:
        return zlib.decompressobj(wbits).decompress(data, MAX_BODY_BYTES + 1)

    return decompress


DECOMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": _zlib(16 + zlib.MAX_WBITS),
    "deflate": _zlib(zlib.MAX_WBITS),
}
if (zstd := _zstd()) is not None:
    DECOMPRESSORS["zstd"] = zstd


def decode_body(body: bytes, content_encoding: str | None) -> bytes:
    """The body with its content encoding undone; 415 for an unknown one or for more than one
    layer (no client compresses twice, and each layer multiplies what a few bytes become), 400
    for bad data."""
    encodings = [e for e in (e.strip().lower() for e in (content_encoding or "").split(",")) if e]
    encodings = [e for e in encodings if e != "identity"]
    if len(encodings) > 1:
        raise Refusal(
            415, "unsupported_encoding", f"one Content-Encoding at most, got {len(encodings)} layers"
        )
    for encoding in encodings:
        decompress = DECOMPRESSORS.get(encoding)
        if decompress is None:
            supported = ", ".join(["identity", *DECOMPRESSORS])
            raise Refusal(
                415,
                "unsupported_encoding",
                f"Content-Encoding {encoding!r} is not supported ({supported})",
            )
        try:
            body = decompress(body)
        except Exception as error:  # each library raises its own error type for corrupt data
            raise Refusal(
                400, "invalid_encoding", f"the body is not valid {encoding} data: {error}"
            ) from error
        if len(body) > MAX_BODY_BYTES:
            raise Refusal(413, "request_too_large", f"the decompressed body exceeds {MAX_BODY_BYTES} bytes")
    return body
