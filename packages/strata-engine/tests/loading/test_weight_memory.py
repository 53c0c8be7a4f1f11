"""A loaded model holds its weights at about the file's size: no weight matrix in fp32, and the
file's pages of a tensor the kernels repacked not resident beside the repacked copy. Cheap
(a tiny file); the real Gemma 3 file's RSS against llama.cpp is bench/bench_startup.py's.

Why: a transcoded type (IQ3_S read as Q8_0 blocks) or a widened scale costs at most 36 bytes a
32-value block against 18 to 34 stored; an fp32 copy costs 128, and the file's mapping left
resident doubles whatever the kernels repacked. Q5_0 (22 bytes stored, in many "Q4_K_M" files) is
held at 24, the 4-bit codebook types (IQ4_NL, IQ4_XS, MXFP4) at 20 and the grid types (IQ2_XXS,
IQ3_XXS, IQ3_S, IQ1_S) as stored (6.25 to 13.75), not as the 36 of the Q8_0 blocks they were once
rewritten as."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from strata_engine import structured
from strata_engine.engine import LLMEngine
from strata_engine.kernels.weights import Weight
from strata_engine.model_runner import LOGIT_ROWS, MIN_LOGIT_ROWS, logit_rows
from strata_engine.row_packing import GROUP_ROWS
from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

# bytes held a value at the most: the kernels' Q8_0 layout (36 bytes / 32) is the widest form a
# quantised type is held in; fp32 would be 4
MAX_HELD_PER_VALUE = 36 / 32
# read as held, at most: Q5_0 6 bits a weight (fp32 d per 32 values, 5-bit quants); IQ4_NL 5 (a
# scale per 32 values, 4-bit indices); IQ4_XS and the grid types the file's own bytes
HELD_PER_VALUE = {
    QT.Q5_0: 6 / 8,
    QT.IQ4_NL: 5 / 8,
    QT.IQ4_XS: 136 / 256,  # 4.25 bits a weight
    QT.IQ2_XXS: 66 / 256,  # 2.06 bits a weight
    QT.IQ3_S: 110 / 256,  # 3.44
}
MIB = 2**20


def model_weights(engine: LLMEngine) -> list[Weight]:
    """Every distinct weight the model holds (the embedding, the head, each layer's)."""
    model, seen, out = engine.model, set(), []
    for w in [model.embedding, model.output] + [
        getattr(layer, f.name) for layer in model.layers for f in fields(layer)
    ]:
        if isinstance(w, Weight) and id(w) not in seen:
            seen.add(id(w))
            out.append(w)
    return out


def held_bytes(w: Weight) -> int:
    """Bytes `w` keeps of its own (a view of the file's mapping keeps none)."""
    own = 0 if w.source is not None and w.raw.base is w.source.data.base else w.raw.nbytes
    return own + (w._dense.nbytes if w._dense is not None and w._dense.base is None else 0)


def file_mapping_rss(path: Path) -> int:
    """Resident bytes of this process's mappings of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(head[1]) * 1024
    return total


@pytest.mark.parametrize("weight_type", [*HELD_PER_VALUE, None], ids=lambda t: t.name if t else "rotation")
def test_no_weight_is_held_in_fp32_or_twice(tmp_path: Path, weight_type: QT | None) -> None:
    """Q5_0, IQ4 and the grid types (once transcoded at load, now read as held) and the tiny
    files' rotation of every kernel type."""
    path = write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0], seed=5, weight_type=weight_type)
    engine = LLMEngine(path, num_threads=1, kv_cache_mb=4, parallel=1)
    weights = model_weights(engine)
    assert weights
    for w in weights:
        assert w.source is not None
        values = -(-w.out_features // GROUP_ROWS) * GROUP_ROWS * w.in_features  # packed rows: whole groups
        if w.source.qtype not in (QT.F32,):
            assert w.kernel_type != 0, f"{w.name} ({w.source.qtype.name}) is held as fp32"
            assert w._dense is None, f"{w.name} keeps an fp32 copy"
        stored = GGML_QUANT_SIZES[w.source.qtype][1] / GGML_QUANT_SIZES[w.source.qtype][0]
        bound = max(MAX_HELD_PER_VALUE, stored) * values
        if w.source.qtype in HELD_PER_VALUE:
            bound = HELD_PER_VALUE[w.source.qtype] * values
        assert held_bytes(w) <= bound, f"{w.name}: {held_bytes(w)} bytes held, {bound:.0f} at the most"
    tensors = sum(w.source.data.nbytes for w in weights if w.source is not None)
    assert tensors > 256 * 1024  # the bound below is far from the file's size
    # the file's pages: released after the layers were packed (a header page or two may stay)
    assert file_mapping_rss(path) <= 64 * 1024, f"{file_mapping_rss(path)} bytes of {path} resident"


def test_the_logits_buffer_is_bounded_by_the_vocabulary() -> None:
    """64 rows for a 49k vocabulary; a 262k vocabulary gets 12 (12 MiB, not 64)."""
    assert logit_rows(49_152) == LOGIT_ROWS
    assert logit_rows(262_144) == 12 and logit_rows(262_144) * 262_144 * 4 <= 12 * MIB
    assert logit_rows(10**8) == MIN_LOGIT_ROWS


def test_a_large_vocabulary_gets_no_slicer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """llguidance's slicer costs ~250 bytes an id (65 MiB at 262k ids): not above the bound."""
    seen: list[object] = []
    real = structured.llguidance.LLTokenizer

    def record(*args: object, **kwargs: object) -> object:
        seen.append(kwargs.get("slices"))
        return real(*args, **kwargs)

    monkeypatch.setattr(structured.llguidance, "LLTokenizer", record)
    path = write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0], seed=5)
    engine = LLMEngine(path, num_threads=1, kv_cache_mb=4, parallel=1)
    n = engine.vocab_size
    structured.vocabulary(engine.tokenizer, n)
    monkeypatch.setattr(structured, "SLICED_VOCAB_MAX", n - 1)
    structured.vocabulary(engine.tokenizer, n)
    assert seen[-2:] == [None, []]


