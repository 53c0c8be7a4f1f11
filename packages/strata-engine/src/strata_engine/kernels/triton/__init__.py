"""The Triton GPU backend: `backend.TritonOps` and one module per kernel family (matmul with fused
GGUF dequantisation, norm, rope, activation, attention, logprobs). The float kernels perform the
C kernels' own sequences of IEEE operations (ieee.py holds vector.h's e^x, tanh, log and
horizontal sum), so their bits are the CPU's; the integer modes' matmul (quantize.py,
packed.py, intmatmul.py) is the C kernels' integer arithmetic. This file imports nothing, so a
kernel module never runs its package's backend."""
