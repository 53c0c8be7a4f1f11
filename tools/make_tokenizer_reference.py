"""Write llama.cpp's token ids for a test corpus: the golden files of the tokenizer tests.

    python tools/make_tokenizer_reference.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]

Needs `llama-cpp-python` (the reference implementation) and `gguf`. For the SmolLM2 model it
records ids as the model file says (pre-tokenizer `smollm`). For the `llama-bpe` (Llama-3) and
`qwen2` pre-tokenizers it writes a vocabulary-only GGUF that is SmolLM2's with
`tokenizer.ggml.pre` changed and a few tokens added (`extra_tokens` / `extra_merges` in the
output), so llama.cpp itself gives the ids for those regexes too.
Each case holds the ids with special-token parsing on (`ids`) and off (`ids_plain`), both with
`add_special` (BOS/EOS only where the model asks for them).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import gguf
import llama_cpp

DEFAULT_MODEL = Path.home() / ".cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT_DIR = Path(__file__).resolve().parents[1] / "packages/strata-engine/tests/text/data"

# Variants: output name -> (tokenizer.ggml.pre, extra vocabulary entries, extra merges).
# SmolLM2's vocabulary has no multi-digit tokens and no upper-case contractions, so the
# Llama-3 / Qwen2 variants add a few (appended, as the last ids and lowest-ranked merges) to
# make digit grouping, case-insensitive contractions and `ignore_merges` visible in the ids:
# " zqxj" is a vocabulary entry that no merge produces.
_EXTRA_TOKENS = ["12", "123", "45", "456", "78", "789", "'L", "'LL", "'T", "Ġzqxj"]
_EXTRA_MERGES = ["1 2", "12 3", "4 5", "45 6", "7 8", "78 9", "' L", "'L L", "' T"]
VARIANTS: dict[str, tuple[str | None, list[str], list[str]]] = {
    "smollm2": (None, [], []),
    "smollm2_llama-bpe": ("llama-bpe", _EXTRA_TOKENS, _EXTRA_MERGES),
    "smollm2_qwen2": ("qwen2", _EXTRA_TOKENS, _EXTRA_MERGES),
}

CORPUS: list[str] = [
    # plain prose, contractions (the GPT-2 regex is case-sensitive, Llama-3's is not)
    "Hello world",
    " Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've done what we'd said, isn't it?",
    "I'M SURE YOU'LL SEE THEY'VE DONE WHAT WE'D SAID, ISN'T IT?",
    "rock'n'roll 'quoted' ''double''",
    "YOU'LL DON'T, you'll don't",
    " zqxj zqxjv zqxj",
    # numbers: single digits vs groups of three vs runs
    "1",
    "12",
    "123",
    "1234",
    "12345678901234567890",
    "pi is 3.14159265358979, e is 2.71828",
    "Call 555-0199 or +1 (800) 123-4567 before 2024-12-31T23:59:59Z.",
    "x1y22z333w4444 v55555",
    "123456789 1234567 78 4567",
    "١٢٣ ४५६ ①②③ ½ Ⅻ",  # non-ASCII digits and numerals
    # code
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "if x == 1:\n\tprint('tab-indented')\n\t\treturn None",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    '<div class="box">&amp; &lt;tag&gt;</div>',
    "#!/usr/bin/env bash\necho \"$HOME\" | grep -E '^/root' && exit 0",
    # unicode: CJK, accents, combining marks, RTL, other scripts
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장도 있습니다.",
    "Café naïve résumé façade Ångström",
    "Cafe\u0301 nai\u0308ve (combining marks)",
    "שלום עולם",
    "مرحبا بالعالم",
    "Привет, мир! Ελληνικά",
    "ẞtraße ǅ ﬁ ﬂ",
    # emoji, ZWJ sequences, flags, skin tones, variation selectors
    "😀",
    "I love 🍕 and 🎉!",
    "👨‍👩‍👧‍👦 family",
    "👍🏽👋🏿 🏳️‍🌈 🇫🇷🇯🇵",
    "❤️ ☺︎ ✔️",
    # whitespace
    " ",
    "   ",
    "\n",
    "\n\n\n",
    "\t",
    "a  b   c    d",
    "trailing spaces   ",
    "   leading spaces",
    "line one\nline two\r\nline three\rend",
    " \n \n\t\n  x",
    "word\u00a0nbsp\u2003emspace\u3000ideographic",
    # chat markup and special tokens
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>",
    "text<|im_end|>more<|endoftext|>",
    "<|im_start|><|im_start|>",
    " <|im_start|> spaced <|im_end|> ",
    "<|im_start",
    "<repo_name>strata<file_sep>main.py",
    # odd bits
    ".",
    "...!!!???",
    "a",
    "\u200b\u200d",
    "\ufeffBOM at start",
    "Ǆemo\u0000null\u0007bell",
]


def _write_variant(src: Path, dst: Path, pre: str, tokens: list[str], merges: list[str]) -> None:
    """A tensor-free GGUF: `src`'s metadata with another pre-tokenizer and extra vocabulary."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    meta = {k: f.contents() for k, f in reader.fields.items()}
    replaced = {
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": meta["tokenizer.ggml.tokens"] + tokens,
        "tokenizer.ggml.token_type": meta["tokenizer.ggml.token_type"] + [1] * len(tokens),
        "tokenizer.ggml.merges": meta["tokenizer.ggml.merges"] + merges,
        f"{arch}.vocab_size": len(meta["tokenizer.ggml.tokens"]) + len(tokens),
    }
    writer = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, replaced.get(key, meta[key]), vtype, sub_type=sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _reference(model_path: Path) -> tuple[list[dict], str]:
    llm = llama_cpp.Llama(str(model_path), vocab_only=True, verbose=False)
    cases = []
    for text in CORPUS:
        raw = text.encode("utf-8")
        cases.append(
            {
                "text": text,
                "ids": llm.tokenize(raw, add_bos=True, special=True),
                "ids_plain": llm.tokenize(raw, add_bos=True, special=False),
            }
        )
    pre = gguf.GGUFReader(model_path).fields["tokenizer.ggml.pre"].contents()
    return cases, pre


def main() -> None:
    model = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MODEL
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (pre, tokens, merges) in VARIANTS.items():
            path = model
            if pre is not None:
                path = Path(tmp) / f"{name}.gguf"
                _write_variant(model, path, pre, tokens, merges)
            cases, file_pre = _reference(path)
            out = OUT_DIR / f"tokenizer_reference_{name}.json"
            doc = {
                "source": f"llama-cpp-python {llama_cpp.__version__}, vocab_only",
                "model": model.name,
                "pre": file_pre,
                "extra_tokens": tokens,
                "extra_merges": merges,
                "add_special": True,
                "cases": cases,
            }
            out.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            print(f"{out}: {len(cases)} cases, pre={file_pre}")


if __name__ == "__main__":
    main()
