"""Weight types: the engine's dequantisation equals gguf-py's bit for bit, and its native
matmul is accurate and batch-invariant (while the torch fallback is not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGUFReader, quants
from gguf import GGMLQuantizationType as QT

from strata_engine.api import ModelLoadError
from strata_engine.engine import LLMEngine
from strata_engine.gguf_loader import GGUFFile, TensorInfo
from strata_engine.kernels import kquants, transcode
from strata_engine.kernels.native import NativeUnavailable
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.torch_backend import TorchOps
from strata_engine.kernels.weight_types import HALF_SCALES
from strata_engine.kernels.weights import Weight, dequantize
from strata_engine.testing.tiny_models import (
    EXTRA_FALLBACK_TYPES,
    HALF_OFFSETS,
    NATIVE_TYPES,
    SUPPORTED_TYPES,
    TINY_SPECS,
    TinySpec,
    encode_tensor,
    random_blocks,
    random_native_blocks,
    write_tensor_file,
    write_tiny_model,
)

REWRITTEN = tuple(transcode.TYPES | transcode.Q6_K_TYPES)  # held as Q8_0 / Q6_K blocks (test_transcode.py)
N_OUT = 300  # not a multiple of the kernel's 16-row panels nor of its 4x4 tiles


def bits(a: np.ndarray | torch.Tensor) -> np.ndarray:
    """The raw fp32 bit patterns (so -0.0 vs 0.0 and NaN payloads count as differences)."""
    arr = a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    return np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)


def gguf_py_values(path: Path) -> dict[str, np.ndarray]:
    """Every tensor as gguf-py's own reader and numpy dequantizer see it, torch-order shape."""
    out = {}
    for t in GGUFReader(path).tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        out[t.name] = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
    return out


@pytest.fixture(scope="module")
def native() -> NativeOps:
    return NativeOps(num_threads=2)


@pytest.fixture(scope="module", params=TINY_SPECS, ids=lambda s: s.name)
def tiny_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("quants") / "model.gguf", request.param, seed=1)


def test_each_tiny_model_holds_every_supported_type(tiny_file: Path) -> None:
    types = {info.qtype for info in GGUFFile(tiny_file).tensors.values() if len(info.shape) == 2}
    assert types == set(SUPPORTED_TYPES)


def test_load_time_dequantisation_is_gguf_py_bit_for_bit(tiny_file: Path) -> None:
    expected = gguf_py_values(tiny_file)
    for name, info in GGUFFile(tiny_file).tensors.items():
        got = dequantize(info)
        assert got.shape == expected[name].shape, name
        np.testing.assert_array_equal(bits(got), bits(expected[name]), err_msg=f"{name} ({info.qtype.name})")


def test_weight_dense_and_native_gather_are_gguf_py_bit_for_bit(tiny_file: Path, native: NativeOps) -> None:
    expected = gguf_py_values(tiny_file)
    rng = np.random.default_rng(0)
    for name, info in GGUFFile(tiny_file).tensors.items():
        if len(info.shape) != 2:
            continue
        weight = Weight.from_info(info)
        in_block_form = info.qtype in NATIVE_TYPES + REWRITTEN and info.qtype != QT.F32
        assert (weight.kernel_type != 0) == in_block_form, name
        want = expected[name]
        np.testing.assert_array_equal(bits(weight.dense()), bits(want), err_msg=f"{name} dense")
        ids = rng.integers(0, info.shape[0], size=2 * info.shape[0])
        got = native.embed(weight, ids)
        np.testing.assert_array_equal(bits(got), bits(want[ids]), err_msg=f"{name} gather")


@pytest.mark.parametrize("qtype", list(HALF_OFFSETS), ids=lambda q: q.name)
def test_native_dequantisation_of_arbitrary_blocks(qtype: QT, native: NativeOps) -> None:
    rng = np.random.default_rng(int(qtype))
    rows, cols = 64, 512
    stored = random_native_blocks(qtype, rows, cols, rng)
    info = TensorInfo("w", (rows, cols), qtype, stored.reshape(-1))
    weight = Weight.from_info(info)
    want = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(rows, cols)
    got = native.embed(weight, np.arange(rows))
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(weight.dense()), bits(want))