def test_packed_token_bytes_read_as_the_list_did() -> None:
    """The tokenizers' token bytes, one buffer instead of an object each: same elements."""
    from strata_engine.text.packed_bytes import PackedBytes

    items = [b"", b"a", b"\xff\x00", b"", "▁the".encode()]
    packed = PackedBytes(iter(items))
    assert len(packed) == len(items) and list(packed) == items
    assert packed[-1] == items[-1] and packed[1:3] == items[1:3]
    with pytest.raises(IndexError):
        packed[len(items)]


def test_the_heap_policy_leaves_an_operators_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """strata-server fixes glibc's mmap threshold, unless the environment set it."""
    import platform

    from strata_engine import heap

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        assert heap.tune_heap() == {}
        return
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert heap.tune_heap() == {"MALLOC_MMAP_THRESHOLD_": heap.MMAP_THRESHOLD}
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(2**20))
    assert heap.tune_heap() == {}


def test_a_released_block_is_reused_before_a_never_used_one() -> None:
    """A block's KV pages become resident when it is first written: a request after another
    takes the blocks the first gave back, not fresh ones, so uncacheable repeated work does not
    spread over the whole KV budget."""
    from types import SimpleNamespace

    from strata_engine.block_manager import BlockManager

    blocks = BlockManager(num_blocks=16, block_size=16)

    def run(tokens: int) -> list[int]:
        seq = SimpleNamespace(block_table=[], block_hashes=[], state_slot=None)
        assert blocks.ensure(seq, tokens)
        taken = list(seq.block_table)
        blocks.release(seq)
        return taken

    first = run(40)
    assert first == [0, 1, 2]
    assert sorted(run(40)) == first
    assert sorted(run(64)) == [*first, 3]  # one more than before: the next never-used block
