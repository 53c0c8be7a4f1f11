"""Property-based fuzzing from the server's own OpenAPI document (hypothesis).

Bodies are drawn from each POST route's request schema, and from mutations of it (a field
replaced by arbitrary JSON, an unknown field added, the body not an object). Whatever is
sent: never a 5xx, and every 4xx in the OpenAI envelope with the request id beside it.
Bounded: a fixed number of examples per route and no per-example deadline surprises.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from strata_server import ServerSettings, create_app

EXAMPLES_PER_ROUTE = 120

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
any_json = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def from_schema(schema: dict[str, Any], root: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """A strategy for values of a JSON schema (the subset Litestar emits)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return from_schema(root["components"]["schemas"][name], root, depth)
    if depth > 4:
        return json_scalars
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(s, root, depth + 1) for s in schema[key]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, root, depth) for k in kind])
    if kind == "object":
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        fields = {k: from_schema(v, root, depth + 1) for k, v in properties.items()}
        return st.fixed_dictionaries(
            {k: v for k, v in fields.items() if k in required},
            optional={k: v for k, v in fields.items() if k not in required},
        )
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), root, depth + 1), max_size=4)
    if kind == "string":
        return st.text(max_size=30)
    if kind == "integer":
        return st.one_of(st.integers(min_value=-3, max_value=300), st.integers())
    if kind == "number":
        return st.one_of(
            st.floats(min_value=-2, max_value=3), st.floats(allow_nan=False, allow_infinity=False)
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return any_json


def mutated(body: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The schema's bodies, some with a field replaced, an unknown field, or not an object."""

    def mutate(draw_value: Any, key: str, junk: Any, how: int) -> Any:
        if not isinstance(draw_value, dict) or how == 0:
            return draw_value
        if how == 1 and draw_value:
            return {**draw_value, sorted(draw_value)[hash(key) % len(draw_value)]: junk}
        if how == 2:
            return {**draw_value, key: junk}
        return junk

    return st.builds(mutate, body, st.text(max_size=8), any_json, st.integers(0, 3))


@pytest.fixture
def fuzz_client(make_engine) -> Iterator[TestClient]:
    app = create_app(make_engine(), ServerSettings(max_logprobs=5, max_queue=64, request_timeout=5))
    with TestClient(app) as client:
        yield client


def post_routes(client: TestClient) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    document = client.get("/schema/openapi.json").json()
    routes = []
    for path, operations in document["paths"].items():
        body = operations.get("post", {}).get("requestBody")
        if body:
            routes.append((path, body["content"]["application/json"]["schema"], document))
    return routes


def check(response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        body = response.json()
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        assert body["request_id"] == response.headers["x-request-id"]


def test_the_schema_lists_every_post_route(fuzz_client) -> None:
    paths = {path for path, _, _ in post_routes(fuzz_client)}
    assert {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"} <= paths


@pytest.mark.parametrize(
    "route", ["/v1/completions", "/v1/chat/completions", "/v1/score_candidates", "/tokenize", "/detokenize"]
)
def test_fuzzed_bodies_never_get_a_5xx_and_4xx_are_enveloped(fuzz_client, route) -> None:
    schema, document = next((s, d) for p, s, d in post_routes(fuzz_client) if p == route)

    @settings(
        max_examples=EXAMPLES_PER_ROUTE,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=mutated(from_schema(schema, document)))
    def fuzz(body: Any) -> None:
        check(fuzz_client.post(route, json=body))

    fuzz()
