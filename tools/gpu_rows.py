"""The GPU check's shared parts: its table of results, and the requests and rows both devices are
compared on (tools/gpu_check.py runs the checks, tools/gpu_speed.py its part (c)).

One module holds the table so that every part adds to the same one, however the check is started."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strata_engine.testing.shaped_models import Shape


class Table:
    """The rows printed at the end, in the same layout on a GPU and in a dry run."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []  # (section, check, result, detail)
        self.failures: list[str] = []
        self.lock = threading.Lock()

    def add(self, section: str, check: str, ok: bool | None, detail: str) -> None:
        result = "-" if ok is None else ("ok" if ok else "FAIL")
        with self.lock:
            self.rows.append((section, check, result, detail))
            if ok is False:
                self.failures.append(f"{section} {check}")
        print(f"  {section} {check}: {result} {detail}", flush=True)

    def print(self, seconds: float) -> None:
        with self.lock:
            print(f"\n{'section':<8} {'check':<62} {'result':<6} detail")
            for section, check, result, detail in self.rows:
                print(f"{section:<8} {check:<62} {result:<6} {detail}")
            print(f"\n{len(self.rows)} rows, {len(self.failures)} failed, {seconds:.0f} s", flush=True)


table = Table()


def same_bits(a: Any, b: Any) -> bool:
    """Two fp32 arrays (numpy or torch, any device) hold the same bits."""
    import numpy as np

    from strata_engine.kernels.base import to_numpy

    x, y = np.ascontiguousarray(to_numpy(a), np.float32), np.ascontiguousarray(to_numpy(b), np.float32)
    return x.shape == y.shape and bool(np.array_equal(x.view(np.uint32), y.view(np.uint32)))


def both_devices(mode: str) -> tuple[Any, Any]:
    """(the CPU's ops, the GPU's ops) for `mode`."""
    from strata_engine.kernels.choice import make_ops

    return make_ops(mode, "cpu"), make_ops(mode, "cuda")


def rows_of(events: Sequence[Any]) -> list[tuple]:
    """Every log-probability row a request produced, as comparable tuples (bits included)."""
    from strata_engine import PromptScores, Step

    out: list[tuple] = []
    for ev in events:
        if isinstance(ev, Step):
            out.append(("step", ev.token_id))
        rows = ev.rows if isinstance(ev, PromptScores) else (getattr(ev, "logprobs", None),)
        out += [(r.token_id, r.logprob, r.top, getattr(r, "named", None)) for r in rows if r is not None]
    return out


def requests_for(
    shape: Shape, n: int, longest: int, max_tokens: int, seed: int, vary: bool = False
) -> list[Any]:
    """`n` greedy requests with prompt rows, top-20 and named ids; `vary`: their max_tokens run
    1..max_tokens (a batch that shrinks step by step) and the first samples every token at
    temperature 1, top-p 0.9 from a seed (drawn on the device by the sampler's rule, draw.py)."""
    import random

    from strata_engine import LogprobParams, Request, SamplingParams

    rnd = random.Random(seed)
    named = tuple(sorted(rnd.sample(range(shape.vocab - 3), min(64, shape.vocab - 3))))
    return [
        Request(
            tuple(rnd.randrange(shape.vocab - 3) for _ in range(rnd.randint(3, longest))),
            SamplingParams(
                max_tokens=1 + (i - 1) % max_tokens if vary and i else max_tokens,
                temperature=1.0 if vary and i == 0 else 0.0,
                top_p=0.9 if vary and i == 0 else 1.0,
                seed=seed,
                ignore_eos=True,
            ),
            LogprobParams(top_n=20, prompt_logprobs=True, named_ids=named),
        )
        for i in range(n)
    ]


def graphs_engine(path: Path, **options: Any) -> Any:
    """A GPU engine whose decode steps run on CUDA graphs (the STRATA_CUDA_GRAPHS switch)."""
    from strata_engine import LLMEngine
    from strata_engine.kernels.triton.graphs import SWITCH

    os.environ[SWITCH] = "1"  # read when TritonOps is built
    try:
        engine = LLMEngine(path, device="cuda", **options)
    finally:
        os.environ.pop(SWITCH, None)
    if engine.ops.decode_graphs is None:
        raise RuntimeError(f"{SWITCH}=1 did not turn the static decode path on")
    return engine
