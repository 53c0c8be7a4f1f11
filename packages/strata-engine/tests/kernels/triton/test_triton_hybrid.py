"""The hybrid recurrent models (qwen35, qwen35moe, qwen3next) on the Triton kernels give the CPU
engine's bits. Their matmuls, norms, SiLU and gated attention run on the device; the DeltaNet
recurrence and the short convolution run on the host, on the states the model keeps there
(recurrent_state.py), through hybrid_model's numpy code, whose operations are recurrence.c's.
Under Triton's interpreter without a GPU, as the other Triton tests: every logprob row of each
family's tiny file (prompt positions and greedy decode steps), batched and chunked 5 tokens a
step, equals the CPU engine's for each request alone; a prefix-cache hit (a state snapshot)
gives the CPU's cold run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams, Step
from strata_engine.hybrid_model import HybridTransformer
from strata_engine.kernels.triton.graphs import DecodeGraphs
from strata_engine.testing.compare import run_batch
from strata_engine.testing.tiny_hybrid_models import SPEC, SPEC_MOE, SPEC_NEXT, write_qwen35
from strata_engine.testing.tiny_models import VOCAB_SIZE
from strata_engine.testing.triton_checks import assert_same_rows, rows


def _ids(seed: int, n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(seed).integers(7, VOCAB_SIZE - 3, size=n))


@pytest.mark.parametrize("spec", [SPEC, SPEC_MOE, SPEC_NEXT], ids=["qwen35", "qwen35moe", "qwen3next"])
def test_hybrid_rows_are_the_cpu_engines(tmp_path: Path, spec) -> None:
    """Two prompts batched (one across a KV block boundary), and the first chunked: each row the
    CPU engine's for the request alone."""
    path = write_qwen35(tmp_path / "hybrid.gguf", spec, seed=1)
    prompts = [_ids(1, 20), _ids(2, 6)]
    cpu = rows(path, "native", "cpu", prompts, "alone")
    assert_same_rows(cpu, rows(path, "native", "cuda", prompts, "batched"), "batched")
    first = {key: row for key, row in cpu.items() if key[0] == prompts[0]}
    assert_same_rows(first, rows(path, "native", "cuda", prompts[:1], "chunked"), "chunked")


def test_a_snapshot_hit_gives_the_cpus_cold_run(tmp_path: Path) -> None:
    """Two prompts sharing 70 tokens on the device engine: the second starts from the state
    snapshot taken at 64 (inside a chunk of 24) and gets the CPU engine's cold bits, prompt rows
    from the shared prefix on and decode steps."""
    path = write_qwen35(tmp_path / "hybrid.gguf", SPEC, seed=1)
    prefix = _ids(3, 70)
    second = Request(
        prefix + _ids(5, 6),
        SamplingParams(max_tokens=2, temperature=0.0),
        LogprobParams(top_n=5, prompt_logprobs=True, prompt_rows_from=66),
    )
    gpu = LLMEngine(path, device="cuda", kernels="native", kv_cache_mb=16, step_tokens=24)
    run_batch(gpu, [Request(prefix + _ids(4, 3), SamplingParams(max_tokens=1, temperature=0.0))])
    events = list(gpu.generate(second))
    assert next(e for e in events if isinstance(e, Step)).num_cached_tokens == 64
    cpu = LLMEngine(path, kernels="native", num_threads=2, kv_cache_mb=16, prefix_cache=False)
    assert run_batch(gpu, [second])[0] == run_batch(cpu, [second])[0]
    assert gpu.blocks.states is not None and gpu.blocks.states.snapshot_hits >= 2


def test_cuda_graphs_leave_the_hybrid_models_to_the_eager_path(tmp_path: Path) -> None:
    """The static decode path replays launches and reads no host value; a DeltaNet layer
    advances its state on the host, so the static path does not take a hybrid model's steps."""
    path = write_qwen35(tmp_path / "hybrid.gguf", SPEC, seed=1)
    engine = LLMEngine(path, device="cuda", kernels="native", kv_cache_mb=16)
    assert isinstance(engine.runner.model, HybridTransformer)
    assert not DecodeGraphs.covers(engine.runner.model)
