"""Tensor parallelism on torch.distributed: the ranks, the fixed-order sum of partial results,
and the step broadcast from rank 0 to the worker ranks.

Ranks are launched the way `torchrun` launches them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT in the environment); gloo joins them on CPUs, NCCL on GPUs. Every rank loads the
same model file and keeps its part of each layer (model.py shards at load: a range of KV heads
with their query heads, a range of FFN columns); embeddings and the LM head stay whole on every
rank. Rank 0 runs the engine (scheduler, KV blocks, sampling, HTTP); the other ranks `follow`:
each step's flat batch (token ids and attention metadata) arrives by broadcast from rank 0 and
runs through the same forward, which meets the other ranks in `all_reduce` twice a layer.

`all_reduce` gathers every rank's partial sums and adds them in rank order, instead of asking
the backend to reduce: a backend's reduction order may depend on the tensor's size (gloo's ring
splits it into chunks; NCCL picks algorithms by size), and so on the batch. Gathering then
adding p0 + p1 + ... element by element is one fixed order for every row whatever the batch,
the same on every rank, so the residual stream stays bit-identical across ranks and a request's
bits do not depend on the rest of the batch. The sum is split differently from one rank's dot
products, so N ranks and one rank differ by rounding (measured in docs/scaling.md).

While idle, rank 0 pings the workers every `HEARTBEAT_S` (a round trip), so a dead rank is found
within about a second and not at the next request; the workers wait for the next command no
longer than the group's timeout, so they exit when rank 0 is gone. Any failed collective breaks
the group for good: `EngineUnavailable`, raised by every later call.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np

from strata_engine.api import EngineError, EngineUnavailable, ModelLoadError
from strata_engine.kernels.base import Array, AttentionMeta

if TYPE_CHECKING:
    import torch

# torch (and torch.distributed) are imported only where a group of ranks is active, so that a
# single-rank engine on the native kernels never loads torch

log = logging.getLogger("strata_engine")

STEP, PING, STOP = 1, 2, 3  # the commands rank 0 broadcasts
HEADER = 5  # command, tokens, sequences, block-table width, block size
HEARTBEAT_S = 1.0
TIMEOUT_ENV = "STRATA_TP_TIMEOUT_S"  # seconds a collective may wait for the other ranks
DEFAULT_TIMEOUT_S = 60.0
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class TensorParallelError(EngineError):
    """Tensor parallelism cannot start (not launched as torchrun launches ranks, sizes disagree)."""


class TensorParallel:
    """This process's rank among `world` ranks; with one rank every method is a no-op."""

    def __init__(self, rank: int = 0, world: int = 1, device: torch.device | None = None) -> None:
        self.rank = rank
        self.world = world
        self.device = device  # where the collectives' tensors live (None: the CPU)
        self.broken: EngineUnavailable | None = None
        self._last_contact = time.monotonic()

    @property
    def active(self) -> bool:
        return self.world > 1

    # -- sharding ---------------------------------------------------------------------------
    def part(self, n: int, unit: int = 1, what: str = "values") -> tuple[int, int]:
        """This rank's [start, end) of `n` values cut at multiples of `unit` (block or head size),
        as even as whole units allow; the last rank also takes a remainder of less than a unit."""
        units = n // unit
        if units < self.world:
            raise ModelLoadError(
                f"cannot split {n} {what} in units of {unit} over {self.world} tensor-parallel ranks"
            )
        start = self.rank * units // self.world * unit
        end = n if self.rank == self.world - 1 else (self.rank + 1) * units // self.world * unit
        return start, end

    # -- the forward's hook -----------------------------------------------------------------
    def all_reduce(self, x: Array) -> Array:
        """The sum over ranks of `x`, added in rank order (see the module docstring); `x` itself
        with one rank. A numpy `x` (the CPU kernels') gives a numpy sum."""
        if not self.active:
            return x
        import torch
        import torch.distributed as dist

        from strata_engine.kernels.torch_backend import tensor

        mine = tensor(x).contiguous()
        parts = [torch.empty_like(mine) for _ in range(self.world)]
        self._call(dist.all_gather, parts, mine)
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        return total.numpy() if isinstance(x, np.ndarray) else total

    # -- rank 0 -----------------------------------------------------------------------------
    def send_step(self, ids: np.ndarray, meta: AttentionMeta) -> None:
        """Rank 0: hand the step's flat batch to the workers before running it itself."""
        if not self.active:
            return
        import torch

        t, (s, width) = ids.shape[0], meta.block_tables.shape
        header = torch.tensor([STEP, t, s, width, meta.block_size], dtype=torch.int64)
        parts = (ids, meta.positions, meta.token_seq, meta.slots, meta.block_tables.reshape(-1))
        payload = torch.from_numpy(np.concatenate([p.astype(np.int64) for p in parts]))
        self._broadcast(header)
        self._broadcast(payload)
        self._last_contact = time.monotonic()

    def heartbeat(self) -> None:
        """Rank 0, while idle: a round trip to every worker at most once per `HEARTBEAT_S`;
        raises `EngineUnavailable` when one is gone."""
        if not self.active or time.monotonic() - self._last_contact < HEARTBEAT_S:
            return
        import torch

        self._broadcast(torch.tensor([PING, 0, 0, 0, 0], dtype=torch.int64))
        self._round_trip()
        self._last_contact = time.monotonic()

    def agree(self, values: list[int], what: str) -> None:
        """Every rank must hold the same `values` (e.g. the KV cache's block count: a worker
        with fewer blocks would write out of its cache); raises `TensorParallelError` if not."""
        if not self.active:
            return
        import torch
        import torch.distributed as dist

        mine = torch.tensor(values, dtype=torch.int64, device=self.device)
        parts = [torch.empty_like(mine) for _ in range(self.world)]
        self._call(dist.all_gather, parts, mine)
        seen = [p.tolist() for p in parts]
        if any(s != seen[0] for s in seen):
            raise TensorParallelError(
                f"ranks disagree on {what}: {seen} (start every rank with the same flags)"
            )

    def release(self) -> None:
        """Rank 0: end the workers' `follow` (they wait for it to return); the group stays."""
        if self.active and self.rank == 0 and self.broken is None:
            import torch

            try:
                self._broadcast(torch.tensor([STOP, 0, 0, 0, 0], dtype=torch.int64))
                self._round_trip()
            except EngineUnavailable:
                pass  # a worker is gone already; nothing to wait for

    def abandon(self, failure: EngineUnavailable) -> None:
        """After a failure: leave the group at once, so that the other ranks' collectives fail
        now (they exit) instead of waiting out the timeout for a rank that will never come."""
        self.broken = self.broken or failure
        if not self.active:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def close(self) -> None:
        """Release the workers (from rank 0) and leave the process group."""
        if not self.active:
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            return
        self.release()
        dist.destroy_process_group()

    # -- the other ranks --------------------------------------------------------------------
    def follow(self, forward: Callable[[np.ndarray, AttentionMeta], object]) -> None:
        """Worker ranks: run every step rank 0 broadcasts through `forward` until it says stop.

        Raises `EngineUnavailable` when rank 0 or another worker is gone (or silent for longer
        than the group's timeout), so a worker never outlives its server.
        """
        import torch

        while True:
            header = torch.empty(HEADER, dtype=torch.int64, device=self.device)
            self._broadcast(header)
            command, t, s, width, block_size = header.tolist()
            if command in (PING, STOP):
                self._round_trip()
                if command == STOP:
                    return
                continue
            payload = torch.empty(4 * t + s * width, dtype=torch.int64, device=self.device)
            self._broadcast(payload)
            flat = payload.cpu().numpy()
            ids, positions, token_seq, slots = flat[: 4 * t].reshape(4, t)
            meta = AttentionMeta(
                positions=positions.astype(np.int32),
                token_seq=token_seq.astype(np.int32),
                block_tables=flat[4 * t :].reshape(s, width).astype(np.int32),
                slots=slots.copy(),
                block_size=block_size,
            )
            forward(ids.copy(), meta)

    # -- collectives ------------------------------------------------------------------------
    def _broadcast(self, t: torch.Tensor) -> None:
        """Broadcast from rank 0 (in place on the other ranks)."""
        import torch.distributed as dist

        if self.device is None or t.device == self.device:
            self._call(dist.broadcast, t, 0)
            return
        moved = t.to(self.device)
        self._call(dist.broadcast, moved, 0)
        t.copy_(moved)

    def _round_trip(self) -> None:
        """A tiny all-gather: returns once every rank has answered."""
        import torch
        import torch.distributed as dist

        one = torch.zeros(1, device=self.device)
        self._call(dist.all_gather, [torch.empty_like(one) for _ in range(self.world)], one)

    def _call(self, collective: Callable[..., object], *args: object) -> None:
        if self.broken is not None:
            raise self.broken
        try:
            collective(*args)
        except RuntimeError as exc:  # DistError and gloo's connection errors are RuntimeErrors
            self.broken = EngineUnavailable(
                f"tensor-parallel rank failure (rank {self.rank} of {self.world}): {exc}; restart every rank"
            )
            raise self.broken from exc


