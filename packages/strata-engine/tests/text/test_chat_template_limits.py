"""A template is code from a stranger: nothing it asks for runs while compiling, and a render
has bounds on the sizes it makes, its output, its steps and its time; every failure is a
`ChatTemplateError` (a 400 naming `chat_template` for a request's template)."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from strata_engine.text import template_budget
from strata_engine.text.chat_template import ChatTemplate, ChatTemplateError, TemplateCache, compiled

USER = [{"role": "user", "content": "hi"}]


def refused(source: str, match: str) -> ChatTemplateError:
    with pytest.raises(ChatTemplateError, match=match) as info:
        compiled(source).render(USER)
    assert info.value.param == "chat_template"
    return info.value


@pytest.mark.parametrize(
    "source", ['{{ "a" * 50000000 }}', '{{ "a" | center(50000000) }}', "{{ (7**1200000) % 10 }}"]
)
def test_nothing_is_evaluated_while_compiling(source: str) -> None:
    tracemalloc.start()
    try:
        template = ChatTemplate(source, request=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert template.compile_error is None
    assert peak < 5 * 2**20, peak  # jinja2's folding made the 50 MB string (or a 3.4 Mbit int) here
    refused(source, "size limit")


@pytest.mark.parametrize(
    "source",
    [
        "{{ 2**100000 }}",
        '{{ "ab" * 3000000 }}',
        '{% set s = "a" * 4000000 %}{{ [s] * 100000 }}',  # one string listed 100,000 times
        '{% set s = "a" * 4000000 %}{{ ([s] * 100000) | join }}',
        '{% set s = "a" * 4000000 %}{{ ([s] * 100000) | tojson }}',
        '{% set ns = namespace(s="a") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}',
        '{{ ("\\n" * 1000000) | indent(1000) }}',
        '{{ ("a" * 1000000).replace("a", "b" * 1000) }}',
        '{{ "%100000000d" % 1 }}',
        '{{ "{:>100000000}".format(1) }}',
        "{{ [[1] * 100000] * 100000 | sum(start=[]) }}",
        '{{ range(100000) | map("string") | map("center", 4000000) | list | length }}',
    ],
)
def test_sizes_past_the_limits_are_refused_before_they_are_made(source: str) -> None:
    started = time.perf_counter()
    refused(source, "size limit|made more than")
    assert time.perf_counter() - started < 1.5


def test_the_output_has_a_character_budget() -> None:
    refused('{% for i in range(100000) %}{{ "x" * 100 }}{% endfor %}', "output is longer")


@pytest.mark.parametrize(
    "source",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
    ],
)
def test_unbounded_work_stops_at_the_deadline(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_budget, "RENDER_SECONDS", 0.3)
    started = time.perf_counter()
    refused(source, "took more than")
    assert time.perf_counter() - started < 2.0


def test_steps_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_budget, "MAX_STEPS", 1000)
    refused("{% for i in range(2000) %}{% endfor %}", "1,000 loop iterations and calls")
    assert compiled("{% for i in range(500) %}{% endfor %}ok").render(USER) == "ok"


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("{{" * 5000, "RecursionError"),
        ("{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}", "RecursionError"),
        ("{{ " + "1" * 5000 + " }}", "ValueError"),
        ("{{ 1 }}" + " " * template_budget.MAX_SOURCE_CHARS, "characters; at most"),
    ],
)
def test_every_compile_failure_is_the_templates_error(source: str, why: str) -> None:
    template = compiled(source)  # never raises
    assert template.compile_error is not None and why in template.compile_error
    assert template.compile_error.startswith("`chat_template`")
    refused(source, why)


def test_the_cache_is_bounded_by_bytes() -> None:
    cache = TemplateCache(max_bytes=100_000, max_entries=100)
    sources = [f"{i}" + "{{ messages[0].content }}" * 100 for i in range(12)]  # ~38 KB compiled each
    for source in sources:
        assert cache.get(source).template is not None
        assert cache.bytes <= 100_000
    assert 0 < len(cache) < 12
    assert cache.get(sources[-1]) is cache.get(sources[-1])  # the latest is kept


def test_a_model_template_still_renders_long_conversations() -> None:
    source = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    messages = [{"role": "user", "content": "x" * 1000} for _ in range(1000)]
    text = ChatTemplate(source).render(messages)
    assert len(text) == 1000 * (1000 + len("<|im_start|>user\n<|im_end|>\n")) + len("<|im_start|>assistant\n")
