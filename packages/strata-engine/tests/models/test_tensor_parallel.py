"""Tensor parallelism: shards that read exactly the stored values, and 2 gloo ranks (real
processes, launched with torchrun's variables) against one rank.

Two ranks split every attention-output and FFN-down dot product in two and add the halves, so
their logprobs differ from one rank's by rounding only: the same greedy tokens, values within
`TOLERANCE`. For a fixed number of ranks the bits are the same whatever the batch.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from strata_engine.api import ModelLoadError
from strata_engine.engine import LLMEngine
from strata_engine.gguf_loader import GGUFFile
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.torch_backend import TorchOps
from strata_engine.kernels.weights import Weight, dequantize
from strata_engine.model import column_range
from strata_engine.tensor_parallel import TensorParallel
from strata_engine.testing.tiny_arch_models import ARCH_SPECS, write_arch_model
from strata_engine.testing.tiny_models import TINY_SPECS, encode_tensor, write_tensor_file, write_tiny_model
from strata_engine.testing.tp_ranks import events_json, requests_for, run_ranks

# Largest |logprob(2 ranks) - logprob(1 rank)| allowed over the prompt rows, the generated
# tokens' rows and their top-5 (measured: about 1e-5 on the default model; docs/scaling.md).
TOLERANCE = 2e-4
# fused projections, experts, post-norms, windows, query temperature
ARCHS = ("phi3", "qwen3moe", "gemma2", "gemma3", "mistral3")
TINY = ("qwen2-untied", "qwen3-untied")  # biases, qk-norm, every weight type incl. K-quants


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize(("n", "unit"), [(1536, 32), (576, 64), (9, 1), (1000, 256), (4096, 256)])
def test_parts_cover_every_value_once_on_unit_boundaries(world: int, n: int, unit: int) -> None:
    if n // unit < world:
        with pytest.raises(ModelLoadError):
            TensorParallel(0, world).part(n, unit)
        return
    parts = [TensorParallel(r, world).part(n, unit) for r in range(world)]
    assert parts[0][0] == 0 and parts[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(parts))
    assert all(start % unit == 0 and end > start for start, end in parts)
    sizes = [end - start for start, end in parts]
    assert max(sizes) - min(sizes) <= unit + n % unit  # as even as whole units allow


@pytest.mark.parametrize("qtype", [QT.F32, QT.Q4_0, QT.Q4_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K])
def test_column_ranges_hold_exactly_the_stored_values(tmp_path: Path, qtype: QT) -> None:
    """A shard's matmul against unit vectors returns its columns: they must be gguf-py's
    dequantised values of the whole tensor, sliced, for the C kernels and the torch fallback."""
    rng = np.random.default_rng(5)
    stored = encode_tensor(rng.normal(0.0, 0.05, size=(8, 1024)), qtype, rng)
    path = write_tensor_file(tmp_path / "w.gguf", {"w": (stored, qtype)})
    info = GGUFFile(path).tensors["w"]
    whole, expected = Weight.from_info(info), dequantize(info).copy()
    block = GGML_QUANT_SIZES[qtype][0]
    ranges = [(0, 256), (256, 1024), (block, 3 * block), (16, 80)]  # the last: off 32-value blocks
    native = NativeOps(1)
    for start, end in ranges:
        part = column_range(whole, start, end)
        assert (part.out_features, part.in_features) == (8, end - start)
        if start % block == 0 and end % block == 0:
            assert part.kernel_type == whole.kernel_type  # blocks kept packed
        eye = np.eye(end - start, dtype=np.float32)
        assert np.array_equal(native.linear(eye, part).T, expected[:, start:end])
        assert torch.equal(TorchOps().linear(eye, part).T, torch.from_numpy(expected[:, start:end]))


def test_three_ranks_add_in_rank_order_whatever_the_batch(tmp_path: Path) -> None:
    """The property 2 ranks cannot show (fp32 a + b == b + a): with 3, gloo's own all_reduce adds
    in an order that changes with the tensor's size, so with the batch; ours adds p0 + p1 + p2."""
    out = tmp_path / "reduce.json"
    done = run_ranks(3, out, ["--reduce"])
    for rank, proc in enumerate(done):
        assert proc.returncode == 0, f"rank {rank} failed:\n{proc.stdout[-4000:]}"
    assert json.loads(out.read_text()) == {"off_order": 0, "off_batch": 0}


