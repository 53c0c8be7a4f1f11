"""Every byte-level pre-tokenizer Strata accepts, against llama.cpp on a generated vocabulary.

llama.cpp's vocabulary fixtures (test_vocab_fixtures) cover the pre-tokenizers of the families
it ships a vocabulary for; tekken (Mistral Small 3.x, Devstral, Magistral) and gpt-4o (gpt-oss,
Phi-4-mini) have none there. Here one small trained vocabulary (bpe_vocab.py) is written with
each `tokenizer.ggml.pre` name Strata accepts, and llama.cpp (llama-cpp-python, vocab_only)
and Strata tokenize the same texts: case runs, contractions, digit groups, punctuation runs,
every kind of whitespace, scripts, emoji, special tokens, and a fuzz corpus.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from strata_engine.testing.bpe_vocab import (
    TEXTS,
    byte_level_vocab,
    fuzz_corpus,
    gemma4_vocab,
    write_vocab_gguf,
)
from strata_engine.text.load import load_tokenizer
from strata_engine.text.pretokenizers import PRE_TOKENIZERS

BYTE_LEVEL = sorted(name for name, spec in PRE_TOKENIZERS.items() if spec.byte_level)


@pytest.fixture(scope="module")
def vocab() -> dict:
    return byte_level_vocab("default")


def test_the_pre_tokenizers_without_fixtures_are_here() -> None:
    assert {"tekken", "gpt-4o", "qwen35", "deepseek-coder", "deepseek-llm", "falcon"} <= set(BYTE_LEVEL)


@pytest.mark.parametrize("pre", BYTE_LEVEL)
def test_ids_equal_llama_cpp(pre: str, vocab: dict, tmp_path: Path, llama_cpp: ModuleType) -> None:
    meta = {**vocab, "tokenizer.ggml.pre": pre}
    path = write_vocab_gguf(tmp_path / f"{pre}.gguf", meta)
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    tok = load_tokenizer(meta)
    texts = [*TEXTS, *fuzz_corpus(300, seed=len(pre))]
    wrong = []
    for text in texts:
        for special in (True, False):
            want = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
            got = tok.encode(text, parse_special=special)
            if got != want:
                wrong.append((text, special, tok.split_words(text), got, want))
    eog = {i for i in range(tok.vocab_size) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, i)}
    llm.close()
    assert not wrong, f"{len(wrong)} of {2 * len(texts)} differ from llama.cpp: {wrong[:3]}"
    assert tok.eog_ids == eog


def test_gemma4_vocabulary_equals_llama_cpp(tmp_path: Path, llama_cpp: ModuleType) -> None:
    """Gemma 4's kind of BPE on a hand-made vocabulary (the real one: test_vocab_fixtures):
    spaces as "▁", byte fallback, newline runs, BOS always added."""
    meta = gemma4_vocab()
    path = write_vocab_gguf(tmp_path / "gemma4.gguf", meta)
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    tok = load_tokenizer(meta)
    texts = [*TEXTS, *fuzz_corpus(300, seed=4), "ab a", "  a  b\n\n\n\nx", "<eos>a</s>"]
    wrong = [
        (text, special, got, want)
        for text in texts
        for special in (True, False)
        if (got := tok.encode(text, parse_special=special))
        != (want := llm.tokenize(text.encode("utf-8"), add_bos=True, special=special))
    ]
    eog = {i for i in range(tok.vocab_size) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, i)}
    llm.close()
    assert not wrong, f"{len(wrong)} of {2 * len(texts)} differ from llama.cpp: {wrong[:3]}"
    assert tok.eog_ids == eog
