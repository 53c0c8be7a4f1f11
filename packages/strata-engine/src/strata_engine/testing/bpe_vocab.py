"""Small byte-level BPE vocabularies for comparing pre-tokenizers with llama.cpp, generated
(trained on a varied corpus) so that no model file is needed: `byte_level_vocab` gives the
tokenizer metadata, `write_vocab_gguf` a tensor-less `llama` GGUF with it for llama.cpp's
vocab_only load, `TEXTS` and `fuzz_corpus` what to tokenize; `gemma4_vocab` a hand-made
vocabulary of Gemma 4's kind.

The merges are learned from the corpus split into words by a coarse rule and cut into short
chunks anywhere, so that they join letters, digits, marks, punctuation, spaces and newlines
within and across what each pre-tokenizer keeps apart (a split in the wrong place changes the
ids); a few whole words are added to the vocabulary without a merge that builds them (what
`ignore_merges` pre-tokenizers take whole).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from strata_engine.testing.tiny_models import byte_symbols

BYTES = byte_symbols()  # GPT-2's byte -> printable character table, in byte order

_CORPUS_WORDS = (
    "the of and to in is that it was for on are as with his they at be this from have or by one "
    "Hello World HELLO hello world HTTPServer iPhone McDonald ÄPFEL Äpfel apfel straße Straße "
    "café naïve résumé Ünïcödé cafe\u0301 nai\u0308ve A\u0308PFEL e\u0301\u0301 ΑΒΓ αβγ Привет мир ПРИВЕТ Ճ ճ Ǆ ǅ ǆ ﬀ ＡＢＣ ａｂｃ "
    "you'll YOU'LL we're WE'RE it's IT'S I'm I'M they've they'd can't don't "
    "你好 世界 日本語 テキスト 한국어 مرحبا שלום नमस्ते ก๊ก "
    "0 1 12 123 1234 12345 2024 3.14 1,234,567 ١٢٣ ½ ① "
    "... !!! ??? --- === :: ;; // /* */ -> => <= >= != == && || ## $$ %% ^^ ~~ `` "
    "( ) [ ] { } < > | \\ / @ # $ % ^ & * - _ + = ~ ` ' \" , . ; : ! ? "
    "！ ？ 。 ， 、 「 」 ‘ ’ “ ” — – … · • "
    "😀 👍🏽 🇫🇷 ❤️ 👨‍👩‍👧‍👦 🤖 "
)


def _training_text(n_lines: int, seed: int) -> str:
    rng = random.Random(seed)
    words = _CORPUS_WORDS.split()
    seps = [" ", " ", " ", "  ", "\n", "\n\n", "\t", " \n", "\r\n", "", "/\n", "\u3000", "\u00a0"]
    lines = []
    for _ in range(n_lines):
        lines.append("".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(2, 12))))
    return "".join(lines)


# Coarse words for training: a space may lead letters, digits or punctuation; whitespace runs
_TRAIN_SPLIT = re.compile(r" ?[^\W\d_]+| ?\d+| ?[^\w\s]+|\s+")


def _train(text: str, n_merges: int, seed: int) -> list[tuple[str, str]]:
    """Byte-level BPE merges, most frequent pair first (ties: the larger pair), learned from
    coarse words and from short chunks cut anywhere (merges across what a regex may split)."""
    rng = random.Random(seed)
    chunks, pos = [], 0
    while pos < len(text):
        n = rng.randint(2, 6)
        chunks.append(text[pos : pos + n])
        pos += n
    counts = Counter(_TRAIN_SPLIT.findall(text)) + Counter(chunks)
    words = [[BYTES[b] for b in w.encode("utf-8")] for w in counts]
    freq = list(counts.values())
    pairs: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], set[int]] = {}  # pair -> the words holding it
    for w, symbols in enumerate(words):
        for pair in itertools.pairwise(symbols):
            pairs[pair] += freq[w]
            where.setdefault(pair, set()).add(w)
    merges = []
    for _ in range(n_merges):
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        joined = best[0] + best[1]
        for w in where.pop(best, ()):
            symbols = words[w]
            for pair in itertools.pairwise(symbols):  # the word's pairs out ...
                pairs[pair] -= freq[w]
                if pairs[pair] <= 0:
                    del pairs[pair]
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            words[w] = out
            for pair in itertools.pairwise(out):  # ... and its new pairs in
                pairs[pair] += freq[w]
                where.setdefault(pair, set()).add(w)
    return merges


def _mapped(text: str) -> str:
    return "".join(BYTES[b] for b in text.encode("utf-8"))


# whole words in the vocabulary that no merge builds (ignore_merges takes them whole)
UNMERGED_WORDS = (" Strata", "Tokenizer", " 4242", "ÄPFEL", " 'll")
CONTROL_TOKENS = ("<s>", "</s>", "[INST]", "[/INST]", "<|return|>", "<|call|>", "<|end|>", "<|start|>")
USER_TOKENS = ("<tool>", "<|channel|>", "<|message|>")


def byte_level_vocab(pre: str, n_merges: int = 500, seed: int = 0) -> dict[str, Any]:
    """Tokenizer metadata (plain values) for a trained byte-level BPE vocabulary."""
    merges = _train(_training_text(1500, seed), n_merges, seed)
    tokens = list(BYTES)
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            tokens.append(a + b)
            seen.add(a + b)
    for word in UNMERGED_WORDS:
        if _mapped(word) not in seen:
            tokens.append(_mapped(word))
            seen.add(_mapped(word))
    types = [1] * len(tokens) + [3] * len(CONTROL_TOKENS) + [4] * len(USER_TOKENS)
    tokens += [*CONTROL_TOKENS, *USER_TOKENS]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": [f"{a} {b}" for a, b in merges],
        "tokenizer.ggml.bos_token_id": tokens.index("<s>"),
        "tokenizer.ggml.eos_token_id": tokens.index("</s>"),
    }


def gemma4_vocab() -> dict[str, Any]:
    """A hand-made Gemma 4 style vocabulary (`gemma4` tokenizer model): specials, the 256
    `<0xNN>` byte tokens, "▁" for a space, a few merges (newlines too)."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<|tool_response>", "</s>"]
    pieces = ["a", "b", "x", "\u2581", "\u2581a", "ab", "\n", "\n\n", "é", "\u2581\u2581"]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + pieces
    return {
        "tokenizer.ggml.model": "gemma4",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3, 3, 3, 2, 3, 1] + [6] * 256 + [1] * len(pieces),
        "tokenizer.ggml.merges": ["\u2581 a", "a b", "\n \n", "\u2581 \u2581"],
        "tokenizer.ggml.bos_token_id": 2,
        "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.add_bos_token": False,
    }


