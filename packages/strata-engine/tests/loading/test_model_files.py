"""Model files are untrusted input: a malformed GGUF is one `ModelLoadError` naming the field,
before anything is read from it; the shapes the kernels receive are the ones the loader proved.

Malformed files are a valid tiny model with one header number changed (located with gguf-py's
own reader, see gguf_mutations), a cut, or a hand-written header.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gguf import GGUFWriter

from strata_engine.api import ModelLoadError
from strata_engine.engine import LLMEngine
from strata_engine.gguf_loader import GGUFFile
from strata_engine.testing.gguf_mutations import Field, field, get, header_fields, put
from strata_engine.testing.tiny_models import HIDDEN, TINY_SPECS, VOCAB_SIZE, write_tiny_model

LLAMA = TINY_SPECS[0]  # llama, tied head


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny.gguf", LLAMA)


def patched(tiny: Path, tmp_path: Path, label: str, value: int) -> Path:
    """A copy of the tiny model with one header number set to `value`."""
    data = bytearray(tiny.read_bytes())
    put(data, field(header_fields(tiny), label), value)
    path = tmp_path / "patched.gguf"
    path.write_bytes(bytes(data))
    return path


def load(path: Path) -> LLMEngine:
    return LLMEngine(path, ctx_size=64, kv_cache_mb=1, num_threads=1, parallel=1)


def test_the_tiny_model_loads_as_written(tiny: Path) -> None:
    engine = load(tiny)
    assert engine.vocab_size == VOCAB_SIZE == engine.model.embedding.out_features


# -- the vocabulary: the embedding's rows, and nothing else --------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from strata_engine.api import ModelLoadError, Request, SamplingParams
    from strata_engine.engine import LLMEngine
    try:
        engine = LLMEngine(sys.argv[1], ctx_size=64, kv_cache_mb=1, num_threads=1, parallel=1)
    except ModelLoadError as exc:
        print("refused at load:", exc)
        raise SystemExit(0)
    engine.generate(Request((1, 2, 30_000_000), SamplingParams(max_tokens=1)))
    print("generated")
    """
)


def test_a_vocab_size_beyond_the_embedding_is_refused_before_any_id_reaches_the_kernels(
    tiny: Path, tmp_path: Path
) -> None:
    """The header claims 40,000,000 tokens, the embedding has 295 rows: an id checked against
    the claim would be gathered from far past the embedding (a segfault). The load is refused,
    naming the key; the request runs in a child process so that a crash fails the test."""
    path = patched(tiny, tmp_path, "llama.vocab_size:3", 40_000_000)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"child ended with {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("refused at load:"), proc.stdout
    assert "llama.vocab_size" in proc.stdout and "40000000" in proc.stdout and "295 rows" in proc.stdout


def test_a_tokenizer_with_other_than_the_embeddings_count_is_refused(tiny: Path, tmp_path: Path) -> None:
    path = patched(tiny, tmp_path, "llama.vocab_size:3", VOCAB_SIZE - 1)
    with pytest.raises(ModelLoadError, match=r"token_embd.weight has 295 rows but llama.vocab_size says 294"):
        load(path)


@pytest.mark.parametrize(
    ("label", "value", "message"),
    [
        (
            "llama.embedding_length:3",
            HIDDEN * 2,
            r"token_embd.weight has shape \[295, 256\].* need \[295, 512\]",
        ),
        (
            "llama.attention.head_count:3",
            8,
            r"blk.0.attn_q.weight has shape \[256, 256\].* need \[512, 256\]",
        ),
        (
            "llama.attention.head_count_kv:3",
            4,
            r"blk.0.attn_k.weight has shape \[128, 256\].* need \[256, 256\]",
        ),
        (
            "llama.feed_forward_length:3",
            1024,
            r"blk.0.ffn_down.weight has shape \[256, 512\].* need \[256, 1024\]",
        ),
        (
            "llama.attention.head_count:3",
            3,
            "head_count 3 is not a multiple of llama.attention.head_count_kv 2",
        ),
        ("llama.attention.head_count:3", 0, r"llama.attention.head_count = 0 is not in 1\.\."),
        ("llama.block_count:3", 2**31, r"llama.block_count = 2147483648 is not in 1\.\.4096"),
        ("llama.rope.dimension_count:3", 65, "rope.dimension_count 65 is not an even number"),
        ("llama.context_length:3", 0, r"llama.context_length = 0 is not in 1\.\."),
    ],
)
def test_hyper_parameters_must_match_the_tensors(
    tiny: Path, tmp_path: Path, label: str, value: int, message: str
) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load(patched(tiny, tmp_path, label, value))


def test_a_hyper_parameter_of_the_wrong_kind_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_tiny_model(path, LLAMA)
    data = bytearray(path.read_bytes())
    value_type = field(header_fields(path), "llama.embedding_length:2")
    assert get(data, value_type) == 4  # uint32
    put(data, value_type, 6)  # the same four bytes read as a float32
    path.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match=r"llama.embedding_length must be an integer, got float"):
        load(path)


# -- the file's layout: offsets, sizes, counts and lengths inside the file -------------------


@pytest.mark.parametrize("keep", [0.25, 0.999])
def test_a_truncated_file_is_refused_naming_the_tensor(tiny: Path, tmp_path: Path, keep: float) -> None:
    data = tiny.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(
        ModelLoadError, match=r"GGUF tensor \S+ data: \d+ bytes at offset \d+ run past the end"
    ):
        GGUFFile(path)


