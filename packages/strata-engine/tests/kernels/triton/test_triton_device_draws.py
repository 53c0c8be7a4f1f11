"""Draws at temperature > 0 on the device: the Triton draw kernel gives the sampler's token.

The reference is the CPU sampler (`Sampler.sample` on the full fp32 row, its own float64 code
and numpy's sort, cumsum and searchsorted), given the same uniform: the kernel (kernels/triton/
draw.py, reached through `select.read_rows` as a step reaches it) must draw the same id over rows
with NaN, ties, -inf, one finite value and none, across temperatures, top-k and top-p, and at the
uniform's ends. Then the one rule (row_reads.read_for) takes the request's uniform exactly once,
only when the device draws, and a whole engine on TritonOps gives the CPU engine's events for
seeded sampled requests whose rows are never copied back whole.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)
from strata_engine.testing.triton_setup import FixedUniform, engine_on, on

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

import triton
import triton.language as tl
from gguf import GGMLQuantizationType as QT

from strata_engine import LogprobParams, Request, SamplingParams, exactmath
from strata_engine.kernels.rows import DeviceDraw, RowRead
from strata_engine.kernels.triton import draw, ieee, select
from strata_engine.row_reads import read_for
from strata_engine.sampler import Sampler, Uniform
from strata_engine.testing.tiny_arch_models import ARCH_SPECS, write_arch_model

VOCAB = 700


@triton.jit
def _exp_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + at, draw.exp(tl.load(x_ptr + at, mask=at < N, other=0.0)), mask=at < N)


def test_the_kernels_exp_is_exactmaths_bit_for_bit() -> None:
    """The weights' exp, operation by operation: k rounded by truncation, or a constant rounded to
    fp32, changes some of these bits (a draw would show it only rarely). A fused multiply-add in
    float64 would not show here (the interpreter's float64 fma rounds twice): on a GPU the
    launch's `enable_fp_fusion=False` rules it out."""
    rng = np.random.default_rng(3)
    edges = -(np.arange(36) + 0.5) * np.log(2)  # where k steps
    x = np.concatenate([rng.uniform(exactmath.WEIGHT_CUTOFF, 0.0, 20000), edges, np.nextafter(edges, 0),
                        [0.0, -0.0, exactmath.WEIGHT_CUTOFF, -1e-300, -2.0**-60]])  # fmt: skip
    x = x[x >= exactmath.WEIGHT_CUTOFF]
    out = on(np.zeros_like(x))
    _exp_kernel[(triton.cdiv(x.size, 1024),)](on(x), out, x.size, BLOCK=1024, **ieee.LAUNCH)
    got = out.cpu().numpy()
    assert got.view(np.int64).tolist() == exactmath.exp(x).view(np.int64).tolist()


def _rows() -> np.ndarray:
    """Log-probability rows whose draw a wrong NaN, tie, cut or sum rule would change."""
    rng = np.random.default_rng(5)
    x = rng.normal(0.0, 3.0, size=(8, VOCAB))
    x = (x - np.log(np.exp(x).sum(axis=1, keepdims=True))).astype(np.float32)
    x[1, ::5] = np.nan  # never drawn
    x[2] = np.round(x[2])  # wide ties: top-p's cut runs through a tie, by id
    x[3] = -np.inf
    x[3, 5] = -1.0  # one finite value
    x[4] = -np.inf  # none: the greedy rule (np.argmax: id 0)
    x[5] = np.nan  # none: the greedy rule (the first NaN)
    x[6, :400] = -np.inf
    x[6, 650] = 0.0  # a certain token, late in the row
    x[7] = np.float32(-np.log(VOCAB))  # all equal: the draw is u * V
    return x


CASES = [  # (temperature, top_k, top_p)
    (1.0, 0, 1.0),
    (0.7, 0, 0.9),
    (1.3, 5, 1.0),
    (0.5, 40, 0.6),
    (2.0, 0, 0.3),
    (1.0, 64, 0.95),
    (1e-3, 0, 0.5),
    (50.0, 3, 0.99),
    (1.0, 1, 1.0),
    (1.0, 0, 1e-6),
    (1.0, 0, 0.0),  # below the API's range (0, 1]: the best id is kept, as on the host
    (0.8, VOCAB, 0.7),  # a top-k as wide as the vocabulary cuts nothing
    (5e-324, 0, 1.0),  # the least temperature: every score but a 0.0 overflows to -inf
    (1e-300, 3, 0.9),
    (1e300, 0, 0.5),  # every weight within one of 2^32
]


def _device(lp: np.ndarray, draws: list[DeviceDraw]) -> list[int]:
    reads = [RowRead(min(max(1, d.top_k), 64), (), d) for d in draws]
    rows, _ = select.read_rows(on(lp), reads)
    return [r.drawn for r in rows]


def _host(row: np.ndarray, params: SamplingParams, u: float) -> int:
    sampler = Sampler(params)
    sampler.uniform = FixedUniform(u)  # type: ignore[assignment]
    return sampler.sample(row)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T{c[0]}-k{c[1]}-p{c[2]}")
def test_the_device_draws_the_samplers_token(case) -> None:
    temperature, top_k, top_p = case
    lp = _rows()
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    uniform = Uniform(2026)
    us = [uniform.draw() for _ in lp] + [0.0, 1.0 - 2.0**-53]  # and the uniform's two ends
    rows = np.concatenate([lp, lp[[0, 7]]])
    top_k_read = top_k if top_k <= 64 else 0  # wider than the selection: the rule reads the row
    draws = [DeviceDraw(temperature, top_k_read, top_p, u) for u in us]
    want = [_host(row, params, u) for row, u in zip(rows, us, strict=True)]
    assert _device(rows, draws) == want
    if top_k != 1 and top_p > 1e-3:
        assert len(set(want[:3])) > 1 or len({*want}) > 2, "the case draws different tokens"


def _edges(row: np.ndarray, params: SamplingParams, n: int) -> list[float]:
    """Pairs of adjacent doubles u where the host's draw from `row` changes (n of them, found by
    bisection): at each, floor(u * total) steps onto a running sum, so a draw that compares with
    >= where the rule says >, or whose weights differ by one, draws another token on one side."""
    grid = np.linspace(0.0, 1.0 - 2.0**-53, 64)
    tokens = [_host(row, params, float(u)) for u in grid]
    out: list[float] = []
    for lo, hi, a, b in zip(grid, grid[1:], tokens, tokens[1:], strict=False):
        if a == b:
            continue
        lo, hi = float(lo), float(hi)
        while np.nextafter(lo, 1.0) < hi:
            mid = lo + (hi - lo) / 2
            lo, hi = (mid, hi) if _host(row, params, mid) == a else (lo, mid)
        out += [lo, hi]
        if len(out) >= 2 * n:
            break
    return out


@pytest.mark.parametrize(
    "row,case",
    [(6, (1.0, 0, 1.0)), (0, (1.0, 0, 1.0)), (0, (0.7, 0, 0.9)), (2, (1.0, 5, 0.8)), (7, (1.0, 0, 0.5))],
    ids=["certain", "every-id", "top-p-listed", "top-k-ties", "top-p-wide"],
)
def test_the_draw_changes_token_where_the_sampler_does(row, case) -> None:
    temperature, top_k, top_p = case
    lp = _rows()[row]
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    us = _edges(lp, params, 4) if row != 6 else [0.0, 0.5, 1.0 - 2.0**-53]
    want = [_host(lp, params, u) for u in us]
    got = _device(
        np.repeat(lp[None], len(us), axis=0), [DeviceDraw(temperature, top_k, top_p, u) for u in us]
    )
    assert got == want
    assert row == 6 or len(set(want)) > 1


def test_the_draws_spread_as_the_sampler_s_do() -> None:
    """Many draws from one row: every one equal, and spread over many ids (not one token). One
    uniform in each sixteenth of [0, 1), so that 16 draws reach every part of the running sum (48
    random ones reached 14 ids of this row, these 16 reach 11)."""
    lp = np.repeat(_rows()[:1], 16, axis=0)
    uniform = Uniform(7)
    us = [(i + uniform.draw()) / len(lp) for i in range(len(lp))]
    params = SamplingParams(temperature=1.0, top_p=0.95)
    want = [_host(lp[0], params, u) for u in us]
    assert _device(lp, [DeviceDraw(1.0, 0, 0.95, u) for u in us]) == want
    assert len(set(want)) > 10


def test_the_rule_takes_the_uniform_once_and_only_for_a_device_draw() -> None:
    taken: list[float] = []

    def uniform() -> float:
        taken.append(0.25)
        return 0.25

    sampled = SamplingParams(temperature=0.8, top_k=10, top_p=0.9, max_tokens=4)
    lp = LogprobParams(top_n=3, named_ids=(7,))
    read = read_for(Request((1,), sampled, lp), prompt_token=None, samples=True, num_generated=0,
                    eog_ids=(2,), uniform=uniform)  # fmt: skip
    assert read == RowRead(10, (7,), DeviceDraw(0.8, 10, 0.9, 0.25))
    assert len(taken) == 1
    full_rows = [
        replace(sampled, top_k=65),  # beyond the selection's K
        replace(sampled, logit_bias=((3, 1.0),)),
        replace(sampled, presence_penalty=0.5),
        replace(sampled, min_tokens=2),  # eos still blocked
    ]
    for params in full_rows:
        assert read_for(Request((1,), params, lp), prompt_token=None, samples=True, num_generated=0,
                        eog_ids=(2,), uniform=uniform) is None  # fmt: skip
    among = Request((1,), replace(sampled, allowed_token_ids=(4, 3)), lp)  # the host draws from their values
    read = read_for(among, prompt_token=None, samples=True, num_generated=0, eog_ids=(2,), uniform=uniform)
    assert read == RowRead(3, (3, 4, 7))
    wide = Request((1,), sampled, LogprobParams(top_n=65))  # a listing beyond K: the whole row
    assert (
        read_for(wide, prompt_token=None, samples=True, num_generated=0, eog_ids=(2,), uniform=uniform)
        is None
    )
    assert len(taken) == 1, "a row read whole leaves the draw, and its uniform, to the host"
    assert (
        read_for(Request((1,), sampled, lp), prompt_token=None, samples=True, num_generated=0, eog_ids=(2,))
        is None
    )  # fmt: skip  (no generator given: no device draw)


# -- a whole engine on the device against the CPU engine ----------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_arch_model(
        tmp_path_factory.mktemp("draws") / "f32.gguf", ARCH_SPECS[0], seed=4, types=(QT.F32,)
    )


