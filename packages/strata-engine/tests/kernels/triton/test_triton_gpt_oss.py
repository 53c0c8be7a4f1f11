"""gpt-oss on the Triton kernels gives the CPU engine's bits: attention sinks in the attention
kernel (the sink in the max and, after the positions, in the denominator, as attention.c), the
clamped SwiGLU as an elementwise kernel (elementwise.c strata_swiglu_oai), and the sliding-window
layers alternating with full ones. Under Triton's interpreter without a GPU, as the other
Triton tests: each kernel against the C kernel on the same inputs, then a tiny gpt-oss file's
every logprob row (prompt positions past the window, and greedy decode steps), batched and
chunked, against the CPU engine's."""

from __future__ import annotations

import numpy as np
import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine.gpt_oss import ALPHA, LIMIT
from strata_engine.kernels.choice import make_ops
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.testing.tiny_gpt_oss import write_gpt_oss
from strata_engine.testing.tiny_models import VOCAB_SIZE
from strata_engine.testing.triton_checks import (
    LENGTHS,
    POSITIONS,
    TOKEN_SEQ,
    assert_c_bits,
    assert_same_rows,
    attention_meta,
    paged_cache,
    rows,
)
from strata_engine.testing.triton_setup import on


def test_swiglu_oai_is_cs_bits() -> None:
    """Both sides of the clamps, their edges, NaN and the exponent's range, against C."""
    rng = np.random.default_rng(1)
    gate = (rng.standard_normal(3000) * 6).astype(np.float32)
    up = (rng.standard_normal(3000) * 6).astype(np.float32)
    special = [0.0, -0.0, LIMIT, -LIMIT, np.nan, np.inf, -np.inf, 1e-30, -200.0, 60.0]
    gate[: len(special)] = special
    up[: len(special)] = special[::-1]
    want = NativeOps(num_threads=1).swiglu_oai(gate, up, ALPHA, LIMIT)
    got = make_ops("native", device="cuda").swiglu_oai(gate, up, ALPHA, LIMIT)
    assert_c_bits(got, want)


@pytest.mark.parametrize("window", [0, 12])
def test_attention_with_sinks_is_cs_bits(window: int) -> None:
    """Prefill chunks across block boundaries and a decode token, full and sliding, against C;
    a sink above every score (its numerator 1) and one far below (none of the sum's bits)."""
    bs, kvh, d, h = 16, 2, 32, 4
    k, v, tables = paged_cache(LENGTHS, kvh, d, bs, seed=2)
    meta = attention_meta(tables, TOKEN_SEQ, POSITIONS, bs)
    q = np.random.default_rng(3).standard_normal((len(POSITIONS), h, d)).astype(np.float32)
    sinks = np.array([0.5, 40.0, -30.0, -1.25], np.float32)
    want = NativeOps(num_threads=1).attention(q, k, v, meta, None, window, 0.0, sinks)
    ops = make_ops("native", device="cuda")  # the caches on its device: the ops' own twins are zeroed
    got = ops.attention(q, on(k), on(v), meta, None, window, 0.0, sinks)
    assert_c_bits(got.cpu(), want)
    plain = ops.attention(q, on(k), on(v), meta, None, window, 0.0, None)
    assert not np.array_equal(plain.cpu().numpy(), want)  # the sinks changed the output


def test_gpt_oss_rows_are_the_cpu_engines(tmp_path) -> None:
    """A tiny gpt-oss (window 8: a 20-token prompt slides on its even layer) on TritonOps: every
    row of the prompts batched, and of the first prompt chunked 5 tokens a step, equals the CPU
    engine's for each request alone (fp32 weights: C's dot_1 matmul order in every mode)."""
    kernels = "native"
    path = write_gpt_oss(tmp_path / "gpt-oss.gguf", seed=3)
    rng = np.random.default_rng(3)
    prompts = [tuple(int(t) for t in rng.integers(7, VOCAB_SIZE - 3, size=n)) for n in (20, 6)]
    cpu = rows(path, kernels, "cpu", prompts, "alone")
    assert_same_rows(cpu, rows(path, kernels, "cuda", prompts, "batched"), f"{kernels}, batched")
    first = {key: row for key, row in cpu.items() if key[0] == prompts[0]}
    assert_same_rows(first, rows(path, kernels, "cuda", prompts[:1], "chunked"), f"{kernels}, chunked")