def test_f16_and_q5_1_stay_as_stored(tmp_path: Path) -> None:
    """A file's F16 and Q5_1 weights are held as its bytes (Q5_1 with its two fp16 fields as they
    are, HALF_SCALES: a view of the file's mapping, not a copy), not as fp32 (2x and 5.3x the file)."""
    rng = np.random.default_rng(5)
    values = rng.normal(0, 0.05, size=(64, 256)).astype(np.float32)
    tensors = {
        name: (quants.quantize(values, qtype), qtype) for name, qtype in (("h", QT.F16), ("q", QT.Q5_1))
    }
    path = write_tensor_file(tmp_path / "t.gguf", tensors)
    for name, info in GGUFFile(path).tensors.items():
        weight = Weight.from_info(info)
        held = HALF_SCALES if info.qtype == QT.Q5_1 else 0
        assert weight.kernel_type == int(info.qtype) | held, name
        assert weight.raw.nbytes == info.data.nbytes, name  # Q5_1: 24 bytes a block, the file's
        assert not held or np.shares_memory(weight.raw, info.data), name
        assert weight.raw.nbytes <= values.nbytes // 2, name
        np.testing.assert_array_equal(bits(weight.dense()), bits(gguf_py_values(path)[name]))


@pytest.mark.parametrize("qtype", EXTRA_FALLBACK_TYPES, ids=lambda q: q.name)
def test_other_gguf_py_types_load_as_fallback(qtype: QT, tmp_path: Path) -> None:
    rng = np.random.default_rng(int(qtype))
    stored = random_blocks(qtype, (16, 512), rng)
    path = write_tensor_file(tmp_path / "t.gguf", {"w": (stored, qtype)})
    info = GGUFFile(path).tensors["w"]
    weight = Weight.from_info(info)
    # as Q8_0 / Q6_K blocks, or read as held (IQ4_NL: a scale and indices a 32), else fp32
    assert (weight.kernel_type != 0) == (qtype in REWRITTEN + NATIVE_TYPES)
    np.testing.assert_array_equal(bits(weight.dense()), bits(gguf_py_values(path)["w"]))


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K], ids=lambda t: t.name)
def test_k_quants_without_kernels_load_as_gguf_py_fp32(qtype: QT, tmp_path: Path, monkeypatch) -> None:
    """Where the kernels cannot be built (no C compiler), a K-quant tensor is kept as gguf-py's
    fp32 values, as any type the kernels do not read, rather than failing the load."""

    def no_kernels(*_: object) -> None:
        raise NativeUnavailable("no C compiler found")

    monkeypatch.setattr(kquants, "load", no_kernels)
    rng = np.random.default_rng(int(qtype))
    path = write_tensor_file(tmp_path / "t.gguf", {"w": (random_blocks(qtype, (16, 512), rng), qtype)})
    weight = Weight.from_info(GGUFFile(path).tensors["w"])
    assert weight.kernel_type == 0
    np.testing.assert_array_equal(bits(weight.dense()), bits(gguf_py_values(path)["w"]))


def _native_weight(qtype: QT, k: int, rng: np.random.Generator) -> Weight:
    if qtype == QT.F32 and k % 32:  # a row length the block types cannot have: the tail path
        values = rng.normal(0, 0.1, size=(N_OUT, k)).astype(np.float32)
        return Weight("w", N_OUT, k, 0, values.view(np.uint8).reshape(-1))
    stored = encode_tensor(rng.normal(0, 0.1, size=(N_OUT, k)), qtype, rng)  # random blocks for K-quants
    info = TensorInfo("w", (N_OUT, k), qtype, np.frombuffer(stored.tobytes(), dtype=np.uint8))
    return Weight.from_info(info)


NATIVE_CASES = [
    (q, k) for q in NATIVE_TYPES for k in ((256, 768) if GGML_QUANT_SIZES[q][0] == 256 else (256, 576))
] + [(QT.F32, 100)]


