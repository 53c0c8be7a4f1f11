"""Each running sequence's recurrent state in a hybrid model (hybrid.py): per DeltaNet layer, the
short convolution's window (its last d_conv - 1 input rows) and the DeltaNet state (one
d_state x d_state matrix per value head), in fixed slots beside the sequence's KV blocks.

A slot is taken when the sequence is admitted and given back when its blocks are released
(finished, aborted, failed or preempted: block_manager.py), so a preempted sequence starts again
from zeros and recomputes its tokens, as its KV blocks are. `live` counts the slots in use.

The prefix cache's state snapshots live in the same arrays, in slots past the running ones: the
state after a block boundary of a prompt, keyed by that prefix's block hash, copied there while
the step computes it (hybrid_model.py) and copied back into a new sequence's slot when its prompt
starts with that prefix (a state cannot be rebuilt from KV blocks). A snapshot is a copy of the
cold run's bits, so a cache hit gives them. At most `n_snapshots` are kept, the least recently
used dropped first; a slot a step is still filling is never dropped.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from strata_engine.api import EngineError
from strata_engine.hybrid import HybridConfig


class RecurrentStates:
    def __init__(self, hybrid: HybridConfig, n_slots: int, n_snapshots: int = 0) -> None:
        layers = [i for i, r in enumerate(hybrid.recurrent) if r]
        total = n_slots + n_snapshots
        window = (total, hybrid.d_conv - 1, hybrid.conv_dim)
        # stored as ggml does: per head, row j holds column j of S (contiguous along the key index)
        matrix = (total, hybrid.n_v_heads, hybrid.d_state, hybrid.d_state)
        self.conv = {i: np.zeros(window, dtype=np.float32) for i in layers}
        self.ssm = {i: np.zeros(matrix, dtype=np.float32) for i in layers}
        self.free = list(range(n_slots - 1, -1, -1))
        self.n_slots = n_slots
        self.snapshot_free = list(range(total - 1, n_slots - 1, -1))
        self.snapshots: OrderedDict[int, int] = OrderedDict()  # prefix hash -> slot, LRU first
        self.snapshot_hits = 0  # admissions that started from a snapshot (a count)

    @property
    def live(self) -> int:
        """Slots held by sequences now."""
        return self.n_slots - len(self.free)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (*self.conv.values(), *self.ssm.values()))

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (*self.conv.values(), *self.ssm.values())

    def take(self) -> int:
        """A zeroed slot (the state before a sequence's first token)."""
        if not self.free:  # the scheduler admits at most n_slots sequences at once
            raise EngineError("no recurrent-state slot free: more sequences admitted than `parallel`")
        slot = self.free.pop()
        for a in self._arrays():
            a[slot] = 0.0
        return slot

    def give_back(self, slot: int) -> None:
        self.free.append(slot)

    # -- the prefix cache's snapshots ---------------------------------------------------------
    def find(self, prefix_hash: int) -> int | None:
        """The snapshot slot of this prefix, if kept (marked recently used)."""
        slot = self.snapshots.get(prefix_hash)
        if slot is not None:
            self.snapshots.move_to_end(prefix_hash)
        return slot

    def reserve(self) -> int | None:
        """A snapshot slot for a step to fill: a free one, else the least recently used kept one's;
        None when every snapshot slot is being filled."""
        if self.snapshot_free:
            return self.snapshot_free.pop()
        if self.snapshots:
            return self.snapshots.popitem(last=False)[1]
        return None

    def publish(self, prefix_hash: int, slot: int) -> None:
        """A filled snapshot, findable from now on (a prefix kept twice keeps the first)."""
        if prefix_hash in self.snapshots:
            self.snapshot_free.append(slot)
        else:
            self.snapshots[prefix_hash] = slot

    def unreserve(self, slot: int) -> None:
        """A reserved slot whose step did not complete it."""
        self.snapshot_free.append(slot)

    def restore(self, snapshot: int, slot: int) -> None:
        """A sequence's state set to a snapshot's (an exact copy)."""
        for a in self._arrays():
            a[slot] = a[snapshot]
        self.snapshot_hits += 1
