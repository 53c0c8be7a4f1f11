"""OpenAPI request bodies for the routes that decode their own JSON.

Handlers read raw bytes (so decoding stays strict), which hides the body type from
Litestar's schema generation; here msgspec writes the schemas and each route's operation
carries its body type's schema.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import OpenAPIMediaType, Operation, RequestBody

from strata_server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    ScoreCandidatesRequest,
    TokenizeRequest,
)

DOCUMENTED = (
    CompletionRequest,
    ChatCompletionRequest,
    TokenizeRequest,
    DetokenizeRequest,
    ScoreCandidatesRequest,
)
REF_PREFIX = "#/$defs/"


def openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(title="Strata server", version="0.1.0")


def inline_schema(body_type: type) -> dict[str, Any]:
    """The JSON schema of `body_type` with every `$ref` replaced by its definition.

    Litestar rebuilds `components.schemas` from its own registry, so refs into it would
    dangle; the request types are not recursive, so inlining terminates.
    """
    (root,), defs = msgspec.json.schema_components([body_type], ref_template=REF_PREFIX + "{name}")

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(REF_PREFIX):
                return resolve(defs[ref.removeprefix(REF_PREFIX)])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    return resolve(root)


def body_of(body_type: type) -> type[Operation]:
    """An Operation class whose request body is `body_type` (JSON)."""
    schema = inline_schema(body_type)

    class BodyOperation(Operation):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.request_body = RequestBody(
                content={"application/json": OpenAPIMediaType(schema=schema)},  # type: ignore[arg-type]
                required=True,
            )

    return BodyOperation
