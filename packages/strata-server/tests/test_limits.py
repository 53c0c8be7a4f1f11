"""The request and connection limits: one table, its flags, its docs, and the refusals it drives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strata_server.checks import Limits, check_logit_bias
from strata_server.errors import ApiError
from strata_server.limits import RequestLimits, from_args, limit_fields
from strata_server.protocol import CompletionRequest
from strata_server.settings import build_parser, server_settings
from strata_server.structured_output import json_depth, structured_spec

DOCS = Path(__file__).resolve().parents[3] / "docs" / "server.md"


def test_every_limit_has_a_flag_and_a_docs_row_with_its_default() -> None:
    section = DOCS.read_text().split("## Limits", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(--[a-z-]+)` \| `([^`]+)` \|", section, re.M)}
    for _, flag, default, _ in limit_fields():
        shown = f"{default:,}" if isinstance(default, int) else f"{default:g}"
        assert rows.get(flag) == shown, (flag, rows.get(flag), shown)


def test_flags_set_the_limits_the_app_gets() -> None:
    args = build_parser().parse_args(["--max-stop-strings", "3", "--body-timeout", "1.5"])
    limits = server_settings(args, ()).limits
    assert limits == RequestLimits(max_stop_strings=3, body_timeout=1.5)
    with pytest.raises(ValueError, match="--max-candidates"):
        from_args(build_parser().parse_args(["--max-candidates", "0"]))


def test_a_logit_bias_key_of_thousands_of_digits_is_a_short_400() -> None:
    with pytest.raises(ApiError) as info:
        check_logit_bias({"7" * 5000: 1.0})
    assert info.value.param == "logit_bias" and len(info.value.message) < 200
    assert check_logit_bias({"12": 1.0}) == ((12, 1.0),)


def test_json_depth_counts_objects_and_arrays_without_recursion() -> None:
    assert json_depth(1) == 0
    assert json_depth({"a": [1, {"b": {}}]}) == 4  # an empty object is a level too
    deep: object = {}
    for _ in range(100_000):
        deep = [deep]
    assert json_depth(deep) == 100_001


def body(**fields: object) -> CompletionRequest:
    return CompletionRequest(prompt="x", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "param", "flag"),
    [
        ({"guided_choice": ["a"] * 11}, "guided_choice", "--max-choice-options"),
        ({"guided_choice": ["a" * 60, "b" * 60]}, "guided_choice", "--max-grammar-chars"),
        ({"guided_regex": "a" * 101}, "guided_regex", "--max-grammar-chars"),
        ({"guided_grammar": "a" * 101}, "guided_grammar", "--max-grammar-chars"),
        ({"guided_json": "[" * 50 + "]" * 50}, "guided_json", "--max-schema-depth"),
        ({"guided_json": "[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]"}, "guided_json", "--max-schema-depth"),
        ({"guided_json": {"enum": ["x" * 200]}}, "guided_json", "--max-grammar-chars"),
    ],
)
def test_structured_output_sizes_are_refused_before_compiling(fields, param, flag) -> None:
    limits = RequestLimits(max_choice_options=10, max_grammar_chars=100, max_schema_depth=8)
    with pytest.raises(ApiError) as info:
        structured_spec(body(**fields), limits)
    assert info.value.param == param and flag in info.value.message


def test_within_the_limits_a_constraint_compiles() -> None:
    limits = RequestLimits(max_choice_options=10, max_grammar_chars=100, max_schema_depth=8)
    spec = structured_spec(body(guided_choice=["yes", "no"]), limits)
    assert spec is not None and spec.kind == "choice"


def test_the_default_limits_hold_the_model_facts_apart() -> None:
    limits = Limits(vocab_size=10, ctx_size=20)
    assert limits.request == RequestLimits()
