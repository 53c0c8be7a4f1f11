"""Prompts to token ids: the four completion prompt forms, and chat messages via the template.

Text is encoded with special-token parsing on (a client that renders its own chat prompt
as text gets `<|im_start|>` as one id, as with Hugging Face tokenizers). Token-id prompts are
used as given: no BOS is added to them.
"""

from __future__ import annotations

from typing import Any, Protocol

from strata_server.errors import ApiError
from strata_server.protocol import ChatMessage, PromptInput

PROMPT_FORMS = "a string, a list of strings, a list of token ids, or a list of token-id lists"


class TokenizerLike(Protocol):
    bos_id: int | None
    add_bos: bool

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...


class ChatTemplateLike(Protocol):
    def render(self, messages: list[dict], add_generation_prompt: bool = True, **extra: Any) -> str: ...


def completion_prompts(prompt: PromptInput, tokenizer: TokenizerLike) -> list[list[int]]:
    """Each prompt of a completions request as ids, in prompt order."""
    if isinstance(prompt, str):
        return [encode_text(prompt, tokenizer)]
    if not prompt:
        raise ApiError("`prompt` must not be empty.", param="prompt")
    if all(isinstance(p, str) for p in prompt):
        return [encode_text(p, tokenizer) for p in prompt]  # type: ignore[arg-type]
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]  # type: ignore[arg-type]
    if all(isinstance(p, list) for p in prompt):
        for ids in prompt:
            if not ids:
                raise ApiError("`prompt` contains an empty token-id list.", param="prompt")
        return [list(ids) for ids in prompt]  # type: ignore[arg-type]
    raise ApiError(f"`prompt` must be {PROMPT_FORMS}; do not mix forms.", param="prompt")


def encode_text(text: str, tokenizer: TokenizerLike, add_special: bool = True) -> list[int]:
    """Text prompt -> ids (BOS only when the model wants one); an empty text is refused."""
    if text == "":
        raise ApiError("`prompt` must not be an empty string.", param="prompt")
    return tokenizer.encode(text, add_special=add_special, parse_special=True)


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Chat messages as the plain dicts a chat template expects (text parts joined)."""
    if not messages:
        raise ApiError("`messages` must not be empty.", param="messages")
    out = []
    for message in messages:
        content = message.content
        if isinstance(content, list):
            texts = []
            for part in content:
                if part.type != "text" or part.text is None:
                    raise ApiError(
                        f"Only text content parts are supported, got type `{part.type}`.",
                        param="messages",
                    )
                texts.append(part.text)
            content = "".join(texts)
        entry: dict[str, Any] = {"role": message.role, "content": content or ""}
        if message.name is not None:
            entry["name"] = message.name
        out.append(entry)
    return out


def chat_prompt_ids(
    messages: list[ChatMessage],
    template: ChatTemplateLike | None,
    tokenizer: TokenizerLike,
    add_generation_prompt: bool = True,
    template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Render messages through the model's template and encode the result.

    Templates usually write their own BOS text; one BOS is added only when the model wants
    it and the rendered text does not already start with it.
    """
    if template is None:
        raise ApiError(
            "This model has no chat template; use /v1/completions with a rendered prompt.",
            param="messages",
        )
    text = template.render(
        message_dicts(messages),
        add_generation_prompt=add_generation_prompt,
        **(template_kwargs or {}),
    )
    ids = tokenizer.encode(text, add_special=False, parse_special=True)
    bos = tokenizer.bos_id
    if tokenizer.add_bos and bos is not None and (not ids or ids[0] != bos):
        ids.insert(0, bos)
    return ids