SAMPLED = SamplingParams(temperature=1.0, max_tokens=6, ignore_eos=True)


def _sampled() -> list[Request]:
    prompt = (12, 500, 33, 71, 9, 250, 17)
    return [
        Request(prompt, replace(SAMPLED, seed=11), LogprobParams(top_n=4)),
        Request(prompt[:4], replace(SAMPLED, seed=12, temperature=0.6, top_p=0.8), LogprobParams(top_n=2)),
        Request(prompt[2:], replace(SAMPLED, seed=13, top_k=8, top_p=0.9), LogprobParams(named_ids=(3, 998))),
        Request(prompt, replace(SAMPLED, seed=14, temperature=1.7, top_k=40)),
        Request(prompt[1:], replace(SAMPLED, seed=15, temperature=0.0), LogprobParams(top_n=1)),  # greedy
        Request(prompt, replace(SAMPLED, seed=16, allowed_token_ids=(5, 77, 600, 3)), LogprobParams(top_n=2)),
    ]


def test_sampled_requests_on_the_device_give_the_cpu_engines_events(model) -> None:
    cpu = engine_on(model, "cpu").generate_batch(_sampled())
    engine = engine_on(model, "cuda")
    reads: list[RowRead | None] = []
    read_rows = engine.ops.read_rows

    def counted(logits, wants):  # type: ignore[no-untyped-def]
        reads.extend(wants)
        return read_rows(logits, wants)

    engine.runner._read_rows = counted
    copied = engine.ops.bytes_read
    gpu = engine.generate_batch(_sampled())
    copied = engine.ops.bytes_read - copied
    assert all(r is not None for r in reads), "no row came back whole"
    # every token sampled at temperature > 0 is drawn on the device, but those among allowed ids
    assert sum(r.draw is not None for r in reads if r is not None) == 4 * 6, (
        "the device drew every token of the four requests it may draw for"
    )
    assert copied < len(reads) * 1000 * 4 // 5, f"{copied} bytes copied back for {len(reads)} rows"
    for i, (a, b) in enumerate(zip(cpu, gpu, strict=True)):
        assert a == b, f"request {i}: the device's events differ from the CPU engine's"
    tokens = [e.token_id for e in gpu[0] if hasattr(e, "token_id")]
    assert len(set(tokens)) > 1, "really sampled"
