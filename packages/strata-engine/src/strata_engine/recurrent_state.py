"""Each running sequence's recurrent state in a hybrid model (hybrid.py): per DeltaNet layer, the
short convolution's window (its last d_conv - 1 input rows) and the DeltaNet state (one
d_state x d_state matrix per value head), in fixed slots beside the sequence's KV blocks.

A slot is taken when the sequence is admitted and given back when its blocks are released
(finished, aborted, failed or preempted: block_manager.py), so a preempted sequence starts again
from zeros and recomputes its tokens, as its KV blocks are. `live` counts the slots in use.
"""

from __future__ import annotations

import numpy as np

from strata_engine.api import EngineError
from strata_engine.hybrid import HybridConfig


class RecurrentStates:
    def __init__(self, hybrid: HybridConfig, n_slots: int) -> None:
        layers = [i for i, r in enumerate(hybrid.recurrent) if r]
        window = (n_slots, hybrid.d_conv - 1, hybrid.conv_dim)
        # stored as ggml does: per head, row j holds column j of S (contiguous along the key index)
        matrix = (n_slots, hybrid.n_v_heads, hybrid.d_state, hybrid.d_state)
        self.conv = {i: np.zeros(window, dtype=np.float32) for i in layers}
        self.ssm = {i: np.zeros(matrix, dtype=np.float32) for i in layers}
        self.free = list(range(n_slots - 1, -1, -1))
        self.n_slots = n_slots

    @property
    def live(self) -> int:
        """Slots held by sequences now."""
        return self.n_slots - len(self.free)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (*self.conv.values(), *self.ssm.values()))

    def take(self) -> int:
        """A zeroed slot (the state before a sequence's first token)."""
        if not self.free:  # the scheduler admits at most n_slots sequences at once
            raise EngineError("no recurrent-state slot free: more sequences admitted than `parallel`")
        slot = self.free.pop()
        for a in (*self.conv.values(), *self.ssm.values()):
            a[slot] = 0.0
        return slot

    def give_back(self, slot: int) -> None:
        self.free.append(slot)
