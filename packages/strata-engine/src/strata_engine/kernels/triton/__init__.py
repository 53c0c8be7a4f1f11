"""The Triton GPU backend: `backend.TritonOps` and one module per kernel family (matmul with fused
GGUF dequantisation, norm, rope, activation, attention, logprobs), each with a float64 torch
reference next to it. This file imports nothing, so a kernel module never runs its package's
backend."""
