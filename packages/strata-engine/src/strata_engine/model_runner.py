"""Builds one step's flat batch from the scheduled work, runs the model, returns fp32 logprobs.

Only rows that someone reads get logits: the last row of a chunk that samples, and every
row whose next prompt token a request wants scored (echo / prompt logprobs). Those rows'
logits are computed `logit_rows` at a time into one buffer kept between steps, so scoring a
long prompt needs no [prompt, vocab] array: a row's values do not depend on which rows are
computed with it (the kernels are batch-invariant), and each row is read before the next
chunk overwrites it.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

import numpy as np

from strata_engine.hybrid_model import HybridTransformer
from strata_engine.kernels.base import Array, AttentionMeta, like, to_numpy
from strata_engine.kernels.kv_types import KV_DTYPES, kv_head_width
from strata_engine.kernels.rows import Row, RowRead
from strata_engine.model import Transformer
from strata_engine.row_reads import read_for
from strata_engine.scheduler import Work

LOGIT_ROWS = 64  # rows of logits computed at once at the most: 12 MB for a 49k vocabulary
LOGIT_BYTES = 12 * 2**20  # the logits buffer's size at the most (64 rows of 49k), down to MIN_LOGIT_ROWS rows
MIN_LOGIT_ROWS = 8


def logit_rows(vocab: int) -> int:
    """Rows of logits computed at once: 64 for a 49k vocabulary, 12 for Gemma 3's 262k, where
    64 rows would hold 64 MiB at every long scoring request (the row's values are the same)."""
    return max(MIN_LOGIT_ROWS, min(LOGIT_ROWS, LOGIT_BYTES // (4 * max(vocab, 1))))


def kv_array(shape: tuple[int, ...], dtype: type[np.generic] = np.float32) -> np.ndarray:
    """Memory for one layer's K or V cache (fp32, or a 2-byte type: kv_types.py), backed by the OS page by page as it is written.

    Untouched pages cost no memory, and no slot is read before it is written. Small pages, not
    the huge pages numpy asks for: a huge page is zeroed (and, on a fragmented host, compacted)
    whole on its first write, which made prefills into fresh blocks about 10% slower.
    """
    memory = mmap.mmap(-1, max(math.prod(shape) * np.dtype(dtype).itemsize, 1))
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        memory.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(memory, dtype=dtype).reshape(shape)


@dataclass(frozen=True)
class RowRef:
    """Why a row of logits was computed: to score the next prompt token, to sample, or both."""

    work: Work
    position: int  # the position whose output this row is (it predicts token position+1)
    scores_prompt: bool  # the request wants the prompt token at position+1 scored
    samples: bool  # the last row of a chunk that reaches the end of the sequence


class ModelRunner:
    def __init__(
        self,
        model: Transformer | HybridTransformer,
        num_blocks: int,
        block_size: int,
        eog_ids: Collection[int] = (),
        kv_cache_dtype: str = "fp32",
    ) -> None:
        cfg = model.cfg
        self.model = model
        self.eog_ids = eog_ids  # the model's end-of-generation ids (a `min_tokens` block reads them)
        # copy back only what each row's request reads, where the ops select on their device
        self.sparse: bool = getattr(model.ops, "selects_on_device", False)
        self._read_rows: Callable[[Array, list[RowRead | None]], list[Row]] | None = getattr(
            model.ops, "read_rows", None
        )
        # the same of rows already log-softmaxed on the device (the static decode path's)
        self._read_logprobs: Callable[[Array, list[RowRead | None], np.ndarray], list[Row]] | None = getattr(
            model.ops, "read_logprobs", None
        )
        self.block_size = block_size

        def shape(layer: int) -> tuple[int, int, int, int]:  # gemma4's layers differ
            kv_heads, head_dim = cfg.heads(layer)
            return (num_blocks, block_size, kv_heads, kv_head_width(kv_cache_dtype, head_dim))

        dtype = KV_DTYPES[kv_cache_dtype]
        # a hybrid model's DeltaNet layers keep no KV (their state: recurrent_state.py)
        attends = (True,) * cfg.n_layers if cfg.hybrid is None else tuple(not r for r in cfg.hybrid.recurrent)
        none = np.zeros((0, *shape(0)[1:]), dtype=dtype)
        self.kv = [
            (kv_array(shape(i), dtype), kv_array(shape(i), dtype)) if a and cfg.owns_kv(i) else (none, none)
            for i, a in enumerate(attends)
        ]
        for i, source in enumerate(cfg.kv_source):  # gemma4: a shared-KV layer reads another's arrays
            self.kv[i] = self.kv[source]
        # fresh memory would cost a page fault per 4 KB on every step
        self.logit_rows = logit_rows(model.output.out_features)
        self._logits = np.empty((self.logit_rows, model.output.out_features), dtype=np.float32)

    def run(self, work: list[Work]) -> tuple[list[RowRef], Iterator[Row]]:
        """The step's rows and, in the same order, each row's fp32 log-probabilities over the
        vocabulary (or, with `sparse`, what its request reads of them: row_reads.py); read each
        row before asking for the next (they share one buffer)."""
        ids, positions, token_seq, slots, rows = [], [], [], [], []
        bs = self.block_size
        max_blocks = max(len(w.seq.block_table) for w in work)
        tables = np.zeros((len(work), max_blocks), dtype=np.int32)
        flat = 0
        select: list[int] = []
        for i, w in enumerate(work):
            seq = w.seq
            tables[i, : len(seq.block_table)] = seq.block_table
            for p in range(w.start, w.end):
                ids.append(seq.token_ids[p])
                positions.append(p)
                token_seq.append(i)
                slots.append(seq.block_table[p // bs] * bs + p % bs)
                scores_prompt = (
                    seq.wants_prompt_rows and seq.request.logprobs.prompt_rows_from <= p + 1 < seq.num_prompt
                )
                samples = w.samples and p == w.end - 1
                if scores_prompt or samples:
                    rows.append(RowRef(w, p, scores_prompt, samples))
                    select.append(flat)
                flat += 1
        meta = AttentionMeta(
            positions=np.array(positions, dtype=np.int32),
            token_seq=np.array(token_seq, dtype=np.int32),
            block_tables=tables,
            slots=np.array(slots, dtype=np.int64),
            block_size=bs,
            state_slots=None
            if work[0].seq.state_slot is None
            else np.array([w.seq.state_slot for w in work], dtype=np.int32),
            state_captures=tuple((i, n, slot) for i, w in enumerate(work) for n, slot in w.captures),
        )
        step_ids = np.array(ids, dtype=np.int64)
        self.model.tp.send_step(step_ids, meta)  # tensor parallelism: the other ranks run it too
        # a backend's static decode path (TritonOps with CUDA graphs on) takes the steps it can,
        # LM head and log-softmax included (graphs.StaticStep)
        graphs = getattr(self.model.ops, "decode_graphs", None)
        static = None if graphs is None else graphs.step(self.model, step_ids, meta, self.kv)
        hidden = self.model.forward(step_ids, meta, self.kv) if static is None else static.hidden
        if (check := getattr(self.model.ops, "check_allocations", None)) is not None:
            check()  # a layer the C kernels could not allocate for left its KV unwritten: fail here,
            # before the engine registers these blocks for reuse (NativeOps.check_allocations)
        lp = None if static is None else static.logprobs
        return rows, self._logprobs(hidden, np.array(select, dtype=np.int64), rows, lp)

    def _logprobs(
        self, hidden: Array, select: np.ndarray, refs: list[RowRef], lp: Array | None = None
    ) -> Iterator[Row]:
        """The selected rows' log-probabilities, `logit_rows` rows at a time; where the static
        path computed every row's already (`lp`, on the device), the step's reads of them at once."""
        ops, n = self.model.ops, self.logit_rows if lp is None else max(len(select), 1)
        for start in range(0, len(select), n):
            chunk, part = select[start : start + n], refs[start : start + n]
            if lp is not None:  # read where `chunk` says (TritonOps.read_logprobs), nothing recomputed
                assert self._read_logprobs is not None
                yield from self._read_logprobs(
                    lp, [self._read(r) if self.sparse else None for r in part], chunk
                )
                continue
            logits = self.model.logits(hidden[like(hidden, chunk)], out=self._logits[: len(chunk)])
            if self.sparse and self._read_rows is not None:
                yield from self._read_rows(logits, [self._read(ref) for ref in part])
            else:
                yield from to_numpy(ops.log_softmax(logits, inplace=True))

    def _read(self, ref: RowRef) -> RowRead | None:
        """What the host reads of this row (None: all of it), by the one rule (row_reads.py)."""
        seq = ref.work.seq
        return read_for(
            seq.request,
            prompt_token=seq.token_ids[ref.position + 1] if ref.scores_prompt else None,
            samples=ref.samples and seq.num_generated < seq.request.sampling.max_tokens,
            num_generated=seq.num_generated,
            eog_ids=self.eog_ids,
            uniform=seq.sampler.uniform.draw,
        )

    def follow(self) -> None:
        """Tensor-parallel ranks other than 0: run each step rank 0 sends on this rank's shard and
        KV heads, until it says stop (see `TensorParallel.follow`)."""
        self.model.tp.follow(lambda ids, meta: self.model.forward(ids, meta, self.kv))
