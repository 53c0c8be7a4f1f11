"""Rebuild data/sentencepiece_reference.json: train a small SentencePiece BPE vocabulary on a
generated corpus (the `sentencepiece` package), convert it as convert_hf_to_gguf does, and
record llama.cpp's ids (llama-cpp-python, vocab_only) for the corpus in spm_vocab.CORPUS.

    python tools/make_spm_golden.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from strata_engine.testing import spm_vocab

VOCAB_SIZE = 1000

# GGUF token types (gguf.TokenType): normal 1, unknown 2, control 3, user-defined 4, unused 5, byte 6
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def train(tmp: Path) -> dict:
    import sentencepiece as spm

    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(spm_vocab.training_corpus()), encoding="utf-8")
    prefix = tmp / "spm"
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        byte_fallback=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        character_coverage=0.995,
        control_symbols=list(spm_vocab.CONTROL_SYMBOLS),
        user_defined_symbols=list(spm_vocab.USER_SYMBOLS),
        num_threads=1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.IdToPiece(i))
        scores.append(float(sp.GetScore(i)))
        if sp.IsUnknown(i):
            types.append(UNKNOWN)
        elif sp.IsControl(i):
            types.append(CONTROL)
        elif sp.IsUnused(i):
            types.append(UNUSED)
        elif sp.IsByte(i):
            types.append(BYTE)
        elif tokens[-1] in spm_vocab.USER_SYMBOLS:
            types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
    return {"tokens": tokens, "scores": scores, "types": types}


def main() -> None:
    import llama_cpp

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        vocab = train(tmp)
        llm = llama_cpp.Llama(
            str(spm_vocab.write_vocab_gguf(tmp / "a.gguf", vocab)), vocab_only=True, verbose=False
        )
        nopre = spm_vocab.write_vocab_gguf(tmp / "b.gguf", vocab, add_space_prefix=False)
        llm_nopre = llama_cpp.Llama(str(nopre), vocab_only=True, verbose=False)
        cases = []
        for text in spm_vocab.CORPUS:
            raw = text.encode("utf-8")
            cases.append(
                {
                    "text": text,
                    "ids": llm.tokenize(raw, add_bos=True, special=True),
                    "ids_plain": llm.tokenize(raw, add_bos=True, special=False),
                    "ids_no_space_prefix": llm_nopre.tokenize(raw, add_bos=True, special=True),
                    "ids_no_bos": llm.tokenize(raw, add_bos=False, special=True),
                }
            )
    doc = {
        "source": f"llama-cpp-python {llama_cpp.__version__}, vocab_only; vocabulary trained by make_spm_golden.py",
        "vocab": vocab,
        "cases": cases,
    }
    spm_vocab.GOLDEN.write_text(json.dumps(doc, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {spm_vocab.GOLDEN} ({len(cases)} cases, {len(vocab['tokens'])} tokens)")


if __name__ == "__main__":
    main()
