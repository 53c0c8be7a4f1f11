"""Checks the Triton tests share: the CPU's bits against the device's, and the inputs they are compared on."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf import quants

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import AttentionMeta
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import matmul, packed
from strata_engine.kernels.triton.backend import TritonOps
from strata_engine.kernels.triton.stored import StoredWeight
from strata_engine.kernels.weights import Weight
from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.triton_setup import DEVICE, on


def device_matmul(x: np.ndarray, sw: StoredWeight, bias: np.ndarray | None = None) -> torch.Tensor:
    b = on(bias) if bias is not None else None
    return matmul.matmul(on(x), sw.wq, sw.wf, sw.kt, sw.out_features, sw.in_features, sw.row_bytes, b).cpu()


def activations(m: int, k: int, seed: int) -> np.ndarray:
    x = (np.random.default_rng(seed).standard_normal((m, k)) * 3).astype(np.float32)
    x[0, :4] = [0.0, -0.0, 1e30, -1e-30]
    x[m // 2, k // 3] = 5e3
    return x


GENERATE = 2  # greedy decode steps after each prompt: their rows are compared too


def rows(path: Path, kernels: str, device: str, prompts, mode: str, kv: str = "fp32") -> dict[tuple, bytes]:
    kw: dict = {"prefix_cache": False, "kv_cache_mb": 16, "kv_cache_dtype": kv}
    if mode == "chunked":
        kw["step_tokens"] = 5
    if device == "cpu":
        kw["num_threads"] = 2
    engine = LLMEngine(path, device=device, kernels=kernels, parallel=8, **kw)
    rec = Recorder(engine)
    requests = step_requests(prompts)
    if mode == "batched":
        engine.generate_batch(requests)
    else:
        for r in requests:
            for _ in engine.generate(r):
                pass
    return rec.rows


def assert_same_rows(cpu: dict[tuple, bytes], gpu: dict[tuple, bytes], what: str) -> None:
    assert cpu.keys() == gpu.keys(), f"{what}: the engines computed different rows"
    for key in sorted(cpu, key=lambda k: (len(k[0]), k[0], k[1], k[2])):
        if cpu[key] != gpu[key]:
            a, b = (np.frombuffer(r, dtype=np.float32) for r in (cpu[key], gpu[key]))
            bad = np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))
            raise AssertionError(
                f"{what}: position {key[1]} of a {len(key[0])}-token prompt differs in "
                f"{len(bad)} of {a.size} logprobs, first token {bad[0]}: {a[bad[0]]!r} vs {b[bad[0]]!r}"
            )


def bits(a: torch.Tensor | np.ndarray) -> np.ndarray:
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_c_bits(got: torch.Tensor, want: np.ndarray) -> None:
    """got (Triton) equals want (C) bit for bit; else say where and by how much."""
    g, w = bits(got), bits(want)
    assert g.shape == w.shape
    bad = np.argwhere(g != w)
    assert not len(bad), (
        f"{len(bad)} of {g.size} values differ from C's, first at {tuple(bad[0])}: "
        f"{g[tuple(bad[0])].view(np.float32)!r} vs {w[tuple(bad[0])].view(np.float32)!r}"
    )


def paged_cache(lengths: list[int], kvh: int, d: int, bs: int, seed: int):
    """A shuffled paged cache holding sequences of `lengths` tokens, and each sequence's table."""
    rng = np.random.default_rng(seed)
    need = [math.ceil(n / bs) for n in lengths]
    num_blocks = sum(need) + 2
    order = rng.permutation(num_blocks).tolist()
    tables = np.zeros((len(lengths), max(need) + 1), dtype=np.int32)  # a spare column: max_blocks > used
    at = 0
    for i, n in enumerate(need):
        tables[i, :n] = order[at : at + n]
        at += n
    k = rng.standard_normal((num_blocks, bs, kvh, d)).astype(np.float32)
    v = rng.standard_normal((num_blocks, bs, kvh, d)).astype(np.float32)
    return k, v, tables


