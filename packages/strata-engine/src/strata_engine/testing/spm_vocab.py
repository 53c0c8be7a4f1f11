"""A small real SentencePiece vocabulary for tests: trained once with the `sentencepiece`
package (see make_spm_golden.py), stored with llama.cpp's ids in data/sentencepiece_reference.json,
so that the tests need neither sentencepiece nor llama-cpp-python.

`write_vocab_gguf` writes it into a GGUF the way convert_hf_to_gguf does for a SentencePiece
model (tokens, scores, token types, BOS/EOS/UNK ids), with a `llama` header and no tensors:
enough for llama.cpp's vocab_only load.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "sentencepiece_reference.json"

CONTROL_SYMBOLS = ("[INST]", "[/INST]", "<|end|>")  # Mistral / Phi-3 style control tokens
USER_SYMBOLS = ("<tool>",)

# The corpus the golden ids cover: whitespace runs, digits, emoji, CJK, code, special tokens.
CORPUS = (
    "Hello world",
    " Hello world",
    "Hello  world",
    "   leading spaces",
    "trailing spaces   ",
    "\t\ttabs\tand\ttext",
    "line one\nline two\n\nline four\n",
    "\n\n\n",
    " ",
    "  ",
    "",
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "1234567890",
    "3.14159 and 2.71828",
    "In 2024-01-31 we sold 1,234,567 units for $89.99.",
    "phone: +1 (555) 010-9999",
    "👋🏽 hi",
    "👨\u200d👩\u200d👧\u200d👦 family",
    "🤖🤖🤖 robots!",
    "🇫🇷 ❤️ ½ ① ℃",
    "你好，世界",
    "日本語のテキストを分割します。",
    "한국어 문장입니다",
    "mixed 中文 and English",
    "café naïve résumé",
    "Ünïcödé straße",
    "Привет, мир",
    "مرحبا بالعالم",
    "def square(x):\n    return x ** 2\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    '<div class="main">&nbsp;</div>',
    "SELECT * FROM users WHERE id = 42;",
    "x\u00a0y\u2003z\u3000w\u200bv",
    "<s>hello</s>",
    "[INST] What is the capital of France? [/INST]",
    "[INST]no spaces[/INST]answer",
    "a<tool>b",
    "<tool> spaced <tool>",
    "<|end|>\nnext",
    "<unk>",
    "<s>",
    "</s></s>",
    "<0x41> is not a byte token in text",
    "▁already▁escaped",
    "Tab\tnewline\r\nCRLF",
)


_WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by one had "
    "not but what all were when we there can an your which their said if do will each about how "
    "up out them then she many some so these would other into has more her two like him see time "
    "could no make than first been its who now people my made over did down only way find use may "
    "water long little very after words called just where most know capital France Paris question "
    "answer model token server request world hello quick brown fox lazy "
)


def training_corpus(n_lines: int = 4000, seed: int = 0) -> list[str]:
    """Generated text to train the vocabulary on (deterministic)."""
    rng = random.Random(seed)
    words = _WORDS.split()
    code = ("def", "return", "for", "int", "i", "=", "+=", "(", ")", "{", "}", "[", "]", ";", "x", "**")
    extra = ("你好", "世界", "日本語", "テキスト", "한국어", "café", "straße", "Привет", "мир", "123", "2024")
    lines = []
    for _ in range(n_lines):
        kind = rng.random()
        pool = words if kind < 0.75 else code if kind < 0.9 else extra
        sep = " " if kind < 0.9 or rng.random() < 0.5 else ""
        line = sep.join(rng.choice(pool) for _ in range(rng.randint(3, 14)))
        if rng.random() < 0.3:
            line = "    " + line
        lines.append(line)
    return lines


def fuzz_corpus(n: int, seed: int) -> list[str]:
    """Random strings over the characters SentencePiece merging cares about."""
    alphabet = "abcXYZ019 \t\n\r'.,!?-_()[]{}<>|$+=\"\\/é́ßÆ你好世界ひらがな한글مرحبا½\u00a0\u3000😀👍🏽▁"
    pieces = ["<s>", "</s>", "[INST]", "[/INST]", "<tool>", "<|end|>", "   ", "\n\n", "the", " world"]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [
            rng.choice(pieces) if rng.random() < 0.1 else rng.choice(alphabet)
            for _ in range(rng.randint(1, 40))
        ]
        out.append("".join(parts))
    return out


def load_golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


def tokenizer_metadata(vocab: dict[str, Any], add_space_prefix: bool | None = None) -> dict[str, Any]:
    """The GGUF tokenizer keys for the stored vocabulary, as plain values (what the engine reads)."""
    meta: dict[str, Any] = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": vocab["tokens"],
        "tokenizer.ggml.scores": vocab["scores"],
        "tokenizer.ggml.token_type": vocab["types"],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
    }
    if add_space_prefix is not None:
        meta["tokenizer.ggml.add_space_prefix"] = add_space_prefix
    return meta


def add_spm_tokenizer(writer: Any, vocab: dict[str, Any], add_space_prefix: bool | None = None) -> None:
    """Write the vocabulary's tokenizer keys into a GGUFWriter (convert_hf_to_gguf's way)."""
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocab["tokens"])
    writer.add_token_scores(vocab["scores"])
    writer.add_token_types(vocab["types"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    if add_space_prefix is not None:
        writer.add_add_space_prefix(add_space_prefix)


def write_vocab_gguf(path: Path, vocab: dict[str, Any], add_space_prefix: bool | None = None) -> Path:
    """A tensor-less `llama` GGUF with this vocabulary: enough for llama.cpp's vocab_only."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(512)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(vocab["tokens"]))
    add_spm_tokenizer(writer, vocab, add_space_prefix)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