SINGLE = TensorParallel()  # one rank: no sharding, no communication


def timeout_s() -> float:
    """How long a collective waits for the other ranks (`STRATA_TP_TIMEOUT_S`, default 60 s)."""
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise TensorParallelError(f"{TIMEOUT_ENV} must be a number of seconds, not {raw!r}") from None
    if value <= HEARTBEAT_S:
        raise TensorParallelError(f"{TIMEOUT_ENV} must exceed the heartbeat ({HEARTBEAT_S} s)")
    return value


def init_from_env(world_size: int, device: str = "cpu") -> TensorParallel:
    """Join the ranks `torchrun` (or anything setting its variables) started: gloo on the CPU,
    NCCL with CUDA (each rank on GPU LOCAL_RANK)."""
    if world_size <= 1:
        return SINGLE
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise TensorParallelError(
            f"--tensor-parallel needs torch ({exc}): pip install torch==2.13.0 "
            "(or, from the Strata repository, './packages/strata-engine[torch]')"
        ) from exc

    missing = [name for name in LAUNCH_ENV if name not in os.environ]
    if missing:
        raise TensorParallelError(
            f"--tensor-parallel {world_size} needs its ranks launched as torchrun launches them "
            f"({', '.join(missing)} not set): torchrun --nproc-per-node {world_size} -m strata_server "
            f"--tensor-parallel {world_size} ..."
        )
    if int(os.environ["WORLD_SIZE"]) != world_size:
        raise TensorParallelError(
            f"--tensor-parallel {world_size} but WORLD_SIZE is {os.environ['WORLD_SIZE']} "
            "(start as many ranks as --tensor-parallel says)"
        )
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    if cuda:
        torch.cuda.set_device(local)
    try:
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s()))
    except RuntimeError as exc:  # a rank that never joined, an address already in use
        raise TensorParallelError(f"cannot join the tensor-parallel ranks: {exc}") from exc
    rank = dist.get_rank()
    log.info("tensor-parallel rank %d of %d (%s)", rank, world_size, dist.get_backend())
    return TensorParallel(rank, world_size, torch.device(f"cuda:{local}") if cuda else torch.device("cpu"))