@pytest.mark.parametrize(("qtype", "k"), NATIVE_CASES, ids=lambda v: getattr(v, "name", str(v)))
def test_native_matmul_matches_float64(qtype: QT, k: int, native: NativeOps) -> None:
    rng = np.random.default_rng(k)
    weight = _native_weight(qtype, k, rng)
    x = rng.normal(0, 1, size=(37, k)).astype(np.float32)
    bias = rng.normal(0, 0.1, size=N_OUT).astype(np.float32)
    w64 = weight.dense().astype(np.float64)  # gguf-py's dequantisation (shown bit-exact above)
    x64 = x.astype(np.float64)
    want = x64 @ w64.T + bias.astype(np.float64)
    got = native.linear(x, weight, bias)
    # fp32 accumulation of k products: error below k * 2^-24 * sum |x_i w_i| (plus the bias add)
    bound = k * 2.0**-24 * (np.abs(x64) @ np.abs(w64).T) + 2.0**-24 * np.abs(want)
    err = np.abs(got.astype(np.float64) - want)
    assert bool((err <= bound).all()), f"max error {err.max():.3g}"
    assert float(err.max()) < 1e-4


@pytest.mark.parametrize(("qtype", "k"), NATIVE_CASES, ids=lambda v: getattr(v, "name", str(v)))
def test_native_matmul_is_batch_invariant(qtype: QT, k: int, native: NativeOps) -> None:
    rng = np.random.default_rng(k + 1)
    weight = _native_weight(qtype, k, rng)
    x = rng.normal(0, 1, size=(40, k)).astype(np.float32)
    bias = rng.normal(0, 0.1, size=N_OUT).astype(np.float32)
    alone = np.concatenate([native.linear(x[i : i + 1], weight, bias) for i in range(40)])
    for m in range(1, 41):
        np.testing.assert_array_equal(
            bits(native.linear(x[:m], weight, bias)), bits(alone[:m]), err_msg=f"M={m}"
        )
    reversed_rows = native.linear(x[::-1], weight, bias)[::-1]  # every row at another index
    np.testing.assert_array_equal(bits(reversed_rows), bits(alone))
    one_thread = NativeOps(num_threads=1).linear(x, weight, bias)
    np.testing.assert_array_equal(bits(one_thread), bits(alone))


def test_torch_fallback_matmul_is_not_batch_invariant() -> None:
    """The inverse check: the comparison above does catch a batch-dependent matmul."""
    rng = np.random.default_rng(3)
    torch_ops = TorchOps()
    for k in (256, 576, 1536):
        weight = _native_weight(QT.F32, k, rng)
        x = torch.from_numpy(rng.normal(0, 1, size=(40, k)).astype(np.float32))
        alone = torch.cat([torch_ops.linear(x[i : i + 1], weight) for i in range(40)])
        for m in range(2, 41):
            if not torch.equal(torch_ops.linear(x[:m], weight), alone[:m]):
                return
    pytest.fail("torch's matmul gave the same bits for every batch size tried")


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    spec = TinySpec("neox", "gpt_neox", "smollm", tied=True, head_dim=64, type_offset=0)
    path = write_tiny_model(tmp_path / "neox.gguf", spec)
    with pytest.raises(ModelLoadError, match="gpt_neox"):
        LLMEngine(path, num_threads=2, kv_cache_mb=16)


@pytest.mark.parametrize("qtype", [QT.Q8_1, QT.Q8_K], ids=lambda q: q.name)
def test_unsupported_weight_type_is_named(qtype: QT, tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError):  # the premise: gguf-py cannot dequantize it either
        quants.dequantize(np.zeros(GGML_QUANT_SIZES[qtype][1], dtype=np.uint8), qtype)
    path = write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0], overrides={"blk.0.attn_q.weight": qtype})
    with pytest.raises(ModelLoadError, match=rf"blk\.0\.attn_q\.weight.*{qtype.name}"):
        LLMEngine(path, num_threads=2, kv_cache_mb=16)


def _mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of `path` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc/self/smaps")
def test_released_file_pages_leave_resident_memory_and_read_back_the_same(tiny_file: Path) -> None:
    """GGUFFile.release_pages (called by the loader after each layer) drops the file's pages from
    this process's resident memory; anything that still reads the file (the torch fallback's
    source) faults them back in and sees the same bytes."""
    gguf = GGUFFile(tiny_file)
    before = {name: np.array(info.data) for name, info in gguf.tensors.items()}  # every page touched
    touched = _mapped_rss_kb(tiny_file.resolve())
    assert touched > 0
    gguf.release_pages()
    assert _mapped_rss_kb(tiny_file.resolve()) < touched
    for name, info in gguf.tensors.items():
        np.testing.assert_array_equal(np.asarray(info.data), before[name], err_msg=name)
