"""vLLM's tokenizer routes: `/tokenize`, `/detokenize`, `/tokenizer_info`.

lm-evaluation-harness uses the first three as a remote tokenizer, so a client needs no
model hub to count or render tokens exactly as the server does. Tokenizing and detokenizing
run on the keyless routes' own pool (`open_pool`, open_routes.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import MediaType, Request, Response, get, post
from litestar.di import NamedDependency

from strata_engine.api import RequestError
from strata_engine.checks import check_ids
from strata_server.checks import check_input_size, check_messages_size, check_model
from strata_server.context import ServerContext
from strata_server.errors import ApiError, engine_refusal
from strata_server.open_routes import OpenPool
from strata_server.openapi import body_of
from strata_server.protocol import DetokenizeRequest, TokenizeRequest, decode_request, encode
from strata_server.render import chat_options
from strata_server.replies import json_response


def tokenize(body: TokenizeRequest, ctx: ServerContext) -> dict[str, Any]:
    """Text (`add_special_tokens` default true) or chat messages (default false, as vLLM)."""
    check_model(body.model, ctx.served_name)
    if (body.prompt is None) == (body.messages is None):
        raise ApiError("Send exactly one of `prompt` or `messages`.", param="prompt")
    if body.prompt is not None:
        for name in ("chat_template", "chat_template_kwargs"):
            if getattr(body, name) is not None:
                raise ApiError(f"`{name}` applies to `messages`, not to `prompt`.", param=name)
        check_input_size(len(body.prompt), ctx.limits.request, "prompt", "The prompt has")
        add_special = True if body.add_special_tokens is None else body.add_special_tokens
        ids = ctx.tokenizer.encode(body.prompt, add_special=add_special, parse_special=True)
    else:
        check_messages_size(body.messages or [], ctx.limits.request)
        options = chat_options(
            add_generation_prompt=body.add_generation_prompt,
            add_special=bool(body.add_special_tokens),
            chat_template=body.chat_template,
            chat_template_kwargs=body.chat_template_kwargs,
            trusted=ctx.settings.trust_request_chat_template,
        )
        ids = ctx.render_chat(body.messages or [], options)
    return {
        "count": len(ids),
        "max_model_len": ctx.limits.ctx_size,
        "tokens": ids,
        "token_strs": None,
    }


def detokenize(body: DetokenizeRequest, ctx: ServerContext) -> dict[str, Any]:
    check_model(body.model, ctx.served_name)
    check_input_size(len(body.tokens), ctx.limits.request, "tokens", "`tokens` has")
    try:
        check_ids(body.tokens, ctx.limits.vocab_size, "tokens")
    except RequestError as exc:
        raise engine_refusal(exc) from None
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


async def on_open_pool(request: Request, open_pool: OpenPool, answer: Callable[[bytes], Any]) -> Response:
    """Read the body (after the pool's room check) and `answer` it on the keyless routes' pool."""
    open_pool.check_room()
    raw = await request.body()
    content = await open_pool.run(lambda: encode(answer(raw)))
    return Response(content=content, status_code=200, media_type=MediaType.JSON)


@post("/tokenize", status_code=200, operation_class=body_of(TokenizeRequest))
async def tokenize_route(
    request: Request, ctx: NamedDependency[ServerContext], open_pool: NamedDependency[OpenPool]
) -> Response:
    """vLLM tokenize: `prompt` or `messages` (+ `add_generation_prompt`) -> ids."""
    return await on_open_pool(
        request, open_pool, lambda raw: tokenize(decode_request(raw, TokenizeRequest), ctx)
    )


@post("/detokenize", status_code=200, operation_class=body_of(DetokenizeRequest))
async def detokenize_route(
    request: Request, ctx: NamedDependency[ServerContext], open_pool: NamedDependency[OpenPool]
) -> Response:
    """vLLM detokenize: `tokens` -> `prompt` text."""
    return await on_open_pool(
        request, open_pool, lambda raw: detokenize(decode_request(raw, DetokenizeRequest), ctx)
    )


@get("/tokenizer_info")
async def tokenizer_info_route(ctx: NamedDependency[ServerContext]) -> Response:
    """Special tokens and chat template (lm-evaluation-harness's remote tokenizer)."""
    return json_response(tokenizer_info(ctx))


TOKENIZER_ROUTES = [tokenize_route, detokenize_route, tokenizer_info_route]
