"""Every bound a request or a connection meets, with its flag, in one place.

A server exposed to programs it does not control must bound the work one request can ask for
(prompt size, sequences, listed values, stop strings, grammars, answer bytes) and the time a
client may take to send it. `RequestLimits` holds them all; each field is an `option` naming
its flag and help text (strata_server.flags), so the flags and `from_args` come from the one
table and the docs table in docs/server.md lists the same rows (a unit test compares them). Refusals are 400s naming the
wire field and the flag that lifts the bound (see `checks`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from strata_server.flags import add_group, flag_of, option, option_fields, positive, values_from_args


def _limit(default: int | float, flag: str, help: str) -> Any:
    return option(default, help, flag=flag, check=positive)


@dataclass(frozen=True)
class RequestLimits:
    """Defaults a real deployment can keep; each is settable by its flag."""

    max_prompt_chars: int = _limit(
        1_000_000,
        "--max-prompt-chars",
        "characters (or token ids) of a completions request's prompts together, of a chat "
        "request's messages together, of a scoring request's prompt and candidates together, "
        "of /tokenize's input and of /detokenize's `tokens`; checked before any tokenising",
    )
    max_logprob_ids: int = _limit(
        1024,
        "--max-logprob-ids",
        "ids named in `logprob_token_ids`, and alternatives listed per position however they are "
        "lifted (`allowed_token_ids` lets `top_logprobs` exceed --max-logprobs up to this)",
    )
    max_answer_bytes: int = _limit(
        16 * 2**20,
        "--max-answer-bytes",
        "estimated size of one answer before it runs: positions (echoed prompt and new tokens, "
        "every choice) x values listed per position x the bytes a value takes in its format "
        "(measured: 32 in completions' logprobs, 96 in chat's, 80 in prompt_logprobs)",
    )
    max_stop_strings: int = _limit(64, "--max-stop-strings", "stop strings in `stop`")
    max_stop_chars: int = _limit(4096, "--max-stop-chars", "characters of all `stop` strings together")
    max_grammar_chars: int = _limit(
        256_000,
        "--max-grammar-chars",
        "characters of a structured output constraint: a regex, a grammar, a JSON schema's text, "
        "or all `guided_choice` options together",
    )
    max_choice_options: int = _limit(1000, "--max-choice-options", "options in `guided_choice`")
    max_schema_depth: int = _limit(
        64, "--max-schema-depth", "nesting of a JSON schema (objects and arrays inside each other)"
    )
    max_candidates: int = _limit(128, "--max-candidates", "candidates in one /v1/score_candidates request")
    max_body_bytes: int = _limit(10 * 2**20, "--max-body-bytes", "bytes of a request body (413 beyond)")
    header_timeout: float = _limit(
        10.0,
        "--header-timeout",
        "seconds a connection may take to send a request line and headers; then it is closed",
    )
    body_timeout: float = _limit(
        60.0, "--body-timeout", "seconds a request may take to send its whole body; then 408 and close"
    )
    keep_alive_timeout: float = _limit(
        5.0, "--keep-alive-timeout", "seconds an idle keep-alive connection stays open"
    )
    max_connections: int = _limit(
        1024,
        "--max-connections",
        "open connections (and requests in progress) at once; beyond it new requests get 503",
    )
    max_client_connections: int = _limit(
        256,
        "--max-client-connections",
        "open connections from one client address; more are closed at once, so one client "
        "cannot hold every --max-connections slot",
    )
    max_header_bytes: int = _limit(
        16 * 2**10, "--max-header-bytes", "bytes of a request line and headers; beyond it 400 and close"
    )


# connection limits Ray Serve's HTTP proxy has no setting for (its HTTPOptions: host, port,
# keep_alive_timeout_s, request_timeout_s, root_path, ssl): `--ray` refuses them when given
NOT_ON_RAY = ("header_timeout", "max_connections", "max_client_connections", "max_header_bytes")


LIMITS_GROUP = "request and connection limits (docs/server.md#limits)"


def limit_fields() -> list[tuple[str, str, Any, str]]:
    """(field name, flag, default, help) for every limit, in declaration order."""
    return [
        (f.name, flag_of(f), f.default, f.metadata["option"]["help"]) for f in option_fields(RequestLimits)
    ]


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per limit, in a group of its own."""
    add_group(parser, RequestLimits, LIMITS_GROUP)


def not_on_ray(args: argparse.Namespace) -> list[str]:
    """The flags of `NOT_ON_RAY` given other values than their defaults: `--ray` cannot apply them."""
    return [
        flag
        for name, flag, default, _ in limit_fields()
        if name in NOT_ON_RAY and getattr(args, name) != default
    ]


def from_args(args: argparse.Namespace) -> RequestLimits:
    """The limits the flags set; each must be positive (ValueError naming the flag)."""
    return RequestLimits(**values_from_args(RequestLimits, args))