def attention_meta(tables: np.ndarray, token_seq: list[int], positions: list[int], bs: int) -> AttentionMeta:
    return AttentionMeta(
        positions=np.array(positions, dtype=np.int32),
        token_seq=np.array(token_seq, dtype=np.int32),
        block_tables=tables,
        slots=np.zeros(len(positions), dtype=np.int64),  # unused by attention
        block_size=bs,
    )


# a prefill chunk of sequence 0 (positions at and around the block boundaries of 16), a decode
# token of sequence 1, a chunk of sequence 2
LENGTHS = [49, 5, 33]


TOKEN_SEQ = [0, 0, 0, 0, 0, 1, 2, 2]


POSITIONS = [0, 15, 16, 31, 48, 4, 20, 32]


class Recorder:
    """Every row the engine computes, as bytes, by (prompt, position, prompt row or sampled)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.rows: dict[tuple, bytes] = {}
        # every row whole: this test compares full rows (test_triton_device_rows.py the selections)
        engine.runner.sparse = False
        run = engine.runner.run

        def recorded(refs, lp):
            for ref, row in zip(refs, lp, strict=True):  # rows share a buffer: copy each now
                self.rows[(ref.work.seq.request.prompt_ids, ref.position, ref.samples)] = row.tobytes()
                yield row

        def recording_run(work):
            refs, lp = run(work)
            return refs, recorded(refs, lp)

        engine.runner.run = recording_run


def step_requests(prompts: list[tuple[int, ...]]) -> list[Request]:
    return [
        Request(
            p,
            SamplingParams(max_tokens=GENERATE, temperature=0.0, ignore_eos=True),
            LogprobParams(top_n=1, prompt_logprobs=True),
        )
        for p in prompts
    ]


def assert_tiny_model_on_both(path: Path) -> None:
    """A whole tiny model in "native" (three limbs) on the GPU backend gives the CPU engine's bits:
    a 12-token prompt's logprobs with the top 20 and two greedy decode steps, both named "native"."""
    from strata_engine.provenance import arithmetic

    request = Request(
        (5, 70, 100, 33, 250, 17, 9, 120, 44, 3, 61, 200),
        SamplingParams(max_tokens=2, temperature=0, ignore_eos=True),
        LogprobParams(top_n=20, prompt_logprobs=True),
    )
    got = {}
    for device in ("cpu", "cuda"):
        engine = LLMEngine(path, kernels="native", device=device, parallel=2)
        got[device] = [
            (r.token_id, r.logprob, r.top)
            for event in engine.generate(request)
            for r in (getattr(event, "rows", None) or (getattr(event, "logprobs", None),))
            if r is not None
        ]
        assert arithmetic(engine.kernels) == "native"
    assert len(got["cpu"]) == 13 and got["cuda"] == got["cpu"]


@dataclass(frozen=True)
class HeldWeight:
    """A weight of extreme blocks packed for the device (`pw`, TritonOps) and by the C packer (`cw`),
    with the two backends and the device's packed weight (`dev`)."""

    ops: TritonOps
    c: NativeOps
    pw: Any  # the backends' packed weights
    cw: Any
    dev: packed.PackedWeight


def held_as_the_c_packer(qtype: QT, n: int, k: int, limbs: int, ids: list[int]) -> HeldWeight:
    """Extreme blocks of `qtype` [n, k] packed by TritonOps and by the C packer (q8, `limbs`):
    asserts the same bytes, and that rows `ids` read on the device are gguf-py's values (an
    independent dequantisation)."""
    stored = extreme_blocks(qtype, n, k, seed=3)
    w = Weight.from_info(TensorInfo("w", (n, k), qtype, stored))
    ops, c = TritonOps(DEVICE, limbs=limbs), NativeOps(1, q8=True, limbs=0 if limbs == 1 else limbs)
    pw, cw = ops.pack(w), c.pack(w)
    assert pw.kernel_type == cw.kernel_type and np.array_equal(pw.raw, cw.raw)
    dense = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(n, k)
    assert_c_bits(ops.embed(pw, np.array(ids)).cpu(), dense[ids])
    return HeldWeight(ops, c, pw, cw, packed.from_packed(pw, DEVICE))
