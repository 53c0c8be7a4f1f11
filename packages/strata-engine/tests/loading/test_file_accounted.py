"""The whole model file accounted for: for every supported architecture, one extra tensor or one
extra `{arch}.` key the model does not read refuses the load naming it; the same file without
the extra loads. A tokenizer key nobody reads is refused too, and an informational key is not.

The files with extras are copies made with gguf-py's reader and writer (not the engine's
parser), so the refusal is of the file as written, and the unmodified copy loading proves the
copy itself is sound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from strata_engine.api import ModelLoadError
from strata_engine.config import SUPPORTED_ARCHITECTURES
from strata_engine.engine import LLMEngine
from strata_engine.testing.tiny_arch_models import ARCH_SPECS, write_arch_model
from strata_engine.testing.tiny_gemma4 import write_gemma4
from strata_engine.testing.tiny_gpt_oss import write_gpt_oss
from strata_engine.testing.tiny_hybrid_models import SPEC_MOE, SPEC_NEXT, write_qwen35
from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model


def copy_with(src: Path, dst: Path, keys: dict[str, Any] | None = None, tensor: str | None = None) -> Path:
    """`src` rewritten to `dst` field by field and tensor by tensor, plus `keys` (strings or
    floats) and an F32 tensor named `tensor` (8 values)."""
    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(str(dst), arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), kind, sub_type=sub)
    for name, value in (keys or {}).items():
        if isinstance(value, str):
            writer.add_string(name, value)
        else:
            writer.add_float32(name, value)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    if tensor is not None:
        writer.add_tensor(tensor, np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def _load(path: Path) -> LLMEngine:
    return LLMEngine(path, num_threads=1, kv_cache_mb=4)


@pytest.fixture(scope="module")
def arch_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny file per supported architecture (the MoE llama as well as the dense one)."""
    d = tmp_path_factory.mktemp("accounted")
    files = {s.name: write_tiny_model(d / f"{s.name}.gguf", s) for s in TINY_SPECS}
    files |= {s.name: write_arch_model(d / f"{s.name}.gguf", s) for s in ARCH_SPECS}
    files["gpt-oss"] = write_gpt_oss(d / "gpt-oss.gguf")
    files["gemma4"] = write_gemma4(d / "gemma4.gguf")
    files["gemma4-moe"] = write_gemma4(d / "gemma4-moe.gguf", variant="moe")
    files["qwen35"] = write_qwen35(d / "qwen35.gguf")
    files["qwen35moe"] = write_qwen35(d / "qwen35moe.gguf", SPEC_MOE)
    files["qwen3next"] = write_qwen35(d / "qwen3next.gguf", SPEC_NEXT)
    return files


def test_every_supported_architecture_is_covered(arch_files: dict[str, Path]) -> None:
    archs = {GGUFReader(p).fields["general.architecture"].contents() for p in arch_files.values()}
    assert archs == set(SUPPORTED_ARCHITECTURES)


@pytest.mark.parametrize("extra", ["tensor", "key", "none"])
def test_an_unread_tensor_or_key_is_refused_by_name(
    arch_files: dict[str, Path], tmp_path: Path, extra: str
) -> None:
    for name, path in arch_files.items():
        arch = GGUFReader(path).fields["general.architecture"].contents()
        if extra == "tensor" and arch == "gpt-oss":  # it reads that bias: a shared expert instead
            copy = copy_with(path, tmp_path / f"{name}.gguf", tensor="blk.0.ffn_gate_shexp.weight")
            with pytest.raises(
                ModelLoadError, match=r"tensor blk\.0\.ffn_gate_shexp\.weight.*shared experts"
            ):
                _load(copy)
        elif extra == "tensor":
            # a bias llama.cpp's graphs add (attn_output.bias): computed without it, logits would differ
            copy = copy_with(path, tmp_path / f"{name}.gguf", tensor="blk.0.attn_output.bias")
            with pytest.raises(
                ModelLoadError, match=r"tensor blk\.0\.attn_output\.bias.*bias on the attention output"
            ):
                _load(copy)
        elif extra == "key":
            copy = copy_with(path, tmp_path / f"{name}.gguf", keys={f"{arch}.attention.scale": 0.5})
            with pytest.raises(ModelLoadError, match=rf"GGUF metadata {arch}\.attention\.scale is not read"):
                _load(copy)
        else:  # the copy itself, and keys that cannot change a logprob, load
            informational = {"general.source.url": "x", f"{arch}.tensor_data_layout": "Meta AI original pth"}
            _load(copy_with(path, tmp_path / f"{name}.gguf", keys=informational))


def test_an_unread_tokenizer_key_is_refused(arch_files: dict[str, Path], tmp_path: Path) -> None:
    copy = copy_with(
        arch_files["llama-tied"], tmp_path / "t.gguf", keys={"tokenizer.ggml.normalizer": "nfkc"}
    )
    with pytest.raises(ModelLoadError, match=r"tokenizer\.ggml\.normalizer is not read by its tokenizer"):
        _load(copy)


def test_a_split_file_is_refused(arch_files: dict[str, Path], tmp_path: Path) -> None:
    copy = copy_with(arch_files["qwen2-untied"], tmp_path / "s.gguf", keys={"split.count": 3.0})
    with pytest.raises(ModelLoadError, match="split GGUF"):
        _load(copy)


def test_the_docs_list_what_the_code_loads_and_refuses() -> None:
    """docs/engine.md's generated section is the one the code's lists give today."""
    from strata_engine.model_support import markdown, section_of

    page = (Path(__file__).parents[4] / "docs" / "engine.md").read_text()
    assert section_of(page) == markdown(), (
        "regenerate: python -m strata_engine.model_support --write docs/engine.md"
    )
