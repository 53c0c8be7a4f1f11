"""llama.cpp's own CPU matmul on a weight's stored blocks, through ggml's graph API (ctypes).

The ggml libraries llama-cpp-python ships run `ggml_mul_mat` as llama.cpp runs a weight held in
plain CPU buffers: the activations converted to the type's dot-product partner (Q8_K, Q8_0, ...),
then its vec_dot or llamafile sgemm, as the build chose for this CPU. Repacked layouts (Q4_0, Q4_1,
Q8_0, IQ4_NL, Q4_K in llama.cpp's "extra" buffers) are not used here, so for those types the whole
model runs faster in llama.cpp than this matmul shows; the IQ and other K types have no repacked
form and run exactly this path.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _libs() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """ggml's base and CPU libraries: LLAMA_CPP_LIB_PATH's (another build, as llama_cpp itself takes
    it: bench/build_llama_cpp_avx2.sh's) or those llama-cpp-python's package ships."""
    if "LLAMA_CPP_LIB_PATH" in os.environ:
        where = Path(os.environ["LLAMA_CPP_LIB_PATH"])
    else:
        import llama_cpp

        where = Path(llama_cpp.__file__).parent / "lib"
    base = ctypes.CDLL(str(where / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(where / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    base.ggml_init.argtypes, base.ggml_init.restype = [_InitParams], vp
    base.ggml_free.argtypes = [vp]
    base.ggml_new_tensor_2d.argtypes, base.ggml_new_tensor_2d.restype = [vp, ctypes.c_int, i64, i64], vp
    base.ggml_get_data.argtypes, base.ggml_get_data.restype = [vp], vp
    base.ggml_nbytes.argtypes, base.ggml_nbytes.restype = [vp], ctypes.c_size_t
    base.ggml_mul_mat.argtypes, base.ggml_mul_mat.restype = [vp, vp, vp], vp
    base.ggml_new_graph.argtypes, base.ggml_new_graph.restype = [vp], vp
    base.ggml_build_forward_expand.argtypes = [vp, vp]
    cpu.ggml_graph_compute_with_ctx.argtypes, cpu.ggml_graph_compute_with_ctx.restype = (
        [vp, vp, ctypes.c_int],
        ctypes.c_int,
    )
    cpu.ggml_cpu_init.argtypes = []
    cpu.ggml_cpu_init()
    return base, cpu


class GgmlMatmul:
    """y = x @ W.T by ggml for one stored weight (n x k, GGML type code `qtype`, its blocks) and
    activations of `rows` rows; `run(x)` copies x in, computes, and returns a copy of y."""

    def __init__(self, qtype: int, n: int, k: int, blocks: np.ndarray, rows: int, threads: int = 1) -> None:
        self.base, self.cpu = _libs()
        self.threads = threads
        size = blocks.nbytes + rows * k * 4 + rows * n * 4 + rows * k * 2 + (64 << 20)  # + work and graph
        self.ctx = self.base.ggml_init(_InitParams(size, None, False))
        if not self.ctx:
            raise RuntimeError("ggml_init failed")
        w = self.base.ggml_new_tensor_2d(self.ctx, qtype, k, n)
        if self.base.ggml_nbytes(w) != blocks.nbytes:
            raise ValueError(f"ggml holds {self.base.ggml_nbytes(w)} bytes, the blocks are {blocks.nbytes}")
        ctypes.memmove(self.base.ggml_get_data(w), blocks.ctypes.data, blocks.nbytes)
        self.x = self.base.ggml_new_tensor_2d(self.ctx, 0, k, rows)  # GGML_TYPE_F32
        self.y = self.base.ggml_mul_mat(self.ctx, w, self.x)
        self.graph = self.base.ggml_new_graph(self.ctx)
        self.base.ggml_build_forward_expand(self.graph, self.y)
        self.shape = (rows, n)

    def run(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        ctypes.memmove(self.base.ggml_get_data(self.x), x.ctypes.data, x.nbytes)
        if self.cpu.ggml_graph_compute_with_ctx(self.ctx, self.graph, self.threads) != 0:
            raise RuntimeError("ggml_graph_compute failed")
        out = np.empty(self.shape, dtype=np.float32)
        ctypes.memmove(out.ctypes.data, self.base.ggml_get_data(self.y), out.nbytes)
        return out

    def close(self) -> None:
        if self.ctx:
            self.base.ggml_free(self.ctx)
            self.ctx = None
