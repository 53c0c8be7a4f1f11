"""A gateway request's reads: capped (questions x rotations), cancelled when its caller leaves,
and given the read slots in turn with other callers'."""

from __future__ import annotations

import asyncio

from litestar.testing import TestClient

from strata_decide.gateway import GatewayConfig, create_app
from strata_decide.slots import FairSlots, caller

OPTIONS = {f"option {k}": None for k in range(5)}


def many_questions(count: int) -> dict:
    questions = {
        f"q{i}": {"type": "choice", "instructions": f"Which {i}?", "criteria": OPTIONS} for i in range(count)
    }
    return {"model": "jev-latest", "state": "s", "questions": questions, "x_strata": {"rotations": True}}


def test_questions_times_rotations_are_capped_before_any_read(fake) -> None:
    with TestClient(create_app(GatewayConfig(upstream=fake.url))) as client:
        reply = client.post("/v1/systemone", json=many_questions(60))  # 300 reads
        assert reply.status_code == 400, reply.text
        assert reply.json()["detail"]["error_type"] == "too_many_reads"
        assert "300 reads" in reply.json()["detail"]["message"]
    assert fake.completion_calls == []  # refused before the first read
    with TestClient(create_app(GatewayConfig(upstream=fake.url, max_reads=10))) as client:
        assert client.post("/v1/systemone", json=many_questions(2)).status_code == 200  # 10 reads


def test_a_freed_slot_goes_to_the_next_caller_in_turn() -> None:
    """With one slot, caller A queues 10 reads and then B one: B reads second, not eleventh."""
    order: list[str] = []

    async def main() -> None:
        slots = FairSlots(1)

        async def read(name: str) -> None:
            async with slots.held():
                order.append(name)
                await asyncio.sleep(0.001)

        async def as_caller(name: str, reads: int) -> None:
            caller.set(name)
            await asyncio.gather(*(read(name) for _ in range(reads)))

        first = asyncio.ensure_future(as_caller("A", 10))
        await asyncio.sleep(0)
        await asyncio.gather(first, as_caller("B", 1))

    asyncio.run(main())
    assert order[:3] == ["A", "A", "B"] or order[:2] == ["A", "B"], order
    assert order.count("A") == 10 and order.count("B") == 1
