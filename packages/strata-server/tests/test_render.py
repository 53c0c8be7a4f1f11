"""Prompt forms, and chat messages through the engine's one rendering (BOS rule, parts, refusals)."""

from __future__ import annotations

import pytest

from strata_engine.api import ChatOptions, RequestError
from strata_engine.text.chat_template import ChatTemplate, render_ids
from strata_server.errors import ApiError
from strata_server.protocol import ChatMessage, TextPart
from strata_server.render import completion_prompts, message_dicts


def echo_template(prefix: str = "") -> ChatTemplate:
    """Renders `role:content|` per message, `>` for the generation prompt."""
    return ChatTemplate(
        prefix + "{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}"
        "{% if add_generation_prompt %}>{% endif %}"
    )


def render(messages, template, tokenizer, **kwargs) -> list[int]:
    """What the chat route does: wire messages -> engine dicts -> the engine's rendering."""
    return render_ids(template, tokenizer, message_dicts(messages), ChatOptions(**kwargs))


class BosTokenizer:
    """Bytes as ids, with BOS 300 added to text when `add_special` (like a Llama tokenizer)."""

    bos_id = 300
    add_bos = True

    def encode(self, text, add_special=True, parse_special=True):
        ids = list(text.encode())
        if parse_special:
            ids = [300 if b == ord("^") else b for b in ids]  # "^" stands for the BOS text
        return [300, *ids] if add_special else ids


def test_the_four_prompt_forms(tokenizer) -> None:
    assert completion_prompts("hi", tokenizer) == [[104, 105]]
    assert completion_prompts(["a", "bc"], tokenizer) == [[97], [98, 99]]
    assert completion_prompts([5, 6], tokenizer) == [[5, 6]]
    assert completion_prompts([[5], [6, 7]], tokenizer) == [[5], [6, 7]]


def test_token_id_prompts_get_no_bos() -> None:
    tok = BosTokenizer()
    assert completion_prompts("a", tok) == [[300, 97]]
    assert completion_prompts([97], tok) == [[97]]
    assert completion_prompts([[97]], tok) == [[97]]


@pytest.mark.parametrize("prompt", ["", [], [[]], [[1], []], ["a", ""], ["a", 1], [1, [2]]])
def test_empty_and_mixed_prompts_are_refused(tokenizer, prompt) -> None:
    with pytest.raises(ApiError) as info:
        completion_prompts(prompt, tokenizer)
    assert info.value.param == "prompt" and info.value.status == 400


def test_chat_adds_one_bos_only_when_the_template_did_not() -> None:
    tok = BosTokenizer()
    messages = [ChatMessage(role="user", content="x")]
    assert render(messages, echo_template(), tok)[0] == 300
    with_bos = render(messages, echo_template(prefix="^"), tok)
    assert with_bos[:2] != [300, 300] and with_bos[0] == 300


def test_chat_without_bos_model_adds_none_unless_asked(tokenizer) -> None:
    messages = [ChatMessage(role="user", content="x")]
    assert bytes(render(messages, echo_template(), tokenizer)).decode() == "user:x|>"
    no_gen = render(messages, echo_template(), tokenizer, add_generation_prompt=False)
    assert bytes(no_gen).decode() == "user:x|"


def test_text_parts_are_joined_and_other_parts_refused(tokenizer) -> None:
    parts = [TextPart(type="text", text="a"), TextPart(type="text", text="b")]
    assert (
        bytes(render([ChatMessage(role="user", content=parts)], echo_template(), tokenizer)) == b"user:ab|>"
    )
    with pytest.raises(RequestError) as info:
        render([ChatMessage(role="user", content=[TextPart(type="image_url")])], echo_template(), tokenizer)
    assert info.value.param == "messages"
    with pytest.raises(RequestError):
        render([], echo_template(), tokenizer)


def test_no_template_is_a_refusal_on_messages(tokenizer) -> None:
    with pytest.raises(RequestError) as info:
        render([ChatMessage(role="user", content="x")], None, tokenizer)
    assert "chat template" in info.value.message and info.value.param == "messages"
