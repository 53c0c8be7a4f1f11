"""vLLM's tokenizer routes (`/tokenize`, `/detokenize`, `/tokenizer_info`) and `/v1/models`.

lm-evaluation-harness uses the first three as a remote tokenizer, so a client needs no
model hub to count or render tokens exactly as the server does.
"""

from __future__ import annotations

import time
from typing import Any

from strata_server.checks import check_ids_in_vocab, check_model
from strata_server.context import ServerContext
from strata_server.errors import ApiError
from strata_server.protocol import DetokenizeRequest, TokenizeRequest
from strata_server.render import chat_prompt_ids


def tokenize(body: TokenizeRequest, ctx: ServerContext) -> dict[str, Any]:
    """Text (`add_special_tokens` default true) or chat messages (default false, as vLLM)."""
    check_model(body.model, ctx.served_name)
    if (body.prompt is None) == (body.messages is None):
        raise ApiError("Send exactly one of `prompt` or `messages`.", param="prompt")
    if body.prompt is not None:
        add_special = True if body.add_special_tokens is None else body.add_special_tokens
        ids = ctx.tokenizer.encode(body.prompt, add_special=add_special, parse_special=True)
    else:
        ids = chat_prompt_ids(
            body.messages or [],
            ctx.engine.chat_template,
            ctx.tokenizer,
            add_generation_prompt=body.add_generation_prompt,
        )
        if body.add_special_tokens:
            bos = ctx.tokenizer.bos_id
            if bos is not None and (not ids or ids[0] != bos):
                ids.insert(0, bos)
    return {
        "count": len(ids),
        "max_model_len": ctx.limits.ctx_size,
        "tokens": ids,
        "token_strs": None,
    }


def detokenize(body: DetokenizeRequest, ctx: ServerContext) -> dict[str, Any]:
    check_model(body.model, ctx.served_name)
    check_ids_in_vocab(body.tokens, ctx.limits.vocab_size, "tokens")
    return {"prompt": ctx.tokenizer.decode(body.tokens)}


def tokenizer_info(ctx: ServerContext) -> dict[str, Any]:
    tok = ctx.tokenizer

    def text(token_id: int | None) -> str | None:
        return None if token_id is None else tok.token_text(token_id)

    template = ctx.engine.chat_template
    return {
        "eos_token": text(tok.eos_id),
        "bos_token": text(tok.bos_id),
        "pad_token": text(tok.pad_id),
        "chat_template": template.source if template is not None else None,
        "tokenizer_class": type(tok).__name__,
        "model_max_length": ctx.limits.ctx_size,
        "add_bos_token": tok.add_bos,
    }


def models(ctx: ServerContext) -> dict[str, Any]:
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
            }
        ],
    }
