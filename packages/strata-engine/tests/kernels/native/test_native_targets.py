"""One kernel contract on every CPU: each target's build gives the same bits (issue 9).

The C test driver (native_driver.c, built with the kernels' C files) runs every kernel on fixed inputs; its output must be
byte-identical for every x86 target this host can run, for the AArch64 builds run under
qemu (when the cross compiler and qemu are installed: the engine nox session installs them),
and equal to the digest committed here, which every CI machine, of whatever CPU, re-proves.
Through ctypes, every target the host runs gives the same bits as the portable build on
random inputs of odd sizes, with any thread count. vf_exp's accuracy is stated and checked.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import AttentionMeta, RopeTable
from strata_engine.kernels.native import (
    BASE_FLAGS,
    HERE,
    SOURCES,
    TARGETS,
    compiler,
    runnable_targets,
    targets_to_test,
)
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import random_blocks

DRIVER = Path(__file__).parent / "driver" / "native_driver.c"
# sha256 of the driver's output: the same on AVX-512, AVX2, NEON and portable C builds.
# Change only with a deliberate change of the kernels' arithmetic, and say why in the commit.
DRIVER_SHA256 = "a0a7ce5c6c8e05ddfdfcc3768e019eb630edeccd450261c738aaa02705cd3924"
# sha256 of `driver q8`: the 8-bit-activation kernels (q8.c) alone, the same on every build.
DRIVER_Q8_SHA256 = "5a9ccd901f921ccf9baf9795b0cc50e4a37629dd8e7ad8fa821daf58c2663543"
# sha256 of `driver limb`: the integer-limb kernels (limb.c), 3 and 2 limbs, the same on every build.
DRIVER_LIMB_SHA256 = "d4ca4ed37838a2886180b0d069b11d0aa5134f9f3c4d11c816b16d5b44adf0d1"
# sha256 of `driver tiles`: grouped attention over runs of consecutive tokens (attention.c's token
# tiles), the same on every build and the same as before the tiles (each token and head alone).
DRIVER_TILES_SHA256 = "8e216e7c30c742e64115c72eecb7f760fcf8ab03025bb8116faed3f7ae1744bb"
# sha256 of `driver kvcache`: K/V values rounded to bf16 and fp16 (strata_kv_write), and attention
# over caches so stored (--kv-cache-dtype), the same on every build.
DRIVER_KV_SHA256 = "5d651f61b1725b06df94719323272912a212097e60a3cbb10fec107cb4223071"
# sha256 of `driver kvq8`: K/V blocks written as q8_0 (strata_kv_write, NaN, inf, ties, every
# magnitude) and attention over a q8_0 cache, the same on every build.
DRIVER_KVQ8_SHA256 = "d0605fb30021abbe0252ceecdde7ecb02a3048052a17454b193f03258b62a298"
# sha256 of `driver delta`: the DeltaNet recurrence of hybrid models (strata_delta_rule), the
# outputs and states, with a snapshot copied mid-chunk, the same on every build.
DRIVER_DELTA_SHA256 = "bbc64060c5fde6065c37d51f5414864930eac2a02a9a64541edf0c3500fc6322"
# sha256 of `driver gptoss`: attention with sinks (single-head, grouped, token tiles, a bf16 cache)
# and the clamped SwiGLU, the same on every build.
DRIVER_GPTOSS_SHA256 = "4edbd07f779f341ed0e5fc1562787bec4d3dc4108da9428d64aa64bc00bbddd1"
# sha256 of `driver held`: Q5_0, the codebook types (IQ4_NL, IQ4_XS, MXFP4) and the grid types
# (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S) in every arithmetic (the driver itself fails where one is not the
# Q8_0 blocks of the same values bit for bit), then the K-grid types Q3_K and IQ1_M (against their
# Q6_K blocks), IQ2_XS and IQ2_S, the same on every build.
DRIVER_HELD_SHA256 = "2b4f0d6ca33f32946b0130806d732f11c58985d9c86fbc096c4f7cb2f6083af3"
# sha256 of `driver half`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 held as stored (fp16 scales, WT_HALF_SCALES) in
# every arithmetic (the driver itself fails where one output is not their widened blocks' bit for bit)
DRIVER_HALF_SHA256 = "d1ecda7e758b946410c931df0f982b427224c7c019772c925b456a5ad5b8eb89"
# sha256 of `driver codebook`: IQ4_NL, MXFP4 and IQ4_XS held as stored (IQ4_NL's fp16 d, MXFP4's e8m0
# byte, IQ4_XS's super-blocks; WT_HALF_SCALES) in every arithmetic (the driver itself fails where one output is not their
# fp32-scale blocks' bit for bit)
DRIVER_CODEBOOK_SHA256 = "335d35f38c3dc7155ef969f50e8d5715a10425e7e3332f6ba1b27777e1a8a0f4"
DRIVER_FLAGS = [f for f in BASE_FLAGS if f not in ("-shared", "-fPIC")] + [
    "-Wno-unknown-pragmas",
    f"-I{HERE}",
]


_BUILT: dict[tuple[str, ...], Path] = {}  # (compiler, flags) -> the driver built once this session


def _driver_digest(
    cc: list[str], flags: list[str], tmp: Path, run: list[str], mode: tuple[str, ...] = ()
) -> str:
    """sha256 of the driver's output (`mode`: its arguments, e.g. ("q8",)); each build is compiled
    once and run for every mode."""
    key = (*cc, *flags)
    if key not in _BUILT:
        exe = tmp / "driver"
        sources = [str(DRIVER), *map(str, SOURCES)]
        subprocess.run([*cc, *DRIVER_FLAGS, *flags, *sources, "-o", str(exe), "-lm"], check=True)
        _BUILT[key] = exe
    out = subprocess.run([*run, str(_BUILT[key]), *mode], check=True, capture_output=True).stdout
    return hashlib.sha256(out).hexdigest()


# the driver's modes and their digests: every kernel (the default output), the q8 kernels ("q8"),
# the integer-limb kernels ("limb"), attention's token tiles ("tiles"), the 2-byte KV cache ("kvcache"),
# the q8_0 KV cache ("kvq8"), the DeltaNet recurrence ("delta"), gpt-oss's sink attention and
# clamped SwiGLU ("gptoss"), Q5_0, the codebook and grid types against their Q8_0 blocks ("held"),
# Q4_0 ... Q8_0 with the file's fp16 scales against their widened blocks ("half"), IQ4_NL, MXFP4
# and IQ4_XS with the file's scale bytes against their fp32-scale blocks ("codebook")
MODES = {
    "default": ((), DRIVER_SHA256),
    "q8": (("q8",), DRIVER_Q8_SHA256),
    "limb": (("limb",), DRIVER_LIMB_SHA256),
    "tiles": (("tiles",), DRIVER_TILES_SHA256),
    "kvcache": (("kvcache",), DRIVER_KV_SHA256),
    "kvq8": (("kvq8",), DRIVER_KVQ8_SHA256),
    "delta": (("delta",), DRIVER_DELTA_SHA256),
    "gptoss": (("gptoss",), DRIVER_GPTOSS_SHA256),
    "held": (("held",), DRIVER_HELD_SHA256),
    "half": (("half",), DRIVER_HALF_SHA256),
    "codebook": (("codebook",), DRIVER_CODEBOOK_SHA256),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
def test_driver_bits_equal_on_every_host_target(target: str, mode: str, tmp_path: Path) -> None:
    cc, _ = compiler()
    args, digest = MODES[mode]
    assert _driver_digest([cc], TARGETS[target][1], tmp_path, [], args) == digest


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", ["neon", "portable"])
def test_driver_bits_equal_on_aarch64_under_qemu(target: str, mode: str, tmp_path: Path) -> None:
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if cross is None or qemu is None:
        pytest.skip(
            "aarch64 cross compiler or qemu-aarch64 missing (apt-get install gcc-aarch64-linux-gnu qemu-user)"
        )
    args, digest = MODES[mode]
    assert _driver_digest([cross, "-static"], TARGETS[target][1], tmp_path, [qemu], args) == digest


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
def test_driver_bits_equal_with_clang(target: str, mode: str, tmp_path: Path) -> None:
    """A second compiler (clang, as on macOS) builds the same bits as the first."""
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("clang not installed (apt-get install clang): the second-compiler check is skipped")
    args, digest = MODES[mode]
    assert _driver_digest([clang], TARGETS[target][1], tmp_path, [], args) == digest


def test_kernels_build_without_openmp(build_with, tmp_path: Path, caplog) -> None:
    """Where the compiler has no OpenMP (Apple clang without libomp), the kernels build for one
    thread, with a warning, and give the same bits."""
    clang = shutil.which("clang")
    if (
        clang is None
        or subprocess.run(
            [clang, "-fopenmp", "-x", "c", "-", "-o", str(tmp_path / "t")],
            input=b"int main(void){return 0;}",
            capture_output=True,
        ).returncode
        == 0
    ):
        pytest.skip("needs a clang without libomp (the case of Apple clang)")
    reference = _all_ops(NativeOps(1, "portable"), seed=11)  # the usual compiler's build
    build_with(clang)
    with caplog.at_level("WARNING", logger="strata_engine"):
        ops = NativeOps(2)
    assert any("without OpenMP" in r.getMessage() for r in caplog.records)
    got = _all_ops(ops, seed=11)
    for a, b in zip(got, reference, strict=True):
        assert np.array_equal(a, b)


def test_contracted_build_would_be_caught(tmp_path: Path) -> None:
    """The digest can fail: letting the compiler fuse multiply-adds changes the bits."""
    cc, _ = compiler()
    target = runnable_targets()[0]
    if target == "portable":
        pytest.skip("no vector target on this host to contract")
    flags = [*TARGETS[target][1], "-ffp-contract=fast"]
    assert _driver_digest([cc], flags, tmp_path, []) != DRIVER_SHA256


def _random_kquant_weight(rng: np.random.Generator, qtype: QT, n: int, k: int) -> Weight:
    """A [n, k] K-quant weight: random GGUF blocks with sane fp16 scales, packed as at load."""
    info = TensorInfo("k", (n, k), qtype, random_blocks(qtype, (n, k), rng).reshape(-1))
    return Weight.from_info(info)


def _random_quant_weight(rng: np.random.Generator, kernel_type: int, n: int, k: int) -> Weight:
    """A [n, k] weight in the kernels' block layout: random fp32 scales (and mins), random quants."""
    size = {2: 20, 3: 24, 8: 36}[kernel_type]
    blocks = rng.integers(0, 256, size=(n * k // 32, size), dtype=np.uint8)
    head = 8 if kernel_type == 3 else 4
    scales = rng.uniform(-0.05, 0.05, size=(blocks.shape[0], head // 4)).astype(np.float32)
    blocks[:, :head] = scales.view(np.uint8)
    return Weight("w", n, k, kernel_type, blocks.reshape(-1).copy())


def _all_ops(ops: NativeOps, seed: int) -> list[np.ndarray]:
    """Every op on random inputs of odd sizes; returns every output."""
    rng = np.random.default_rng(seed)
    t = lambda *shape: rng.uniform(-2, 2, size=shape).astype(np.float32)  # noqa: E731
    outs = []
    for kernel_type in (2, 3, 8):
        w = _random_quant_weight(rng, kernel_type, 23, 64)
        for m in (1, 5, 9, 14):
            outs.append(ops.linear(t(m, 64), w, t(23)))
        outs.append(ops.embed(w, np.array([3, 0, 22], dtype=np.int64)))
    for qtype in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        w = _random_kquant_weight(rng, qtype, 21, 512)
        outs += [ops.linear(t(m, 512), w) for m in (1, 3, 11)]
        outs.append(ops.embed(w, np.array([20, 0, 7], dtype=np.int64)))
    dense = t(19, 37)
    w32 = Weight("d", 19, 37, 0, dense.reshape(-1).view(np.uint8))
    outs += [ops.linear(t(m, 37), w32) for m in (1, 10)]
    outs.append(ops.rmsnorm(t(7, 45), t(45), 1e-6))
    outs.append(ops.silu_mul(t(3, 101) * 20, t(3, 101)))
    outs.append(ops.log_softmax(t(4, 999) * 10))
    k_cache, v_cache = t(5, 4, 2, 24), t(5, 4, 2, 24)
    meta = AttentionMeta(
        positions=np.array([2, 7, 0, 13], dtype=np.int32),
        token_seq=np.array([0, 0, 1, 1], dtype=np.int32),
        block_tables=np.array([[4, 1, 0, 0], [3, 0, 2, 1]], dtype=np.int32),
        slots=np.array([0, 1, 2, 3], dtype=np.int64),
        block_size=4,
    )
    outs.append(ops.attention(t(4, 6, 24), k_cache, v_cache, meta))
    table = RopeTable(cos=t(16, 8), sin=t(16, 8), dim=16, interleaved=True)
    outs.append(ops.rope(t(4, 3, 24), meta.positions, table))
    outs.append(ops.gelu_mul(t(3, 101) * 6, t(3, 101)))
    outs.append(ops.softcap(t(5, 77) * 50, 30.0))
    q = t(4, 6, 24) * 3
    outs += [ops.attention(q, k_cache, v_cache, meta, window=w) for w in (1, 3, 8)]
    outs.append(ops.attention(q, k_cache, v_cache, meta, scale=0.3, window=5, softcap=2.0))
    # head sizes of 64 and 32 with 3 and 4 query heads per KV head: the grouped path
    # (attend_group, four scores reduced at a time) for every group size it takes
    for d, h in ((64, 6), (32, 8)):
        kc, vc = t(5, 4, 2, d), t(5, 4, 2, d)
        qg = t(4, h, d) * 3
        outs += [ops.attention(qg, kc, vc, meta), ops.attention(qg, kc, vc, meta, window=3, softcap=2.0)]
        # gpt-oss: a sink logit per head (single-head and grouped paths), and its clamped SwiGLU
        outs += [ops.attention(qg, kc, vc, meta, None, w, 0.0, t(h) * 2) for w in (0, 3)]
    outs.append(ops.attention(q, k_cache, v_cache, meta, None, 3, 0.0, t(6) * 2))
    outs.append(ops.swiglu_oai(t(3, 101) * 6, t(3, 101) * 6, 1.702, 7.0))
    return outs


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("target", targets_to_test())
def test_every_target_equals_portable_bit_for_bit(target: str, threads: int) -> None:
    reference = _all_ops(NativeOps(1, "portable"), seed=7)
    got = _all_ops(NativeOps(threads, target), seed=7)
    for a, b in zip(got, reference, strict=True):
        assert np.array_equal(a, b)


def test_exp_within_two_ulp_of_float64() -> None:
    ops = NativeOps(1)
    x = np.concatenate([np.linspace(-87.3, 88.3, 200_001), np.random.default_rng(3).uniform(-10, 10, 50_000)])
    x = x.astype(np.float32)
    got = np.empty_like(x)
    ops.lib.strata_exp(x.ctypes.data, x.size, got.ctypes.data)
    exact = np.exp(x.astype(np.float64))
    ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - exact) / ulp) <= 2.0


def test_log_softmax_matches_float64() -> None:
    logits = np.random.default_rng(5).normal(0, 4, size=(3, 49152)).astype(np.float32)
    got32 = NativeOps(2).log_softmax(logits)
    got = torch.from_numpy(got32).double()
    exact = torch.log_softmax(torch.from_numpy(logits).double(), dim=-1)
    ulp = torch.from_numpy(np.spacing(exact.float().abs().numpy())).double()
    assert torch.all(torch.abs(got - exact) <= 1.5 * ulp + 1e-7)  # the final fp32 subtractions
    assert np.array_equal(got32[1], NativeOps(1).log_softmax(logits[1:2])[0])  # a row alone, same bits
    overwritten = logits.copy()
    assert np.array_equal(NativeOps(2).log_softmax(overwritten, inplace=True), got32)  # in place, same bits
    assert np.array_equal(overwritten, got32)


def test_gelu_mul_matches_float64() -> None:
    """GeGLU against GELU's tanh approximation in float64, as g / (1 + e^(-2u)) (the same function
    without float64's own cancellation where tanh(u) is -1): relative error within
    2e-7 * (1 + |2u|), set by the fp32 rounding of 2u itself, which e^ turns into a relative error
    of the result (below 1.5e-6 for gate >= -3, where GELU is not yet tiny)."""
    rng = np.random.default_rng(11)
    gate = np.concatenate([np.linspace(-12, 12, 20_001), rng.normal(0, 3, 20_000)]).astype(np.float32)
    up = rng.uniform(0.5, 2.0, gate.shape[0]).astype(np.float32)
    got = NativeOps(2).gelu_mul(gate, up).astype(np.float64)
    g = gate.astype(np.float64)
    u = 0.7978845608028654 * (g + 0.044715 * g**3)
    exact = g / (1 + np.exp(-2 * u)) * up
    rel = np.abs(got - exact) / np.maximum(np.abs(exact), 1e-30)
    bound = 2e-7 * (1 + np.abs(2 * u))
    assert np.all(rel <= bound), f"relative error {rel.max():.3g} at gate {g[rel.argmax()]}"
    assert rel[g >= -3].max() <= 1.5e-6


def test_softcap_matches_float64() -> None:
    """cap * tanh(x / cap): absolute error within 2.5e-7 * cap (measured 2.1e-7: tanh's own error
    is absolute, about 1.7e-7, plus the final rounding)."""
    x = np.linspace(-400, 400, 100_001).astype(np.float32)
    for cap in (1.0, 30.0, 50.0):
        got = torch.from_numpy(NativeOps(1).softcap(x, cap)).double()
        exact = torch.tanh(torch.from_numpy(x).double() / cap) * cap
        assert float((got - exact).abs().max()) <= 2.5e-7 * cap


def _attention_float64(
    q: np.ndarray,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    meta: AttentionMeta,
    i: int,
    scale: float,
    window: int,
    softcap: float,
) -> np.ndarray:
    """Token i's attention output [heads, D] in float64 (torch), from the cache slots its block
    table names: the positions max(0, p - window + 1) .. p (window 0: 0 .. p), scores soft-capped
    where softcap > 0, each KV head shared by heads / kv_heads query heads."""
    bs, p = meta.block_size, int(meta.positions[i])
    heads, kv_heads = q.shape[1], k_cache.shape[2]
    j = torch.arange(max(0, p - window + 1) if window else 0, p + 1)
    slots = torch.from_numpy(meta.block_tables)[int(meta.token_seq[i])].long()[j // bs] * bs + j % bs
    k, v = (
        torch.from_numpy(c).flatten(0, 1)[slots].double().repeat_interleave(heads // kv_heads, dim=1)
        for c in (k_cache, v_cache)
    )
    s = torch.einsum("hd,jhd->hj", torch.from_numpy(q[i]).double(), k) * scale
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    return torch.einsum("hj,jhd->hd", torch.softmax(s, -1), v).numpy()


def test_windowed_attention_matches_float64_and_window_zero_is_full() -> None:
    """A sliding-window call attends to exactly the last `window` positions (float64 reference);
    window 0 is bit-identical to the plain call, and a window wider than the context too."""
    rng = np.random.default_rng(4)
    t = lambda *shape: rng.uniform(-2, 2, size=shape).astype(np.float32)  # noqa: E731
    bs, kvh, d, h = 4, 2, 24, 6
    k_cache, v_cache = t(8, bs, kvh, d), t(8, bs, kvh, d)
    meta = AttentionMeta(
        positions=np.array([0, 5, 17, 3, 11], dtype=np.int32),
        token_seq=np.array([0, 0, 0, 1, 1], dtype=np.int32),
        block_tables=np.array([[6, 1, 3, 0, 5], [2, 7, 4, 0, 0]], dtype=np.int32),
        slots=np.zeros(5, dtype=np.int64),
        block_size=bs,
    )
    q = t(5, h, d)
    ops = NativeOps(2)
    assert np.array_equal(
        ops.attention(q, k_cache, v_cache, meta, window=0), ops.attention(q, k_cache, v_cache, meta)
    )
    assert np.array_equal(
        ops.attention(q, k_cache, v_cache, meta, window=64), ops.attention(q, k_cache, v_cache, meta)
    )
    for window, softcap in ((1, 0.0), (4, 0.0), (6, 1.5), (0, 1.5)):
        out = ops.attention(q, k_cache, v_cache, meta, scale=0.2, window=window, softcap=softcap)
        for i in range(len(q)):
            want = _attention_float64(q, k_cache, v_cache, meta, i, 0.2, window, softcap)
            assert float(np.abs(out[i] - want).max()) < 2e-6, (window, softcap, i)


def test_grouped_attention_is_per_head_attention_bit_for_bit() -> None:
    """Query heads of one KV group computed together (one thread: T * KV heads >= 2 * threads)
    give exactly the bits of each head alone (16 threads: too few items per thread to group)."""
    rng = np.random.default_rng(9)
    t = lambda *shape: rng.uniform(-2, 2, size=shape).astype(np.float32)  # noqa: E731
    meta = AttentionMeta(
        positions=np.array([2, 7, 0, 13, 30], dtype=np.int32),
        token_seq=np.array([0, 0, 1, 1, 1], dtype=np.int32),
        block_tables=np.array([[4, 1, 0, 0, 0, 0, 0, 0], [3, 0, 2, 1, 6, 7, 5, 8]], dtype=np.int32),
        slots=np.zeros(5, dtype=np.int64),
        block_size=4,
    )
    for d, h, kvh in ((64, 9, 3), (128, 8, 2), (32, 8, 2), (256, 8, 2)):
        kc, vc, q = t(9, 4, kvh, d), t(9, 4, kvh, d), t(5, h, d) * 3
        for window, softcap in ((0, 0.0), (5, 0.0), (0, 3.0)):
            grouped = NativeOps(1).attention(q, kc, vc, meta, window=window, softcap=softcap)
            alone = NativeOps(16).attention(q, kc, vc, meta, window=window, softcap=softcap)
            assert np.array_equal(grouped, alone), (d, h, window, softcap)


def test_token_tiles_are_per_token_attention_bit_for_bit() -> None:
    """Consecutive tokens of one sequence computed as a tile (one thread: enough tiles per
    thread) give exactly the bits of each token alone, as a decode step computes it (one token
    per call, 16 threads: each head alone); and attention within 2e-6 of float64. The prompt
    interleaves two sequences in runs of odd lengths (the second a continuation whose positions
    go on from the first's last), so whole tiles, tiles that straddle a sequence boundary and
    each tile's own later positions (after those its first token sees) all occur."""
    rng = np.random.default_rng(12)
    t = lambda *shape: rng.uniform(-2, 2, size=shape).astype(np.float32)  # noqa: E731
    runs = [(0, 0, 19), (1, 19, 11), (0, 19, 7), (1, 30, 1)]  # (sequence, first position, tokens)
    seqs = np.concatenate([np.full(n, seq) for seq, _, n in runs]).astype(np.int32)
    positions = np.concatenate([np.arange(p, p + n) for _, p, n in runs]).astype(np.int32)
    bs = 4
    tables = np.array([rng.permutation(16)[:8], rng.permutation(16)[8:16]], dtype=np.int32)
    meta = AttentionMeta(positions, seqs, tables, np.zeros(len(seqs), dtype=np.int64), bs)
    for d, h, kvh in ((128, 8, 4), (64, 8, 2), (64, 9, 3), (32, 8, 2), (256, 8, 2), (256, 4, 2)):
        kc, vc, q = t(16, bs, kvh, d), t(16, bs, kvh, d), t(len(seqs), h, d) * 3
        for window, softcap in ((0, 0.0), (9, 0.0), (64, 0.0), (0, 3.0)):
            tiled = NativeOps(1).attention(q, kc, vc, meta, window=window, softcap=softcap)
            for i in range(len(seqs)):
                one = AttentionMeta(positions[i : i + 1], seqs[i : i + 1], tables, meta.slots[:1], bs)
                alone = NativeOps(16).attention(q[i : i + 1], kc, vc, one, window=window, softcap=softcap)
                assert np.array_equal(tiled[i], alone[0]), (d, h, window, softcap, i)
                want = _attention_float64(q, kc, vc, meta, i, d**-0.5, window, softcap)
                assert float(np.abs(tiled[i] - want).max()) < 2e-6, (d, h, i)
