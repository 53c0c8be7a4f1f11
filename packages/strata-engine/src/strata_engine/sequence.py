"""One request's state inside the engine; nothing about a request lives anywhere else."""

from __future__ import annotations

from enum import Enum, auto

from strata_engine.api import LogprobRow, Request
from strata_engine.output import RequestStream
from strata_engine.sampler import Sampler
from strata_engine.structured import Guide
from strata_engine.text.stream import TextStream


class Status(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    def __init__(
        self, request: Request, text: TextStream, output: RequestStream, guide: Guide | None = None
    ) -> None:
        self.request = request
        self.token_ids: list[int] = list(request.prompt_ids)
        self.num_prompt = len(request.prompt_ids)
        self.num_computed = 0  # tokens whose K/V is in the cache
        self.num_cached = 0  # prompt tokens taken from the prefix cache at admission
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # prefix hashes of the full blocks registered so far
        self.state_slot: int | None = None  # a hybrid model's recurrent state (recurrent_state.py)
        # state snapshots this sequence's steps are filling: (boundary, prefix hash, slot)
        self.pending_snapshots: list[tuple[int, int, int]] = []
        self.status = Status.WAITING
        self.sampler = Sampler(request.sampling, guide)  # holds the structured-output matcher
        self.text = text
        self.output = output  # the request's one output channel (and its abort flag)
        self.prompt_rows: list[LogprobRow | None] | None = None
        self.reset_prompt_rows()
        self.prompt_scores_sent = False

    def reset_prompt_rows(self) -> None:
        """No prompt rows yet: None for position 0 and every position before `prompt_rows_from`."""
        lp = self.request.logprobs
        first = max(1, min(lp.prompt_rows_from, self.num_prompt))
        self.prompt_rows = [None] * first if lp.prompt_logprobs else None

    @property
    def guide(self) -> Guide | None:
        """Structured output: this sequence's own matcher state (None when unconstrained)."""
        return self.sampler.guide

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.num_prompt

    @property
    def wants_prompt_rows(self) -> bool:
        return self.prompt_rows is not None and not self.prompt_scores_sent

    @property
    def aborted(self) -> bool:
        return self.output.aborted

    def __len__(self) -> int:
        return len(self.token_ids)
