"""The hybrid recurrent models (qwen35, qwen35moe, qwen3next) on the Triton kernels give the CPU
engine's bits. Their matmuls, norms, SiLU, gated attention and DeltaNet recurrence
(triton/recurrence.py, on states kept on the device) run there; the short convolution and the
gates' exactmath on the host. Under Triton's interpreter without a GPU, as the other Triton
tests: the recurrence kernel against the C kernel (recurrence.c) on the same inputs, snapshots
included; every logprob row of each family's tiny file (prompt positions and greedy decode
steps), batched and chunked 5 tokens a step, equals the CPU engine's for each request alone; a
prefix-cache hit (a state snapshot) gives the CPU's cold run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams, Step
from strata_engine.hybrid_model import HybridTransformer
from strata_engine.kernels.choice import make_ops
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import recurrence
from strata_engine.kernels.triton.graphs import DecodeGraphs
from strata_engine.testing.compare import run_batch
from strata_engine.testing.tiny_hybrid_models import SPEC, SPEC_MOE, SPEC_NEXT, write_qwen35
from strata_engine.testing.tiny_models import VOCAB_SIZE
from strata_engine.testing.triton_checks import assert_c_bits, assert_same_rows, rows


@pytest.mark.parametrize(("d", "hv"), [(16, 4), (64, 2)])
def test_the_recurrence_kernel_is_cs_bits(d: int, hv: int) -> None:
    """Three sequences in scattered state slots (one a decode token), two snapshots taken inside
    them: the outputs, the advanced states and the snapshots are recurrence.c's bits."""
    rng = np.random.default_rng(d)
    q, k, v = (rng.standard_normal((11, hv, d)).astype(np.float32) for _ in range(3))
    decay = rng.uniform(0.5, 1.0, (11, hv)).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, (11, hv)).astype(np.float32)
    states = rng.standard_normal((6, hv, d, d)).astype(np.float32)
    slots, starts, counts = (np.array(a, np.int32) for a in ([2, 0, 4], [0, 5, 6], [5, 1, 5]))
    captures = ((0, 3, 5), (2, 5, 1))
    scale = float(np.float32(1.0 / np.sqrt(np.float32(d))))
    want_states = states.copy()
    want = NativeOps(1).delta_rule(
        want_states, slots, starts, counts, (q, k, v), decay, beta, scale, captures
    )
    t = torch.from_numpy
    got_states = t(states.copy())
    got = recurrence.delta_rule(
        got_states, t(slots), t(starts), t(counts), (t(q), t(k), t(v)), t(decay), t(beta), scale, captures
    )
    assert_c_bits(got, want)
    assert_c_bits(got_states, want_states)
    assert not np.array_equal(want_states[5], states[5])  # the snapshot was written


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
    assert all(isinstance(a, torch.Tensor) for a in gpu.blocks.states.ssm.values())  # on the device


def test_cuda_graphs_leave_the_hybrid_models_to_the_eager_path(tmp_path: Path) -> None:
    """The static decode path replays launches and reads no host value; a DeltaNet layer's
    convolution and gates run on the host, so the static path does not take a hybrid model's steps."""
    path = write_qwen35(tmp_path / "hybrid.gguf", SPEC, seed=1)
    engine = LLMEngine(path, device="cuda", kernels="native", kv_cache_mb=16)
    assert isinstance(engine.runner.model, HybridTransformer)
    assert not DecodeGraphs.covers(engine.runner.model)


def test_a_head_size_the_kernel_lacks_keeps_the_states_on_the_host() -> None:
    """A head size that is not a power of two: the states stay numpy and the model runs its own
    numpy sequence (no device rule); a power of two goes to the device."""
    ops = make_ops("native", device="cuda")
    host = np.zeros((2, 1, 12, 12), np.float32)
    assert ops.recurrent_states(host) is host and ops.delta_rule is None
    assert isinstance(ops.recurrent_states(np.zeros((2, 1, 16, 16), np.float32)), torch.Tensor)
    assert ops.delta_rule is not None
