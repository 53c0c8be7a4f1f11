"""Paged KV-cache blocks: allocation, content-hashed prefix sharing, ref counts, LRU eviction.

A full block is identified by the hash of (previous block's hash, its token ids), so two
sequences with the same prefix share the same physical blocks. Blocks no sequence uses stay
cached (evictable, least recently used first) until their memory is needed.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from strata_engine.recurrent_state import RecurrentStates
from strata_engine.sequence import Sequence

# A hybrid prompt's state snapshots (recurrent_state.py): at its last block boundary before its
# final token, at every SNAPSHOT_STRIDE tokens in the SNAPSHOT_REACH tokens before that (a later
# prompt that shares all but its last few hundred tokens recomputes at most a stride), and at the
# last boundary before the rows a request scores (candidates of one prompt share all before them).
SNAPSHOT_STRIDE = 64
SNAPSHOT_REACH = 256


def block_hash(prev: int | None, tokens: tuple[int, ...]) -> int:
    return hash((prev, tokens))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, states: RecurrentStates | None = None) -> None:
        self.states = states  # a hybrid model's recurrent states: one slot per admitted sequence
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks
        # never used or content dropped; taken from the right: block 0 first, then a released
        # block before a never-used one, whose KV pages would become resident only now (kv_array)
        self.free: deque[int] = deque(range(num_blocks - 1, -1, -1))
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced, LRU first
        self.by_hash: dict[int, int] = {}
        self.content: dict[int, tuple[int, tuple[int, ...]]] = {}  # block -> (hash, tokens)
        self.evictions = 0  # cached blocks dropped for reuse (a count; nothing decides on it)

    @property
    def num_available(self) -> int:
        return len(self.free) + len(self.evictable)

    def _take(self) -> int | None:
        if self.free:
            block = self.free.pop()
        elif self.evictable:
            block, _ = self.evictable.popitem(last=False)
            h, _tokens = self.content.pop(block)
            del self.by_hash[h]
            self.evictions += 1
        else:
            return None
        self.ref[block] = 1
        return block

    def _tokens(self, seq: Sequence, i: int) -> tuple[int, ...]:
        return tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])

    def _extend_hashes(self, seq: Sequence, hashes: list[int], n_blocks: int) -> list[int]:
        """Extend `hashes` (the prefix hashes of seq's first blocks) to its first n_blocks."""
        for i in range(len(hashes), n_blocks):
            hashes.append(block_hash(hashes[-1] if hashes else None, self._tokens(seq, i)))
        return hashes

    def admit(self, seq: Sequence, use_cache: bool, limit: int | None = None) -> None:
        """Attach cached prefix blocks (at most len-1 tokens: the last one must be computed;
        at most `limit` tokens when given: a request that wants rows from there on). A hybrid
        model's sequence also takes its recurrent-state slot here, and attaches blocks only up to
        the deepest boundary whose state snapshot is kept, which it starts from (a state cannot
        be rebuilt from KV blocks)."""
        if self.states is not None and seq.state_slot is None:
            seq.state_slot = self.states.take()
        if not use_cache:
            return
        bs = self.block_size
        cacheable = len(seq) - 1 if limit is None else min(limit, len(seq) - 1)
        hashes = self._extend_hashes(seq, [], max(cacheable, 0) // bs)
        hits: list[int] = []
        for i, h in enumerate(hashes):
            block = self.by_hash.get(h)
            if block is None or self.content[block][1] != self._tokens(seq, i):
                break
            hits.append(block)
        if self.states is not None:
            snapshot = None
            while hits and (snapshot := self.states.find(hashes[len(hits) - 1])) is None:
                hits.pop()
            if snapshot is not None and seq.state_slot is not None:
                self.states.restore(snapshot, seq.state_slot)
        for block in hits:
            if self.ref[block] == 0:
                self.evictable.pop(block, None)
            self.ref[block] += 1
            seq.block_table.append(block)
        seq.block_hashes = hashes[: len(seq.block_table)]
        seq.num_computed = seq.num_cached = len(seq.block_table) * bs

    def plan_snapshots(
        self, seq: Sequence, start: int, end: int, limit: int | None = None
    ) -> tuple[tuple[int, int], ...]:
        """The state snapshots a hybrid sequence's chunk [start, end) fills: (tokens of the chunk
        computed, slot) for each wanted boundary inside it not yet kept (see SNAPSHOT_STRIDE);
        `limit`: the tokens its admission could take from the cache (scheduler.cache_limit)."""
        assert self.states is not None
        if start >= seq.num_prompt - 1:  # every wanted boundary lies in the prompt: decode steps plan none
            return ()
        bs, last = self.block_size, (seq.num_prompt - 1) // self.block_size * self.block_size
        wanted = [last, *range(last - last % SNAPSHOT_STRIDE, last - SNAPSHOT_REACH, -SNAPSHOT_STRIDE)]
        if limit is not None:
            wanted.append(limit // bs * bs)
        captures = []
        for b in sorted({b for b in wanted if start < b <= end and b > 0}, reverse=True):  # deepest first
            h = self._extend_hashes(seq, list(seq.block_hashes[: b // bs]), b // bs)[-1]
            if h in self.states.snapshots or any(p[1] == h for p in seq.pending_snapshots):
                continue
            slot = self.states.reserve()
            if slot is None:
                break
            seq.pending_snapshots.append((b, h, slot))
            captures.append((b - start, slot))
        return tuple(captures)

    def ensure(self, seq: Sequence, n_tokens: int) -> bool:
        """Give `seq` blocks for its first n_tokens; False (nothing taken) if memory is short."""
        need = -(-n_tokens // self.block_size) - len(seq.block_table)
        if need > self.num_available:
            return False
        for _ in range(need):
            block = self._take()
            assert block is not None
            seq.block_table.append(block)
        return True

    def register(self, seq: Sequence) -> None:
        """Publish the sequence's newly completed full blocks to the prefix cache."""
        done = len(seq.block_hashes)
        full = min(seq.num_computed // self.block_size, len(seq.block_table))
        self._extend_hashes(seq, seq.block_hashes, full)
        for i in range(done, full):
            block, h = seq.block_table[i], seq.block_hashes[i]
            if block not in self.content and h not in self.by_hash:
                self.content[block] = (h, self._tokens(seq, i))
                self.by_hash[h] = block
        if self.states is not None:  # the snapshots this step filled
            for b, h, slot in [p for p in seq.pending_snapshots if p[0] <= seq.num_computed]:
                self.states.publish(h, slot)
                seq.pending_snapshots.remove((b, h, slot))

    def release(self, seq: Sequence) -> None:
        if self.states is not None:
            if seq.state_slot is not None:
                self.states.give_back(seq.state_slot)
                seq.state_slot = None
            for _b, _h, slot in seq.pending_snapshots:  # never filled
                self.states.unreserve(slot)
            seq.pending_snapshots = []
        seq.block_hashes = []
        for block in seq.block_table:
            self.ref[block] -= 1
            if self.ref[block] == 0:
                if block in self.content:
                    self.evictable[block] = None
                else:
                    self.free.append(block)
        seq.block_table = []
