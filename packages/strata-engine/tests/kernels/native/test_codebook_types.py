"""The 4-bit codebook types (IQ4_NL, IQ4_XS, MXFP4) held as indices (issue 40) and read by every
arithmetic with the bits of the Q8_0 blocks they were rewritten as.

Each 32 values are scale * codebook[index]: the loader keeps the file's blocks (IQ4_NL, IQ4_XS,
MXFP4: 4.5, 4.25 and 4.25 bits a weight), and every arithmetic looks the indices up to the Q8_0 block
(scale, codebook[index]) that `transcode.to_q8_0` makes (9 bits held), whose results it must give
bit for bit, on every target this host runs, at extreme scales (fp16's largest, subnormals,
+-0; MXFP4's smallest and largest exponents) and every index. Their values are gguf-py's.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import transcode
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weight_types import HALF_SCALES, TYPES
from strata_engine.kernels.weights import Weight
from strata_engine.testing.extreme_blocks import extreme_blocks
from strata_engine.testing.q8_checks import MODES, assert_held_gives_the_q8_0_bits, bits

N, K = 37, 512  # 37 outputs: a part group of 16 in the packing
CODEBOOK = (QT.IQ4_NL, QT.IQ4_XS, QT.MXFP4)


def weights(qtype: QT) -> tuple[Weight, Weight, np.ndarray]:
    """The weight as loaded, the Q8_0 weight of its values (the former rewrite), gguf-py's values."""
    stored = extreme_blocks(qtype, N, K, seed=int(qtype))
    held = Weight.from_info(TensorInfo("w", (N, K), qtype, stored))
    q8 = transcode.to_q8_0(stored, qtype)
    assert q8 is not None
    values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(N, K)
    return held, Weight("w8", N, K, TYPES[QT.Q8_0].code, q8), values


@pytest.mark.parametrize("qtype", CODEBOOK, ids=lambda q: q.name)
def test_held_at_the_files_bits_a_weight_with_gguf_pys_values(qtype: QT) -> None:
    held, q8, values = weights(qtype)
    # as the file's blocks (4.5, 4.25 and 4.25 bits a weight: test_codebook_scales.py)
    assert held.kernel_type == TYPES[qtype].code | HALF_SCALES
    bits_a_weight = TYPES[qtype].stored_bytes * 8 / TYPES[qtype].values
    assert held.raw.nbytes * 8 == bits_a_weight * N * K
    codes = q8.raw.reshape(-1, 36)[:, 4:].view(np.int8)
    assert len(np.unique(codes)) == (15 if qtype == QT.MXFP4 else 16)  # every index (MXFP4: two zeros)
    np.testing.assert_array_equal(bits(NativeOps(1, "portable").embed(held, np.arange(N))), bits(values))
    packed = NativeOps(1, limbs=3).pack(held)
    assert packed.raw.nbytes * 8 == bits_a_weight * -(-N // 16) * 16 * K  # whole groups of 16 outputs


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", targets_to_test())
@pytest.mark.parametrize("qtype", CODEBOOK, ids=lambda q: q.name)
def test_every_arithmetic_gives_the_q8_0_blocks_bits(qtype: QT, target: str, mode: str) -> None:
    assert_held_gives_the_q8_0_bits(*weights(qtype), target, mode)
