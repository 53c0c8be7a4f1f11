"""Who runs this step, and how many tokens each: continuous batching with chunked prefill.

Decoding sequences go first (one token each), then prefill chunks fill the rest of the
step's token budget, so a long prompt never stalls running streams. When KV memory is
short, the youngest running sequence is preempted (its blocks freed, recomputed later);
a request that fits the context is never failed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from strata_engine.block_manager import BlockManager
from strata_engine.sequence import Sequence, Status


@dataclass(frozen=True)
class Work:
    seq: Sequence
    start: int  # first token index computed this step
    end: int  # one past the last
    # hybrid models: (tokens of this chunk computed, snapshot slot) where the state is copied
    captures: tuple[tuple[int, int], ...] = ()

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the sequence, so its last row picks a token."""
        return self.end == len(self.seq)


def cache_limit(seq: Sequence) -> int | None:
    """How many leading tokens may come from the prefix cache (None: all but the last).

    A request that wants prompt rows must compute every position it scores, so only the
    tokens before its first scored position (`prompt_rows_from - 1`) may be cached.
    """
    if not seq.wants_prompt_rows:
        return None
    return max(seq.request.logprobs.prompt_rows_from - 1, 0)


class Scheduler:
    def __init__(
        self, blocks: BlockManager, max_running: int, step_tokens: int, prefix_cache: bool = True
    ) -> None:
        self.blocks = blocks
        self.max_running = max_running
        self.step_tokens = step_tokens
        self.prefix_cache = prefix_cache
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0  # sequences sent back to wait for memory (a count; nothing decides on it)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _preempt(self, seq: Sequence) -> None:
        self.preemptions += 1
        self.running.remove(seq)
        self.blocks.release(seq)
        seq.num_computed = 0
        seq.status = Status.WAITING
        if seq.wants_prompt_rows:  # recomputed from scratch: score the prompt again
            seq.reset_prompt_rows()
        self.waiting.appendleft(seq)

    def _behind_shared_prefix(self, seq: Sequence) -> bool:
        """A request waits while a running one is still computing the prefix it would take from
        the cache (every full block before its last token, or before its first scored position):
        once that one has registered the blocks, it reads them instead of computing them again.

        This is how the `n` choices of one prompt, identical requests sent together and the N
        candidates of one prompt (see `scoring`) compute the prompt once; a hybrid model's
        follower starts from the leader's state snapshot at that boundary, so its recurrent
        state is a copy of the leader's (a fork), not a second pass over the prompt.
        """
        if not self.prefix_cache:
            return False
        limit = cache_limit(seq)
        reusable = len(seq) - 1 if limit is None else min(limit, len(seq) - 1)
        shareable = reusable // self.blocks.block_size * self.blocks.block_size
        if shareable <= 0:
            return False
        prefix = seq.token_ids[:shareable]
        return any(
            other.num_computed < shareable and other.token_ids[:shareable] == prefix for other in self.running
        )

    def finish(self, seq: Sequence) -> None:
        seq.status = Status.FINISHED
        # its blocks first: `stats` is read from other threads, and a request no longer counted
        # as running must no longer hold blocks (a client waiting for idle then reads them free)
        self.blocks.release(seq)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def schedule(self) -> list[Work]:
        budget = self.step_tokens
        work: list[Work] = []
        for seq in list(self.running):  # oldest first
            if budget <= 0:
                break
            if seq.status is not Status.RUNNING:
                continue
            n = min(len(seq) - seq.num_computed, budget)
            while not self.blocks.ensure(seq, seq.num_computed + n):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status is Status.RUNNING:
                work.append(Work(seq, seq.num_computed, seq.num_computed + n))
                budget -= n
        while budget > 0 and len(self.running) < self.max_running:
            ready = next((s for s in self.waiting if not self._behind_shared_prefix(s)), None)
            if ready is None:
                break
            seq = ready
            self.blocks.admit(seq, self.prefix_cache, cache_limit(seq))
            n = min(len(seq) - seq.num_computed, budget)
            if not self.blocks.ensure(seq, seq.num_computed + n):
                self.blocks.release(seq)
                seq.num_computed = 0
                break
            self.waiting.remove(seq)
            seq.status = Status.RUNNING
            seq.output.mark_scheduled()
            self.running.append(seq)
            work.append(Work(seq, seq.num_computed, seq.num_computed + n))
            budget -= n
        if self.prefix_cache and self.blocks.states is not None:  # hybrid: the snapshots to fill
            plan = self.blocks.plan_snapshots
            work = [replace(w, captures=plan(w.seq, w.start, w.end, cache_limit(w.seq))) for w in work]
        return work
