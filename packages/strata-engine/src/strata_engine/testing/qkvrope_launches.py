"""The q/k/v + RoPE + KV-write launch (kernels/triton/qkvrope.py) in the forms a GPU runs, recorded
for the compile check (triton_compile.py), whose tiny models do not take it (their q/k/v mix
types the launch does not read, or have biases):

    TRITON_INTERPRET=1 STRATA_TRITON_GPU_TILES=1 python -m strata_engine.testing.qkvrope_launches SPECS.json
    python -m strata_engine.testing.triton_compile analyse SPECS.json STATS.json

The launches are an 8B layer's (heads of 128, llama's interleaved pairs) at a narrow width, with
the GPU's tiles (BN 256): q/k Q4_K and v Q6_K (two weights, Q4_K_M's) and q/k/v Q4_K stacked,
one program a tile and split along K with the float steps for 1 row and for 4, a 2-byte cache;
the Q4_K_M layout with the attention in the launch (qkvattn.py, 4 query heads a KV head); and rope.py's RoPE + KV-write launch, whose device functions it shares.
"""

from __future__ import annotations

import sys
from pathlib import Path

FORMS = (  # (programs, rows): one program a tile (4 rows), split along K at batch 1 and for 4 rows
    (1, 4),
    (132, 1),
    (132, 4),
)


def workload(tmp: Path, shard: int = 0, shards: int = 1) -> None:
    """Each form of the launch, for both weight layouts, run once under the interpreter."""
    import numpy as np
    import torch
    from gguf import GGMLQuantizationType as QT

    from strata_engine.gguf_loader import TensorInfo
    from strata_engine.kernels.base import RopeTable
    from strata_engine.kernels.native.backend import NativeOps
    from strata_engine.kernels.triton import mmadecode, packed, qkvrope, rope
    from strata_engine.kernels.triton.quantize import quantize
    from strata_engine.kernels.weights import Weight
    from strata_engine.testing.tiny_models import encode_tensor

    k, (hq, hk, d) = 256, (2, 1, 128)
    rng = np.random.default_rng(0)
    c = NativeOps(1, q8=True, limbs=3)

    def weight(n: int, qtype: QT) -> packed.PackedWeight:
        data = np.ascontiguousarray(encode_tensor(rng.normal(0, 0.05, (n, k)).astype(np.float32), qtype, rng))
        return packed.from_packed(
            c.pack(Weight.from_info(TensorInfo("w", (n, k), qtype, data.reshape(-1)))), "cpu"
        )

    layouts = (
        [weight((hq + hk) * d, QT.Q4_K), weight(hk * d, QT.Q6_K)],
        [weight((hq + 2 * hk) * d, QT.Q4_K)],
    )
    ang = np.arange(8)[:, None] * 10000.0 ** (-np.arange(d // 2) * 2.0 / d)[None, :]
    table = RopeTable(np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), d, True)
    cos, sin = torch.from_numpy(table.cos), torch.from_numpy(table.sin)
    for weights in layouts:
        for programs, rows in FORMS:
            mmadecode.PROGRAMS = programs
            xq = quantize(torch.from_numpy(rng.normal(0, 1, (rows, k)).astype(np.float32)), 3)
            kc, vc = (torch.zeros((8, hk, d), dtype=torch.float16) for _ in range(2))
            pos, slots = torch.arange(rows, dtype=torch.int32), torch.arange(rows, dtype=torch.int64)
            assert qkvrope.fits(rows, k, weights, 3, (hq, hk, d), table, kc, vc)
            qkvrope.qkv_rope(xq, weights, (hq, hk, d), pos, slots, table, cos, sin, kc, vc)
    # with the attention in it (qkvattn.py): an 8B layer's group of 4 query heads a KV head, its
    # output quantised for the output projection, in the same forms, the Q4_K_M layout
    from strata_engine.kernels.base import AttentionMeta

    heads = (4, 1, d)
    pair = [weight(5 * d, QT.Q4_K), weight(d, QT.Q6_K)]
    tables = torch.tensor([[1, 0]], dtype=torch.int32)
    for programs, rows in FORMS:
        mmadecode.PROGRAMS = programs
        xq = quantize(torch.from_numpy(rng.normal(0, 1, (rows, k)).astype(np.float32)), 3)
        kc, vc = (torch.zeros((2, 4, 1, d), dtype=torch.float16) for _ in range(2))
        pos, seq = torch.arange(rows, dtype=torch.int32), torch.zeros(rows, dtype=torch.int32)
        slots = (4 + pos).to(torch.int64)
        meta = AttentionMeta(pos.numpy(), seq.numpy(), tables.numpy(), slots.numpy(), 4)
        assert qkvrope.fits(rows, k, pair, 3, heads, table, kc, vc)
        qkvrope.qkv_rope_attention(
            xq, pair, heads, pos, slots, table, cos, sin, kc, vc, meta, seq, tables, 7, None, 0, 0.0, None, 3
        )
    # the separate launch, whose rotation and cache stores (rope._rotate, kv.store_row) it shares
    q, keys, v = (torch.ones(1, h, d) for h in (hq, hk, hk))
    rope.rope_write(q, keys, v, pos[:1], slots[:1], table, cos, sin, kc, vc)


if __name__ == "__main__":
    from strata_engine.testing import triton_compile

    triton_compile.workloads = workload  # record's workloads: these launches only
    triton_compile.record(Path(sys.argv[1]))
