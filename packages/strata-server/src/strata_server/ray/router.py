"""Prefix-affinity routing for the engine replicas: Ray Serve's `PrefixCacheAffinityRouter`,
taught where Strata's requests keep their prompt.

The anchor router reads the prompt from an argument with a `prompt` or `messages` attribute
(Ray's own LLM request objects) and keeps the rest of its policy: while the replicas' queue
lengths differ by at most `imbalanced_threshold` it picks the replica whose past prompts
share the longest prefix with this one (or the one holding the fewest characters when
nothing matches 10%); when they differ by more it falls back to power-of-two choices.

The subclass exists because Strata forwards raw HTTP requests (`ForwardedRequest`) whose
prompt the ingress has already turned into one string, `affinity`, and because the anchor
fails on requests it cannot read: a request without a `prompt`/`messages` attribute raises
`ValueError` and an empty prompt divides by zero. Strata sends such requests too (`/health`,
`/tokenize`, a body that is not JSON), so they go to plain power-of-two choices instead. Written against ray 2.60 (the pinned
version); `_extract_text_from_request` is the anchor's own hook for reading the prompt.
"""

from __future__ import annotations

from typing import Any

# The class `ray.serve.llm.request_router.PrefixCacheAffinityRouter` re-exports unchanged; that
# public module imports Ray's whole LLM stack (pyarrow, ...), which serving Strata does not need.
from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import (
    PrefixCacheAffinityRouter,
)
from ray.serve._private.common import ReplicaID
from ray.serve._private.replica_result import ReplicaResult
from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter
from ray.serve._private.request_router.common import PendingRequest
from ray.serve._private.request_router.replica_wrapper import RunningReplica

from strata_server.ray.forward import ForwardedRequest

ROUTER_PATH = "strata_server.ray.router.StrataPrefixRouter"


def affinity_of(pending_request: PendingRequest | None) -> str:
    """The prompt text the ingress attached to a forwarded request ("" for none)."""
    if pending_request is None or not pending_request.args:
        return ""
    for arg in pending_request.args:
        if isinstance(arg, ForwardedRequest):
            return arg.affinity
    return ""


class StrataPrefixRouter(PrefixCacheAffinityRouter):
    """Prefix affinity on `ForwardedRequest.affinity`; power-of-two for requests without one."""

    def _extract_text_from_request(self, pending_request: PendingRequest) -> str:
        return affinity_of(pending_request)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> Any:
        if not affinity_of(pending_request):
            return await PowerOfTwoChoicesRequestRouter.choose_replicas(
                self, candidate_replicas=candidate_replicas, pending_request=pending_request
            )
        return await super().choose_replicas(candidate_replicas, pending_request)

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: ReplicaResult
    ) -> None:
        if affinity_of(pending_request):
            super().on_request_routed(pending_request, replica_id, result)
