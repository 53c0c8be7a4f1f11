"""The engine's kernels: one interface, interchangeable backends, and the choice between them.

Every import in this package points down this list (test_import_layers.py checks it):

- `native.header`: the C interface read from strata_kernels.h (every exported function, type
  code and struct); `host`: the host's CPUs and CUDA; `native` (package): the C sources, their
  build and cache, and the library bound from the header.
- `kquants`: K-quant blocks rearranged for the kernels (in C).
- `weights`: a weight as the kernels read it (`Weight`), and exact fp32 dequantisation.
- `base`: the `Ops` protocol and the types every backend shares.
- the backends: `native.backend` (`NativeOps`, C), `torch_backend` (`TorchOps`), `triton` (GPU);
  `fused_layer`: one native call per transformer layer.
- `choice`: `make_ops`, which backend runs (`--kernels`, `--device`).

Outside the package the kernels import only `strata_engine.api` (errors), `strata_engine.paths`
(the build cache's home) and `strata_engine.gguf_loader` (a tensor as stored).
"""
