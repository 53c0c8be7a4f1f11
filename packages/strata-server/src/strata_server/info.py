"""What the server says about itself: `/v1/models` and `/health` bodies."""

from __future__ import annotations

import time
from typing import Any

from strata_server.context import ServerContext


def models(ctx: ServerContext) -> dict[str, Any]:
    """The one served model, in OpenAI's list shape (plus vLLM's `root` and `max_model_len`)."""
    return {
        "object": "list",
        "data": [
            {
                "id": ctx.served_name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "strata",
                "root": ctx.engine.model_name,
                "max_model_len": ctx.limits.ctx_size,
                "sha256": None if ctx.provenance is None else ctx.provenance.model_sha256,
            }
        ],
    }


def health(ctx: ServerContext) -> dict[str, Any]:
    """Loaded, which model, and which kernels (nothing degrades silently); "failed" and why
    once the engine can serve nothing any more."""
    body: dict[str, Any] = {
        "status": "ok" if ctx.engine.failure is None else "failed",
        "model": ctx.served_name,
        "kernels": ctx.engine.kernels,
        "invariant": ctx.engine.invariant,
    }
    if ctx.engine.failure is not None:
        body["error"] = ctx.engine.failure
    return body
