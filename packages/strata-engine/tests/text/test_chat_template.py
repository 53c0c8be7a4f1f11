"""Chat templates: SmolLM2's ChatML, the variables templates expect, and every failure as
a ChatTemplateError (never a crash, never a sandbox escape)."""

from __future__ import annotations

import datetime
from pathlib import Path

import gguf
import pytest

from strata_engine.api import RequestError
from strata_engine.text.chat_template import ChatTemplate, ChatTemplateError

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
USER = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def smollm_template(model_path: Path) -> ChatTemplate:
    """The default model's template, from the model store (STRATA_HOME / XDG aware)."""
    source = gguf.GGUFReader(model_path).fields["tokenizer.chat_template"].contents()
    return ChatTemplate(source, bos_token="<|im_start|>", eos_token="<|im_end|>")


# --- SmolLM2's ChatML ----------------------------------------------------------------------


def test_smollm2_prepends_its_default_system_prompt(smollm_template: ChatTemplate) -> None:
    assert smollm_template.render(USER) == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_smollm2_without_generation_prompt(smollm_template: ChatTemplate) -> None:
    assert smollm_template.render(USER, add_generation_prompt=False) == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    )


def test_smollm2_keeps_a_given_system_prompt_and_history(smollm_template: ChatTemplate) -> None:
    messages = [
        {"role": "system", "content": "Answer with one word."},
        {"role": "user", "content": "Capital of Italy?"},
        {"role": "assistant", "content": "Rome"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "And "}, {"type": "text", "text": "Spain?"}],
        },
    ]
    assert smollm_template.render(messages) == (
        "<|im_start|>system\nAnswer with one word.<|im_end|>\n"
        "<|im_start|>user\nCapital of Italy?<|im_end|>\n"
        "<|im_start|>assistant\nRome<|im_end|>\n"
        "<|im_start|>user\nAnd Spain?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


# --- what templates may use ----------------------------------------------------------------


def test_variables_and_helpers_templates_expect() -> None:
    template = ChatTemplate(
        "{{ bos_token }}{% for m in messages %}{{ m['role'] }}={{ m['content'] | tojson }};"
        "{% endfor %}{{ strftime_now('%Y') }}|{{ tools | length }}{{ eos_token }}",
        bos_token="<s>",
        eos_token="</s>",
    )
    out = template.render([{"role": "user", "content": '<b>é"</b>'}], tools=[1, 2])
    year = datetime.datetime.now().year
    assert out == f'<s>user="<b>é\\"</b>";{year}|2</s>'


def test_blocks_trimmed_like_hugging_face() -> None:
    template = ChatTemplate(
        "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n"
        "    {% endif %}\n{% endfor %}"
    )
    assert template.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == (
        "[a]\n[b]\n"
    )


def test_optional_variables_may_be_undefined() -> None:
    template = ChatTemplate("{% if tools %}tools{% else %}none{% endif %}")
    assert template.render(USER) == "none"


# --- failures become ChatTemplateError -----------------------------------------------------


def test_raise_exception_reports_the_templates_message() -> None:
    template = ChatTemplate(
        "{% if messages[0]['role'] != 'system' %}"
        "{{ raise_exception('Conversation must start with a system message') }}{% endif %}"
    )
    with pytest.raises(ChatTemplateError, match="must start with a system message") as info:
        template.render(USER)
    assert isinstance(info.value, RequestError)


def test_syntax_error_is_reported_on_render_not_on_load() -> None:
    template = ChatTemplate("{% for m in messages %}{{ m.content }")  # unclosed
    assert template.compile_error and "does not compile" in template.compile_error
    with pytest.raises(ChatTemplateError, match="does not compile"):
        template.render(USER)


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ messages.append({'role': 'x'}) }}",  # immutable sandbox
    ],
)
def test_sandbox_blocks_unsafe_access(source: str) -> None:
    with pytest.raises(ChatTemplateError, match="unsafe"):
        ChatTemplate(source).render(USER)


@pytest.mark.parametrize(
    "source",
    ["{{ nothing.attr }}", "{{ 'a' + missing }}", "{{ 1 / 0 }}", "{{ messages[5]['content'] }}"],
)
def test_runtime_errors_are_template_errors(source: str) -> None:
    with pytest.raises(ChatTemplateError, match="chat template failed"):
        ChatTemplate(source).render(USER)


@pytest.mark.parametrize(
    ("messages", "named"),
    [
        ([], "non-empty list"),
        ("hello", "non-empty list"),
        ([{"content": "hi"}], r"messages\[0\]\.role"),
        ([{"role": 3, "content": "hi"}], r"messages\[0\]\.role"),
        ([{"role": "user"}], r"messages\[0\] has no content"),
        ([{"role": "user", "content": 5}], r"messages\[0\]\.content"),
        (
            [USER[0], {"role": "user", "content": [{"type": "image_url"}]}],
            r"messages\[1\]\.content",
        ),
        ([USER[0], "not a dict"], r"messages\[1\] must be an object"),
    ],
)
def test_malformed_messages_are_named(messages: object, named: str) -> None:
    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(ChatTemplateError, match=named) as info:
        template.render(messages)  # type: ignore[arg-type]
    assert info.value.param == "messages"


def test_template_still_works_after_an_error() -> None:
    template = ChatTemplate("{{ messages[0]['content'] }}")
    with pytest.raises(ChatTemplateError):
        template.render([{"role": "user", "content": 1}])
    assert template.render(USER) == USER[0]["content"]
