"""What a decision read, for a person to look at: the ``x_trace`` and ``x_parity`` extensions.

A request with ``"x_strata": {"trace": true}`` gets, in each answer, ``x_trace``:

* ``prompt``: the rendered prompt of the read in the caller's option order (``text``,
  ``token_ids``, ``tokens``), how many of its tokens are the state's system message
  (``shared_prefix_tokens``: byte-identical in every question about that state) and how many
  the server read from its prefix cache for this read (``cached_tokens``, the server's
  ``usage.prompt_tokens_details.cached_tokens``), with the text of both parts;
* ``labels`` (one-token reads: each option's label and token id) or ``candidates`` (word
  answers: the exact texts scored whole by ``/v1/score_candidates``, each name followed by
  the end-of-turn token), so the same read can be repeated on the server's own routes;
* ``reads``: how many reads the answer combines (the number of options with rotations).

The reply then also names the upstream's ``x_system_fingerprint`` where its replies carry one.

With ``"x_strata": {"parity": true}`` each label-read answer gets ``x_parity`` (``strata_decide.parity``
on this one case): the labels' values read by id against the same labels in the server's
own top-20 of the same prompt; word answers get ``null`` (they have no labels).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from strata_client import APIConnectionError, APIStatusError, AsyncStrataClient

from ..decider import Decider, Decision
from ..errors import upstream_failure
from ..labels import LabelBook
from ..parity import TOP_N, check_case
from ..prompts import state_prefix
from ..questions import Content

T = TypeVar("T")


async def trace_of(
    client: AsyncStrataClient, decider: Decider, state: Content, decision: Decision
) -> dict[str, Any]:
    """The ``x_trace`` object of one answer."""
    read = decision.first_read
    if read is None:
        raise ValueError("a decision without its first read cannot be traced")
    ids = list(read.prompt_ids)
    question = decision.question
    prefix = common_prefix(await _upstream(state_prefix(client, state)), ids)
    cached = min(read.cached_tokens, len(ids))
    text, prefix_text, cached_text = await asyncio.gather(
        detokenize(client, ids), detokenize(client, ids[:prefix]), detokenize(client, ids[:cached])
    )
    trace: dict[str, Any] = {
        "prompt": {
            "text": text,
            "token_ids": ids,
            "tokens": len(ids),
            "shared_prefix_tokens": prefix,
            "shared_prefix_text": prefix_text,
            "cached_tokens": cached,
            "cached_text": cached_text,
        },
        "reads": decision.reads,
    }
    if decider.answers_by_label(question):
        labels = await decider.labels.labels_for(question.kind, len(question.options))
        trace["labels"] = [
            {"option": option.name, "label": label.text, "token_id": label.token_id}
            for option, label in zip(question.options, labels, strict=True)
        ]
    else:
        ending = await decider.end_of_turn()
        trace["candidates"] = [option.name + ending for option in question.options]
    return trace


async def parity_of(
    client: AsyncStrataClient,
    labels: LabelBook,
    decider: Decider,
    model: str,
    state: Content,
    decision: Decision,
    wire: dict[str, Any],
) -> dict[str, Any] | None:
    """The ``x_parity`` object of one answer (None for a word answer: nothing to compare)."""
    if not decider.answers_by_label(decision.question):
        return None
    count, diffs, agrees = await check_case(client, labels, model, state, wire)
    return {
        "top_k": TOP_N,
        "labels": count,
        "compared": len(diffs),
        "max_abs_diff": max((abs(d) for d in diffs), default=None),
        "argmax_agrees": agrees,
    }


def fingerprint_of(decisions: Sequence[Decision]) -> str | None:
    """The upstream's ``system_fingerprint`` as its replies gave it (None where none did)."""
    found = sorted({d.first_read.fingerprint for d in decisions if d.first_read and d.first_read.fingerprint})
    return ", ".join(found) if found else None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids two lists share."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


async def detokenize(client: AsyncStrataClient, ids: list[int]) -> str:
    """The text of ``ids`` through the server's ``/detokenize`` ("" for none)."""
    if not ids:
        return ""
    return (await _upstream(client.detokenize(ids))).prompt


async def _upstream(call: Awaitable[T]) -> T:
    """Await an upstream call; its failures become the library's UpstreamError."""
    try:
        return await call
    except (APIStatusError, APIConnectionError) as error:
        raise upstream_failure(error) from error
