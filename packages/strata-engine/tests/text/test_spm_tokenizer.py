"""SentencePiece vocabularies against llama.cpp: golden ids for a real trained vocabulary
(data/sentencepiece_reference.json, no extra packages needed), a live comparison with fuzz
when llama-cpp-python is installed, and the decoding rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata_engine.api import ModelLoadError
from strata_engine.testing.spm_vocab import (
    CORPUS,
    fuzz_corpus,
    load_golden,
    tokenizer_metadata,
    write_vocab_gguf,
)
from strata_engine.text.load import load_tokenizer
from strata_engine.text.spm_tokenizer import SentencePieceTokenizer
from strata_engine.text.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def golden() -> dict:
    return load_golden()


@pytest.fixture(scope="module")
def tok(golden: dict) -> Tokenizer:
    return load_tokenizer(tokenizer_metadata(golden["vocab"]))


def test_golden_covers_the_corpus(golden: dict) -> None:
    assert [c["text"] for c in golden["cases"]] == list(CORPUS)
    types = golden["vocab"]["types"]
    assert types.count(6) == 256 and {2, 3, 4} <= set(types)  # bytes, unknown, control, user


def test_metadata_selects_sentencepiece(tok: Tokenizer) -> None:
    assert isinstance(tok, SentencePieceTokenizer)
    assert (tok.bos_id, tok.eos_id, tok.add_bos, tok.add_eos) == (1, 2, True, False)


def test_only_load_tokenizer_picks_the_class(golden: dict) -> None:
    """The BPE class builds BPE vocabularies only: the choice is `load_tokenizer`'s alone."""
    with pytest.raises(ModelLoadError, match="'llama' is not BPE"):
        Tokenizer.from_metadata(tokenizer_metadata(golden["vocab"]))


@pytest.mark.parametrize(
    ("key", "kwargs", "space_prefix"),
    [
        ("ids", {}, None),
        ("ids_plain", {"parse_special": False}, None),
        ("ids_no_bos", {"add_special": False}, None),
        ("ids_no_space_prefix", {}, False),
    ],
)
def test_ids_equal_llama_cpp(golden: dict, key: str, kwargs: dict, space_prefix: bool | None) -> None:
    tokenizer = load_tokenizer(tokenizer_metadata(golden["vocab"], space_prefix))
    wrong = [
        (c["text"], got, c[key])
        for c in golden["cases"]
        if (got := tokenizer.encode(c["text"], **kwargs)) != c[key]
    ]
    assert not wrong, f"{len(wrong)} of {len(golden['cases'])} differ from llama.cpp: {wrong[:3]}"


def _detokenize(llama_cpp, llm, ids: list[int], skip_special: bool) -> str:
    """llama.cpp's llama_detokenize (llama-cpp-python's own detokenize joins pieces instead)."""
    arr = (llama_cpp.llama_token * max(len(ids), 1))(*ids)
    buf = llama_cpp.ctypes.create_string_buffer(8192)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, len(buf), skip_special, not skip_special)
    return buf.raw[:n].decode("utf-8", errors="replace")


@pytest.mark.parametrize("space_prefix", [None, False])
def test_ids_equal_live_llama_cpp(golden: dict, tmp_path: Path, space_prefix: bool | None, llama_cpp) -> None:
    """Against llama.cpp itself on the corpus plus fuzz, when llama-cpp-python is installed."""
    path = write_vocab_gguf(tmp_path / "spm.gguf", golden["vocab"], space_prefix)
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    tokenizer = load_tokenizer(tokenizer_metadata(golden["vocab"], space_prefix))
    wrong = []
    texts = list(CORPUS) + fuzz_corpus(300, seed=99)
    for text in texts:
        for special in (True, False):
            want = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
            got = tokenizer.encode(text, parse_special=special)
            if got != want:
                wrong.append((text, special, got, want))
            elif special:
                for ids in (want, want[1:]):
                    for skip in (True, False):
                        if (got_text := tokenizer.decode(ids, skip_special=skip)) != (
                            want_text := _detokenize(llama_cpp, llm, ids, skip)
                        ):
                            wrong.append((text, f"decode {ids} skip={skip}", got_text, want_text))
    assert not wrong, f"{len(wrong)} of {2 * len(texts)} differ from llama.cpp: {wrong[:3]}"


def test_byte_fallback_and_round_trip(tok: Tokenizer) -> None:
    text = "日本語 👨\u200d👩\u200d👧 ½ straße"
    ids = tok.encode(text)
    assert any(tok.token_piece(i).startswith("<0x") for i in ids)  # a character not in the vocabulary
    assert tok.decode(ids[1:]) == text  # the space the leading-space rule added is taken off again
    assert tok.decode(ids) == tok.decode(ids, skip_special=False) == "<s> " + text  # llama.cpp: not after BOS
    assert tok.decode(ids, skip_special=True) == " " + text


def test_spaces_and_bytes_as_token_text(tok: Tokenizer) -> None:
    ids = tok.encode(" the", add_special=False)
    assert b"".join(tok.token_bytes(i) for i in ids) == b"  the"  # prefix space + the text's own
    byte_a = tok.encode("<0x41>", add_special=False)  # written text, not a byte token
    assert tok.token_piece(byte_a[0]) != "<0x41>"
    eight = next(i for i in range(tok.vocab_size) if tok.token_piece(i) == "<0xE2>")
    assert tok.token_bytes(eight) == b"\xe2" and tok.token_text(eight) == "bytes:\\xe2"


def test_streaming_decoder_equals_full_decode(tok: Tokenizer) -> None:
    ids = tok.encode("你好 👋🏽 world", add_special=False)
    decoder = tok.new_decoder()
    streamed = "".join(decoder.push(i) for i in ids) + decoder.flush()
    assert streamed == " " + tok.decode(ids)  # streaming keeps the prefix space: it continues a prompt


def test_specials(tok: Tokenizer) -> None:
    inst = tok.encode("[INST]", add_special=False)
    assert len(inst) == 1 and tok.is_special(inst[0])
    assert len(tok.encode("[INST]", add_special=False, parse_special=False)) > 1
    tool = tok.encode("<tool>", add_special=False, parse_special=False)
    assert len(tool) == 1 and not tok.is_special(tool[0])  # user-defined: always split out
    assert (
        tok.decode(tok.encode("a[INST]b", add_special=False), skip_special=True) == "a b"
    )  # space after special
    assert tok.eog_ids == frozenset({2, tok.encode("<|end|>", add_special=False)[0]})


def test_phi3_names_strip_whitespace_after_specials(golden: dict) -> None:
    meta = {**tokenizer_metadata(golden["vocab"]), "general.name": "Phi-3 mini"}
    phi = load_tokenizer(meta)
    plain = load_tokenizer(tokenizer_metadata(golden["vocab"]))
    assert phi.encode("<|end|>\n  x") == phi.encode("<|end|>x") != plain.encode("<|end|>\n  x")
    assert phi.encode("<s> x") == plain.encode("<s> x")  # <s> keeps its whitespace


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"tokenizer.ggml.model": "bert"}, "bert"),
        ({"tokenizer.ggml.model": "t5"}, "t5"),
        ({"tokenizer.ggml.tokens": []}, "tokens"),
        ({"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": 5000}, "BOS"),
    ],
)
def test_unsupported_or_broken_vocabularies_are_named(golden: dict, overrides: dict, named: str) -> None:
    with pytest.raises(ModelLoadError, match=named):
        load_tokenizer({**tokenizer_metadata(golden["vocab"]), **overrides})