def write_vocab_gguf(path: Path, meta: dict[str, Any]) -> Path:
    """A tensor-less `llama` GGUF with this tokenizer metadata: enough for llama.cpp's vocab_only."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(512)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(meta["tokenizer.ggml.tokens"]))
    writer.add_tokenizer_model(meta["tokenizer.ggml.model"])
    if "tokenizer.ggml.pre" in meta:
        writer.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
    writer.add_token_list(meta["tokenizer.ggml.tokens"])
    writer.add_token_types(meta["tokenizer.ggml.token_type"])
    writer.add_token_merges(meta["tokenizer.ggml.merges"])
    writer.add_bos_token_id(meta["tokenizer.ggml.bos_token_id"])
    writer.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
    if "tokenizer.ggml.add_bos_token" in meta:
        writer.add_add_bos_token(meta["tokenizer.ggml.add_bos_token"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# What the pre-tokenizers' regexes tell apart: case runs, contractions, digit groups,
# punctuation runs with newlines and slashes, whitespace runs of every kind, scripts, emoji.
TEXTS = (
    "Hello World",
    " Hello world!",
    "HTTPServer iPhone McDonald's ÄPFEL Äpfel aPPle",
    "ΑΒΓαβγ ПРИВЕТмир ǅungla ＡＢＣａｂｃ",
    "you'll YOU'LL we're WE'RE it's IT'S I'm they've they'd can't don't 's 'S",
    "x'll'd'S",
    "1234567890 12 123 1234 3.14 1,234,567 ١٢٣٤ ½①",
    "a1b22c333d4444",
    "... !!! ??? --- === :: ;; // /* */ -> => <= >= != == && ||",
    "path/to/file/\nnext/\n\n",
    "end.\n\n\nnew paragraph\r\n\r\nCRLF",
    "   leading and trailing   ",
    "tabs\t\tand \t mixed \n\t whitespace",
    "\n",
    "\n\n\n\n",
    " ",
    "   ",
    "x\u00a0y\u2003z\u3000w\u200bv\u1680u\u2028t\u0085s",
    "你好，世界！日本語のテキスト。한국어 문장",
    "mixed中文and English",
    "مرحبا بالعالم שלום עולם नमस्ते दुनिया ก๊ก",
    "e\u0301 e\u0301\u0301x a\u0308b \u0301start",
    "😀 👍🏽 🇫🇷 ❤️ 👨\u200d👩\u200d👧\u200d👦 🤖🤖🤖",
    "def f(x):\n    return x ** 2  # comment\n",
    '{"key": [1, 2, 3], "other": null}',
    "<s>[INST] question [/INST] answer</s>",
    "<|start|>assistant<|channel|>final<|message|>hi<|return|>",
    "a<tool>b <tool> c",
    " Strata Tokenizer 4242 ÄPFEL you 'll",
    "！？。，、「」‘’“”—–…·•",
    "\u3000\u3000indent　full width",
    "",
)


def fuzz_corpus(n: int, seed: int) -> list[str]:
    """Random strings over the character classes the regexes care about."""
    alphabet = (
        "abcxyzABCXYZ0123456789 \t\n\r'’.,!?-_()[]{}<>|/\\$+=^~`\"@#%&*:;é́ÄßæÆΣσПпЃǅ"
        "你好世界ひらがなカタ한글שלוםمرحبا١٢३①½\u00a0\u2003\u3000\u200b\u200d\u0085\u2028"
        "！？。，、“”😀🍕👍🏽🇫🇷❤️\u0301\u0308ﬀＡａ"
    )
    pieces = [
        *CONTROL_TOKENS, *USER_TOKENS, "'s", "'LL", "'re", "   ", "\n\n", "\r\n", "/\n", "123", "HTTP", "Äpfel",
    ]  # fmt: skip
    return random_texts(alphabet, pieces, n, seed)


def random_texts(alphabet: str, pieces: list[str], n: int, seed: int) -> list[str]:
    """`n` seeded strings of 1 to 40 parts, each a whole piece (8%) or one character of `alphabet`."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [
            rng.choice(pieces) if rng.random() < 0.08 else rng.choice(alphabet)
            for _ in range(rng.randint(1, 40))
        ]
        out.append("".join(parts))
    return out
