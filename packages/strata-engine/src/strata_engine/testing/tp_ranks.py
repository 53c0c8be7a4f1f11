"""Tensor-parallel ranks as real processes, for the engine's tests.

`run_ranks(n, out, models)` starts `python tp_ranks.py OUT MODEL...` n times with the variables
torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Every rank loads each
model with its shard; rank 0 runs `requests_for(engine)` on it, each request alone and then
all of them in one batch, and writes their events to OUT as JSON (floats as hex: the bits
survive); the other ranks follow rank 0's steps.

With `--fault MODEL`, rank 0 meets a planted bug in the middle of its forward (the other ranks
are then waiting in a collective it will never join): it writes what the request got and
what a later one gets; the other ranks must exit, with an error, at once.

With `--reduce` instead of models, the ranks run `TensorParallel.all_reduce` on the same
partial sums in batches of several sizes and rank 0 writes how many elements differ from the
float32 sum in rank order, p0 + p1 + ..., and between batch sizes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from strata_engine.api import (
    EngineEvent,
    EngineUnavailable,
    LogprobParams,
    LogprobRow,
    PromptScores,
    Request,
    SamplingParams,
    Step,
)
from strata_engine.engine import LLMEngine
from strata_engine.tensor_parallel import TensorParallel, init_from_env

PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:",
    "Question: Is the sky green? Answer (yes or no):",
    "Once upon a time, in a small village by the sea, there lived",
)
RANK_TIMEOUT_S = 300


def requests_for(engine: LLMEngine) -> list[Request]:
    """Greedy continuations with a row for every prompt position and every generated token."""
    return [
        Request(
            tuple(engine.tokenizer.encode(text))[:48],
            SamplingParams(max_tokens=6, temperature=0.0),
            LogprobParams(top_n=5, prompt_logprobs=True),
        )
        for text in PROMPTS
    ]


def row_json(row: LogprobRow | None) -> Any:
    if row is None:
        return None
    return [row.token_id, row.logprob.hex(), [[i, v.hex()] for i, v in row.top]]


def events_json(events: list[EngineEvent]) -> dict[str, Any]:
    """A request's prompt rows, generated tokens and their rows, as plain JSON."""
    prompt = next((e for e in events if isinstance(e, PromptScores)), None)
    steps = [e for e in events if isinstance(e, Step)]
    return {
        "prompt_rows": [row_json(r) for r in prompt.rows] if prompt else [],
        "tokens": [s.token_id for s in steps],
        "rows": [row_json(s.logprobs) for s in steps],
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(n: int, out: Path, args: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Run n ranks (`args`: model paths, or `--reduce`); every rank's completed process (rank 0 first)."""
    base = {
        **os.environ,
        "WORLD_SIZE": str(n),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, __file__, str(out), *args]
    procs = [
        subprocess.Popen(
            command,
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(n)
    ]
    done = []
    for p in procs:
        try:
            output, _ = p.communicate(timeout=RANK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        done.append(subprocess.CompletedProcess(p.args, p.returncode, output))
    return done


def reduce_check(tp: TensorParallel) -> dict[str, int]:
    """Partial sums spanning six decades (so the order of additions shows in the bits)."""
    generator = torch.Generator().manual_seed(1)
    partials = torch.randn(tp.world, 64, 576, generator=generator) * torch.logspace(-3, 3, 576)
    in_order = partials[0].clone()
    for p in partials[1:]:
        in_order = in_order + p
    off_order = off_batch = 0
    expected = in_order.numpy()
    for rows in (1, 3, 17, 64):  # numpy partial sums, as the CPU kernels hand them over
        total = tp.all_reduce(partials[tp.rank, :rows].numpy().copy())
        assert isinstance(total, np.ndarray)
        off_order += int((total != expected[:rows]).sum())
        off_batch += int((total[:1] != expected[:1]).sum())
    return {"off_order": off_order, "off_batch": off_batch}


def fault_check(engine: LLMEngine) -> dict[str, Any]:
    """A planted bug in rank 0's 40th matmul of a step: the request fails, later ones are refused."""
    calls, linear = [0], engine.ops.linear

    def buggy(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 40:
            raise ZeroDivisionError("planted")
        return linear(*args, **kwargs)

    engine.ops.linear = buggy
    outcome: dict[str, Any] = {}
    for name in ("first", "next"):
        try:
            engine.generate(requests_for(engine)[0])
            outcome[name] = "served"
        except EngineUnavailable as exc:
            outcome[name] = f"EngineUnavailable: {exc}"
    return outcome


def main(out: str, models: list[str]) -> None:
    tp = init_from_env(int(os.environ["WORLD_SIZE"]))
    if models[0] == "--fault":
        engine = LLMEngine(models[1], num_threads=1, kv_cache_mb=64, tensor_parallel=tp)
        if tp.rank != 0:
            engine.follow()  # raises EngineUnavailable once rank 0 has left
            return
        Path(out).write_text(json.dumps(fault_check(engine)))
        return
    if models == ["--reduce"]:
        result = reduce_check(tp)
        tp.close()
        if tp.rank == 0:
            Path(out).write_text(json.dumps(result))
        return
    results = {}
    for model in models:
        engine = LLMEngine(model, num_threads=1, kv_cache_mb=64, tensor_parallel=tp)
        if tp.rank != 0:
            engine.follow()
            continue
        requests = requests_for(engine)
        alone = [events_json(engine.generate(r)) for r in requests]
        batched = [events_json(e) for e in engine.generate_batch(requests)]
        results[model] = {"alone": alone, "batched": batched}
        tp.release()
    tp.close()
    if tp.rank == 0:
        Path(out).write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