def test_a_file_cut_inside_the_header_is_refused(tiny: Path, tmp_path: Path) -> None:
    tokens = field(header_fields(tiny), "tokenizer.ggml.tokens:4")  # the vocabulary's count
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny.read_bytes()[: tokens.offset + 100])
    with pytest.raises(ModelLoadError, match=r"tokenizer.ggml.tokens count: 295 entries cannot fit"):
        GGUFFile(path)


def test_a_tensor_offset_past_the_end_is_refused(tiny: Path, tmp_path: Path) -> None:
    size = tiny.stat().st_size
    path = patched(tiny, tmp_path, "output_norm.weight:5", size // 32 * 32)
    with pytest.raises(
        ModelLoadError, match=r"tensor output_norm.weight data: 1024 bytes at offset .* past the end"
    ):
        GGUFFile(path)


def test_a_tensor_offset_off_the_alignment_is_refused(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ModelLoadError, match=r"output_norm.weight offset: 3 is not a multiple of the alignment 32"
    ):
        GGUFFile(patched(tiny, tmp_path, "output_norm.weight:5", 3))


@pytest.mark.parametrize(
    ("label", "value", "message"),
    [
        ("token_embd.weight:2", 2**31, r"tensor token_embd.weight n_dims: 2147483648 is not in 1\.\.4"),
        ("token_embd.weight:2", 0, r"tensor token_embd.weight n_dims: 0 is not in 1\.\.4"),
        ("token_embd.weight:3[1]", 2**40, "token_embd.weight dims: .* is not a shape this file can hold"),
        ("blk.0.attn_v.weight:3[0]", 100, "a row of 100 values is not whole Q8_0 blocks of 32"),
        ("token_embd.weight:4", 9999, "tensor token_embd.weight type: unknown GGML type id 9999"),
        (
            "general.architecture:3",
            2**63,
            "metadata general.architecture: 9223372036854775808 entries cannot fit",
        ),
        ("llama.block_count:0", 2**62, "metadata key 1: 4611686018427387904 entries cannot fit"),
        (
            "tokenizer.ggml.tokens:4",
            2**60,
            "tokenizer.ggml.tokens count: 1152921504606846976 entries cannot fit",
        ),
        ("tokenizer.ggml.tokens:5", 2**40, r"tokenizer.ggml.tokens: string 0 of 295 runs past the end"),
        ("llama.block_count:2", 77, "metadata llama.block_count: unknown metadata value type 77"),
        ("GGUF.kv_count:0", 2**64 - 1, "metadata count: 18446744073709551615 entries cannot fit"),
        ("GGUF.tensor_count:0", 2**40, "tensor count: 1099511627776 tensors cannot fit"),
        ("GGUF.version:0", 1, "GGUF version 1 is not supported"),
    ],
)
def test_malformed_header_fields_are_refused_by_name(
    tiny: Path, tmp_path: Path, label: str, value: int, message: str
) -> None:
    with pytest.raises(ModelLoadError, match=message):
        GGUFFile(patched(tiny, tmp_path, label, value))


@pytest.mark.parametrize("alignment", [0, 3, 48])
def test_an_alignment_that_is_not_a_power_of_two_is_refused(tmp_path: Path, alignment: int) -> None:
    path = tmp_path / "aligned.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_custom_alignment(64)
    writer.add_tensor("w", __import__("numpy").zeros(64, dtype="float32"))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert GGUFFile(path).tensors["w"].data.size == 256
    data = bytearray(path.read_bytes())
    put(data, field(header_fields(path), "general.alignment:3"), alignment)
    path.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match=f"general.alignment: {alignment} is not a power of two"):
        GGUFFile(path)


def hand_written(path: Path, kv: bytes, n_kv: int = 1) -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, n_kv) + kv)
    return path


def test_deeply_nested_arrays_are_refused_not_recursed(tmp_path: Path) -> None:
    key = b"k"
    nested = struct.pack("<IQ", 9, 1) * 100_000  # an array of one array of one array ...
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<I", 9) + nested
    with pytest.raises(ModelLoadError, match="metadata k: arrays nested deeper than 4"):
        GGUFFile(hand_written(tmp_path / "nested.gguf", kv))


def test_a_string_longer_than_the_file_is_refused(tmp_path: Path) -> None:
    kv = struct.pack("<Q", 1) + b"k" + struct.pack("<IQ", 8, 2**63) + b"abc"
    with pytest.raises(
        ModelLoadError, match="metadata k: 9223372036854775808 entries cannot fit in the 3 bytes"
    ):
        GGUFFile(hand_written(tmp_path / "long.gguf", kv))


def test_a_name_that_is_not_printable_stays_on_one_line(tmp_path: Path) -> None:
    key = b"evil\nkey\x1b[2J"
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<I", 99)
    with pytest.raises(ModelLoadError) as info:
        GGUFFile(hand_written(tmp_path / "evil.gguf", kv))
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)
    assert r"'evil\nkey\x1b[2J': unknown metadata value type 99" in str(info.value)


def test_header_fields_found_by_gguf_py_are_where_the_loader_reads_them(tiny: Path) -> None:
    """The helper that places every mutation agrees with the file (guards the tests above)."""
    fields = header_fields(tiny)
    data = tiny.read_bytes()
    assert get(data, field(fields, "llama.vocab_size:3")) == VOCAB_SIZE
    assert get(data, field(fields, "token_embd.weight:3[1]")) == VOCAB_SIZE
    assert isinstance(fields[0], Field)
