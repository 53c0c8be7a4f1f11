"""Builds one step's flat batch from the scheduled work, runs the model, returns fp32 logprobs.

Only rows that someone reads get logits: the last row of a chunk that samples, and every
row whose next prompt token a request wants scored (echo / prompt logprobs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strata_engine.model import Transformer
from strata_engine.ops import AttentionMeta
from strata_engine.scheduler import Work

LOGITS_KEPT_BYTES = 256 * 2**20  # the largest logits buffer kept between steps


@dataclass(frozen=True)
class RowRef:
    """Why a row of logits was computed: to score the next prompt token, to sample, or both."""

    work: Work
    position: int  # the position whose output this row is (it predicts token position+1)
    scores_prompt: bool  # the request wants the prompt token at position+1 scored
    samples: bool  # the last row of a chunk that reaches the end of the sequence


class ModelRunner:
    def __init__(self, model: Transformer, num_blocks: int, block_size: int) -> None:
        cfg = model.cfg
        self.model = model
        self.block_size = block_size
        shape = (num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
        # empty, not zeros: a slot is always written before it is read, and untouched pages cost no memory
        self.kv = [(torch.empty(shape), torch.empty(shape)) for _ in range(cfg.n_layers)]
        self._logits_buffer = torch.empty(0, model.output.out_features, dtype=torch.float32)

    def run(self, work: list[Work]) -> tuple[list[RowRef], torch.Tensor]:
        ids, positions, token_seq, slots, rows = [], [], [], [], []
        bs = self.block_size
        max_blocks = max(len(w.seq.block_table) for w in work)
        tables = torch.zeros(len(work), max_blocks, dtype=torch.int32)
        flat = 0
        select: list[int] = []
        for i, w in enumerate(work):
            seq = w.seq
            tables[i, : len(seq.block_table)] = torch.tensor(seq.block_table, dtype=torch.int32)
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
            positions=torch.tensor(positions, dtype=torch.int32),
            token_seq=torch.tensor(token_seq, dtype=torch.int32),
            block_tables=tables,
            slots=torch.tensor(slots, dtype=torch.int64),
            block_size=bs,
        )
        step_ids = torch.tensor(ids, dtype=torch.int64)
        self.model.tp.send_step(step_ids, meta)  # tensor parallelism: the other ranks run it too
        hidden = self.model.forward(step_ids, meta, self.kv)
        logits = self.model.logits(
            hidden[torch.tensor(select, dtype=torch.int64)], out=self._logits(len(select))
        )
        return rows, self.model.ops.log_softmax(logits, inplace=True)

    def _logits(self, rows: int) -> torch.Tensor:
        """A [rows, vocab] buffer reused from step to step (the engine reads a step's rows before the
        next step): fresh memory costs a page fault per 4 KB, about 28 ms for 512 x 49152.
        Kept up to LOGITS_KEPT_BYTES; a larger step gets fresh memory."""
        vocab = self.model.output.out_features
        if rows * vocab * 4 > LOGITS_KEPT_BYTES:
            return torch.empty(rows, vocab, dtype=torch.float32)
        if self._logits_buffer.shape[0] < rows:
            self._logits_buffer = torch.empty(rows, vocab, dtype=torch.float32)
        return self._logits_buffer[:rows]

    def follow(self) -> None:
        """Tensor-parallel ranks other than 0: run each step rank 0 sends on this rank's shard and
        KV heads, until it says stop (see `TensorParallel.follow`)."""
        self.model.tp.follow(lambda ids, meta: self.model.forward(ids, meta, self.kv))
