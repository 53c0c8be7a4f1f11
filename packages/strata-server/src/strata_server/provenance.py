"""Which arithmetic answered: Strata's version, the model file's sha256, the kernels, and
the `system_fingerprint` every completion and chat reply carries.

The fingerprint is a digest of exactly what the determinism guarantee is tied to (see
docs/DETAILS.md): the versions of strata-engine and strata-server, the GGUF's sha256, the
arithmetic (`strata_engine.provenance.arithmetic`: "native" for every CPU target alike,
"native-fp32", "native-q8", "triton", "torch"), the GPU's model name with the Triton kernels (their bits are
promised per GPU model), the tensor-parallel rank count when above one (its partial sums are
added in another order), and the server's `--chat-template` when one replaces the model's
(it changes the prompt a chat request runs on), and the KV cache's dtype when it is not the
default fp32 (`--kv-cache-dtype`: a rounded cache gives other bits). Thread count, CPU model, batch, served
name and limits are left out: they never change the bits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from strata_engine.provenance import arithmetic, kernel_target, model_sha256

UNKNOWN = "unknown"


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return UNKNOWN


@dataclass(frozen=True)
class Provenance:
    """The facts `/version` reports and the fingerprint is made of."""

    kernels: str
    invariant: bool
    model_file: str | None = None
    model_size: int | None = None
    model_sha256: str | None = None
    tensor_parallel: int = 1
    chat_template_sha256: str | None = None  # the server's --chat-template, when it replaces the model's
    gpu: str | None = None  # the GPU's model name with the Triton kernels (their bits are per GPU model)
    kv_cache_dtype: str = "fp32"  # what the KV cache stores (another type, other bits)
    server_version: str = package_version("strata-server")
    engine_version: str = package_version("strata-engine")

    @classmethod
    def of(
        cls,
        kernels: str,
        invariant: bool,
        path: str | Path | None,
        tensor_parallel: int = 1,
        chat_template: str | None = None,
        sha256: str | None = None,
        kv_cache_dtype: str = "fp32",
    ) -> Provenance:
        """The provenance of an engine loaded from `path` (hashed once, see `model_sha256`,
        unless its `sha256` is given)."""
        file = None if path is None else Path(path)
        return cls(
            kernels=kernels,
            invariant=invariant,
            model_file=None if file is None else file.name,
            model_size=None if file is None else file.stat().st_size,
            model_sha256=sha256 if file is None or sha256 is not None else model_sha256(file),
            tensor_parallel=tensor_parallel,
            chat_template_sha256=None if chat_template is None else text_sha256(chat_template),
            gpu=gpu_name() if kernels.startswith("triton") else None,
            kv_cache_dtype=kv_cache_dtype,
        )

    @property
    def arithmetic(self) -> str:
        return arithmetic(self.kernels)

    @cached_property
    def system_fingerprint(self) -> str:
        """`fp_` and 16 hex digits of the sha256 over the parts that decide the bits."""
        parts = [
            f"strata-engine={self.engine_version}",
            f"strata-server={self.server_version}",
            f"model-sha256={self.model_sha256 or UNKNOWN}",
            f"arithmetic={self.arithmetic}",
        ]
        if self.tensor_parallel > 1:
            parts.append(f"tensor-parallel={self.tensor_parallel}")
        if self.chat_template_sha256 is not None:
            parts.append(f"chat-template-sha256={self.chat_template_sha256}")
        if self.gpu is not None:
            parts.append(f"gpu={self.gpu}")
        if self.kv_cache_dtype != "fp32":  # the default's fingerprint is the one it always was
            parts.append(f"kv-cache-dtype={self.kv_cache_dtype}")
        return "fp_" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def body(self, served_name: str) -> dict[str, Any]:
        """`GET /version`: vLLM's `version` key, then what the fingerprint covers."""
        return {
            "version": self.server_version,
            "engine_version": self.engine_version,
            "kernels": self.kernels,
            "kernel_target": kernel_target(self.kernels),
            "arithmetic": self.arithmetic,
            "invariant": self.invariant,
            "tensor_parallel": self.tensor_parallel,
            "gpu": self.gpu,
            "model": {
                "id": served_name,
                "file": self.model_file,
                "size": self.model_size,
                "sha256": self.model_sha256,
            },
            "chat_template_sha256": self.chat_template_sha256,
            "kv_cache_dtype": self.kv_cache_dtype,
            "system_fingerprint": self.system_fingerprint,
        }


def gpu_name() -> str | None:
    """The CUDA device's model name (torch is there whenever the Triton kernels run)."""
    try:
        import torch

        return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    except Exception:  # no CUDA after all: nothing to name
        return None


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def version_line() -> str:
    """`strata-server --version`."""
    return (
        f"strata-server {package_version('strata-server')} (strata-engine {package_version('strata-engine')})"
    )