def test_a_failure_mid_step_fails_loudly_on_every_rank(tmp_path: Path, model_path: Path) -> None:
    """Rank 0 leaves a step half-way (a planted bug): its request and every later one fail with
    EngineUnavailable, and the worker, stuck in a collective, exits with an error at once
    rather than after the group's timeout (60 s)."""
    out = tmp_path / "fault.json"
    started = time.monotonic()
    done = run_ranks(2, out, ["--fault", str(model_path)])
    assert time.monotonic() - started < 45
    assert done[0].returncode == 0, done[0].stdout[-4000:]
    assert done[1].returncode != 0 and "EngineUnavailable" in done[1].stdout
    outcome = json.loads(out.read_text())
    assert outcome["first"].startswith("EngineUnavailable: tensor-parallel step failed: ZeroDivisionError")
    assert outcome["next"] == outcome["first"]  # refused with the same reason


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory, model_path: Path) -> dict[str, Any]:
    """One run of two ranks over the default model and the tiny models (each rank loads each)."""
    d = tmp_path_factory.mktemp("tp")
    specs = {s.name: s for s in ARCH_SPECS}
    tiny = {s.name: s for s in TINY_SPECS}
    models = {
        "default": model_path,
        **{n: write_arch_model(d / f"{n}.gguf", specs[n], seed=3) for n in ARCHS},
        **{n: write_tiny_model(d / f"{n}.gguf", tiny[n], seed=3) for n in TINY},
    }
    out = d / "rank0.json"
    done = run_ranks(2, out, [str(p) for p in models.values()])
    for rank, proc in enumerate(done):
        assert proc.returncode == 0, f"rank {rank} failed:\n{proc.stdout[-4000:]}"
    results = json.loads(out.read_text())
    return {name: (path, results[str(path)]) for name, path in models.items()}


def _values(result: dict[str, Any]) -> dict[tuple[str, int, int], float]:
    """Every logprob of a request's rows keyed by (kind, row, token id)."""
    out = {}
    for kind in ("prompt_rows", "rows"):
        for i, row in enumerate(result[kind]):
            if row is None:
                continue
            out[(kind, i, row[0])] = float.fromhex(row[1])
            for token, value in row[2]:
                out[(kind, i, token)] = float.fromhex(value)
    return out


def _max_difference(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> float:
    worst = 0.0
    for a, b in zip(one, two, strict=True):
        assert a["tokens"] == b["tokens"]  # the same greedy tokens
        va, vb = _values(a), _values(b)
        shared = va.keys() & vb.keys()  # a top-5 may swap near-ties at its edge
        assert len(shared) >= 0.9 * len(va)
        for key in shared:
            if math.isinf(va[key]) or math.isinf(vb[key]):
                assert va[key] == vb[key]
                continue
            worst = max(worst, abs(va[key] - vb[key]))
    return worst


@pytest.mark.parametrize("name", ["default", *ARCHS, *TINY])
def test_two_ranks_give_one_ranks_tokens_and_logprobs_within_tolerance(
    ranks: dict[str, Any], engine: LLMEngine, name: str
) -> None:
    path, result = ranks[name]
    one = engine if name == "default" else LLMEngine(path, num_threads=1, kv_cache_mb=64)
    reference = [events_json(one.generate(r)) for r in requests_for(one)]
    difference = _max_difference(reference, result["alone"])
    print(f"{name}: max |logprob(2 ranks) - logprob(1 rank)| = {difference:.3g}")
    assert difference <= TOLERANCE
    assert difference > 0 or name != "default"  # the split really ran (not one rank's bits)


@pytest.mark.parametrize("name", ["default", *ARCHS, *TINY])
def test_two_ranks_are_batch_invariant(ranks: dict[str, Any], name: str) -> None:
    """Each request alone, then all in one batch (and from the prefix cache): the same bits."""
    _, result = ranks[name]
    assert result["alone"] == result["batched"]
