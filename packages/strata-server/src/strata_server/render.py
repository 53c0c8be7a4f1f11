"""Prompts to token ids: the four completion prompt forms; chat messages to the engine's form.

Chat messages are rendered by the engine (`render_chat`: template, message checks and the
BOS rule in one place). Text is encoded with special-token parsing on (a client that renders its own chat prompt
as text gets `<|im_start|>` as one id, as with Hugging Face tokenizers). Token-id prompts are
used as given: no BOS is added to them.
"""

from __future__ import annotations

from typing import Any

from strata_engine.api import ChatOptions
from strata_engine.protocol import EngineTokenizer
from strata_engine.text.chat_template import compiled
from strata_server.errors import ApiError
from strata_server.protocol import ChatMessage, PromptInput

# template variables the server sets itself; `chat_template` is its own field (a template is
# code the server runs: --trust-request-chat-template decides, not a template variable)
RESERVED_TEMPLATE_KWARGS = frozenset({"messages", "add_generation_prompt", "chat_template"})

PROMPT_FORMS = "a string, a list of strings, a list of token ids, or a list of token-id lists"


def completion_prompts(
    prompt: PromptInput, tokenizer: EngineTokenizer, add_special: bool = True
) -> list[list[int]]:
    """Each prompt of a completions request as ids, in prompt order (`add_special`: vLLM's
    `add_special_tokens`, the BOS a text prompt gets when the model wants one)."""
    if isinstance(prompt, str):
        return [encode_text(prompt, tokenizer, add_special)]
    if not prompt:
        raise ApiError("`prompt` must not be empty.", param="prompt")
    if all(isinstance(p, str) for p in prompt):
        return [encode_text(p, tokenizer, add_special) for p in prompt]  # type: ignore[arg-type]
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]  # type: ignore[arg-type]
    if all(isinstance(p, list) for p in prompt):
        for ids in prompt:
            if not ids:
                raise ApiError("`prompt` contains an empty token-id list.", param="prompt")
        return [list(ids) for ids in prompt]  # type: ignore[arg-type]
    raise ApiError(f"`prompt` must be {PROMPT_FORMS}; do not mix forms.", param="prompt")


def encode_text(text: str, tokenizer: EngineTokenizer, add_special: bool = True) -> list[int]:
    """Text prompt -> ids (BOS only when the model wants one); an empty text is refused."""
    if text == "":
        raise ApiError("`prompt` must not be an empty string.", param="prompt")
    return tokenizer.encode(text, add_special=add_special, parse_special=True)


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Chat messages as the plain dicts the engine renders (`content: null` becomes "").

    The engine checks them (non-empty, roles, text parts only) when it renders.
    """
    out = []
    for message in messages:
        content: str | list[dict[str, Any]]
        if isinstance(message.content, list):
            content = [{"type": part.type, "text": part.text} for part in message.content]
        else:
            content = message.content or ""
        entry: dict[str, Any] = {"role": message.role, "content": content}
        if message.name is not None:
            entry["name"] = message.name
        out.append(entry)
    return out


def chat_options(
    *,
    add_generation_prompt: bool,
    add_special: bool,
    chat_template: str | None,
    chat_template_kwargs: dict[str, Any] | None,
    trusted: bool,
    documents: list[dict[str, Any]] | None = None,
) -> ChatOptions:
    """vLLM's chat-template fields (chat and `/tokenize` alike) as the engine's options.

    A request's own `chat_template` is refused unless the server trusts request templates
    (`--trust-request-chat-template`, as vLLM), and one that does not compile is a 400 naming
    it; `chat_template_kwargs` may not set the variables the server sets.
    """
    kwargs = dict(chat_template_kwargs or {})
    if documents is not None:  # vLLM's RAG documents: a template variable (a template may ignore them)
        kwargs.setdefault("documents", documents)
    if reserved := RESERVED_TEMPLATE_KWARGS & kwargs.keys():
        raise ApiError(
            f"`chat_template_kwargs` may not set {sorted(reserved)}.", param="chat_template_kwargs"
        )
    if chat_template is not None:
        if not trusted:
            raise ApiError(
                "A request's `chat_template` is refused: the server was started without "
                "--trust-request-chat-template (a template is code the server runs).",
                param="chat_template",
                code="untrusted_chat_template",
            )
        if (error := compiled(chat_template).compile_error) is not None:
            raise ApiError(error, param="chat_template")
    return ChatOptions(
        add_generation_prompt=add_generation_prompt,
        add_special=add_special,
        template_kwargs=kwargs,
        template=chat_template,
    )
