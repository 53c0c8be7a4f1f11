"""The client cannot silently fall behind the server: every field a generation route
accepts is a typed `create` keyword of strata-client (sync and async alike), unless it is
one the server only parses to refuse or ignore."""

from __future__ import annotations

import inspect

import msgspec
import pytest

from strata_client._async.resources import AsyncChatCompletions, AsyncCompletions
from strata_client._sync.resources import ChatCompletions, Completions
from strata_server.checks import NOT_IMPLEMENTED
from strata_server.protocol import ChatCompletionRequest, CompletionRequest

# Parsed by the server only to refuse a non-neutral value (or, `user`, to ignore it): no
# typed keyword, `extra_body` still reaches them.
NOT_OFFERED = frozenset({"repetition_penalty", "best_of", "user", "echo", *NOT_IMPLEMENTED})
CALL_OPTIONS = frozenset({"self", "extra_body", "timeout"})


def wire_fields(request_type: type[msgspec.Struct]) -> set[str]:
    return {field.encode_name for field in msgspec.structs.fields(request_type)}


def client_keywords(create) -> set[str]:
    return set(inspect.signature(create).parameters) - CALL_OPTIONS


@pytest.mark.parametrize(
    ("request_type", "resources"),
    [
        (CompletionRequest, (Completions, AsyncCompletions)),
        (ChatCompletionRequest, (ChatCompletions, AsyncChatCompletions)),
    ],
)
def test_every_accepted_field_is_a_typed_client_keyword(request_type, resources) -> None:
    wanted = wire_fields(request_type) - NOT_OFFERED
    for resource in resources:
        keywords = client_keywords(resource.create)
        assert wanted - keywords == set(), f"{resource.__name__}.create lacks these server fields"
        assert keywords - wire_fields(request_type) == set(), (
            f"{resource.__name__}.create sends unknown fields"
        )
