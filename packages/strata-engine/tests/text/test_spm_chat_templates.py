"""The chat templates SentencePiece-vocabulary models ship (Llama 2, Mistral, Gemma, Gemma 3,
Phi-3, TinyLlama/Zephyr, and Llama 3.1's date helper) render, reject what they reject with
`raise_exception`, and turn into ids with one BOS through the SentencePiece tokenizer."""

from __future__ import annotations

import re

import pytest

from strata_engine.testing.spm_vocab import load_golden, tokenizer_metadata
from strata_engine.testing.templates import GEMMA3
from strata_engine.text.chat_template import ChatTemplate, ChatTemplateError, render_ids
from strata_engine.text.load import load_tokenizer

_ALTERNATE = (
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
)
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}" + _ALTERNATE + "{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}" + _ALTERNATE + "{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are "
    "supported!') }}{% endif %}{% endfor %}"
)
GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}" + _ALTERNATE + "{% if (message['role'] == 'assistant') %}"
    "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role"
    " + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{'<start_of_turn>model\n'}}{% endif %}"
)
PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
    "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}"
    "{% endif %}"
)
ZEPHYR = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}"
    "\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)
LLAMA31_DATE = (
    '{%- if not date_string is defined %}{%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b'
    ' %Y") %}{%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}{%- endif %}'
    "{{ 'Today Date: ' + date_string + '\\n' }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
)

CHAT = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": [{"type": "text", "text": "Is the sky blue? "}]},
]
WITH_SYSTEM = [{"role": "system", "content": "Be brief."}, *CHAT]


def _template(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="<s>", eos_token="</s>")


@pytest.mark.parametrize(
    ("source", "messages", "want"),
    [
        (
            LLAMA2,
            WITH_SYSTEM,
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Is the sky blue? [/INST]",
        ),
        (MISTRAL, CHAT, "<s>[INST] Hi [/INST]Hello!</s>[INST] Is the sky blue?  [/INST]"),
        (
            GEMMA,
            CHAT,
            "<s><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nIs the sky blue?<end_of_turn>\n<start_of_turn>model\n",
        ),
        (
            GEMMA3,
            WITH_SYSTEM,
            "<s><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nIs the sky blue?<end_of_turn>\n<start_of_turn>model\n",
        ),
        (
            PHI3,
            WITH_SYSTEM,
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
            "<|user|>\nIs the sky blue? <|end|>\n<|assistant|>\n",
        ),
        (
            ZEPHYR,
            WITH_SYSTEM,
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n"
            "<|user|>\nIs the sky blue? </s>\n<|assistant|>\n",
        ),
    ],
    ids=["llama2", "mistral", "gemma", "gemma3", "phi3", "zephyr"],
)
def test_shipped_templates_render(source: str, messages: list, want: str) -> None:
    assert _template(source).render(messages) == want


@pytest.mark.parametrize(
    ("source", "messages", "message"),
    [
        (LLAMA2, [CHAT[1], CHAT[0]], "alternate"),
        (MISTRAL, [CHAT[0], {"role": "system", "content": "x"}], "Only user and assistant"),
        (GEMMA, WITH_SYSTEM, "System role not supported"),
        (GEMMA3, [*CHAT, CHAT[0]], "alternate"),
    ],
)
def test_shipped_templates_reject_with_their_message(source: str, messages: list, message: str) -> None:
    with pytest.raises(ChatTemplateError, match=message) as info:
        _template(source).render(messages)
    assert info.value.param == "messages"


def test_strftime_now_gives_todays_date_to_llama31_templates() -> None:
    text = _template(LLAMA31_DATE).render(CHAT)
    assert re.fullmatch(r"Today Date: \d\d [A-Z][a-z]{2} \d{4}\nHiHello!Is the sky blue\? ", text)
    assert (
        _template(LLAMA31_DATE).render(CHAT, date_string="1 Jan 2000").startswith("Today Date: 1 Jan 2000\n")
    )


def test_rendered_prompt_tokenizes_with_one_bos() -> None:
    """The template writes "<s>" itself; SentencePiece parses it as BOS and no second one is added."""
    tokenizer = load_tokenizer(tokenizer_metadata(load_golden()["vocab"]))
    ids = render_ids(_template(MISTRAL), tokenizer, CHAT)
    assert ids[0] == tokenizer.bos_id and ids.count(tokenizer.bos_id) == 1
    inst = tokenizer.encode("[INST]", add_special=False)
    assert ids[1:2] == inst and ids.count(inst[0]) == 2
    # llama.cpp's leading-space rule: raw text after each special token gets a "▁" in front
    assert tokenizer.decode(ids) == "<s>[INST]  Hi [/INST] Hello!</s>[INST]  Is the sky blue?  [/INST]"
