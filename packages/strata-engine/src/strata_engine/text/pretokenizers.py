"""Byte-level BPE pre-tokenizers: llama.cpp's regexes per `tokenizer.ggml.pre`, as the Rust
`tokenizers` library (Oniguruma) runs them.

llama.cpp (src/llama-vocab.cpp, `llm_tokenizer_bpe`) splits text by a sequence of regexes: each
one cuts every piece the previous ones left, keeping the text between matches as pieces too
(`Split(..., "isolated")` here). It runs them three ways, and each is matched here:

- the GPT-2, Llama 3, Qwen2 and Qwen3.5 regexes by hand-written code (unicode.cpp), equal to the
  regex with llama.cpp's Unicode tables: `\\s` is Unicode White_Space, as Oniguruma's;
- a regex with `\\p{...}` by `std::regex` over a "collapsed" text in which every non-ASCII code
  point stands for its category (letter, number, punctuation, mark, symbol, other, or
  whitespace): the same classes Oniguruma's `\\p{L}`, `\\p{N}`, ... give;
- any other regex by `std::wregex` over the code points, with non-ASCII whitespace replaced by
  U+000B first: a literal range that spans a whitespace code point (deepseek's CJK range
  U+0800-U+4E00 spans U+3000) does not match it there, so those code points are taken out of
  the range here (`_literal_class`). ECMAScript's `$` is the end of the piece: `\\z` here.

Oniguruma's Unicode data is a version newer than llama.cpp's tables: a code point assigned in
between (none in common text) is a letter here and "other" there.
"""

from __future__ import annotations

from dataclasses import dataclass

# llama.cpp's whitespace (unicode-data.cpp's unicode_set_whitespace: Unicode White_Space)
WHITESPACE = frozenset(
    (
        *range(0x09, 0x0E),
        0x20,
        0x85,
        0xA0,
        0x1680,
        *range(0x2000, 0x200B),
        0x2028,
        0x2029,
        0x202F,
        0x205F,
        0x3000,
    )
)


@dataclass(frozen=True)
class PreTokenizer:
    """What llama.cpp does for one `tokenizer.ggml.pre` value besides the tokenizer model."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a piece that is already a vocab entry stays whole
    add_bos: bool = False  # llama.cpp's default when the GGUF has no add_bos_token key
    # False: SentencePiece-style BPE (Gemma 4): " " becomes "▁", pieces are raw UTF-8 (no
    # GPT-2 byte mapping), a piece left unmerged and not in the vocabulary becomes <0xNN> tokens
    byte_level: bool = True


def _literal_class(ranges: str) -> str:
    """A `[...]` class of literal characters and ranges (as llama.cpp writes them), without
    the whitespace code points std::wregex never sees; written as \\x{...} escapes."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(ranges):
        lo = hi = ord(ranges[i])
        if i + 2 < len(ranges) and ranges[i + 1] == "-":
            hi = ord(ranges[i + 2])
            i += 3
        else:
            i += 1
        start = lo
        for cp in range(lo, hi + 1):  # split the span around whitespace code points
            if cp in WHITESPACE:
                if start < cp:
                    spans.append((start, cp - 1))
                start = cp + 1
        if start <= hi:
            spans.append((start, hi))
    parts = [f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in spans]
    return "[" + "".join(parts) + "]"


_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}" + _LLAMA3_TAIL
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}" + _LLAMA3_TAIL
# Qwen3.5: letter runs take combining marks too, and the punctuation run stops at them
_QWEN35 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")
_FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")

# Tekken and GPT-4o: llama.cpp's rewrite of the original Lu/Ll classes, "a letter that is not
# a-z" then "a letter that is not A-Z": every non-ASCII letter counts as both
_UPPER = r"(?:(?=\p{L})[^a-z])"
_LOWER = r"(?:(?=\p{L})[^A-Z])"
_TEKKEN = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?|\p{{N}}{{1,3}}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# DeepSeek's CJK run, and DeepSeek LLM's letter and punctuation runs (literal ranges, std::wregex)
_DEEPSEEK_CJK = _literal_class("\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff") + "+"
_DEEPSEEK_LLM_LETTERS = _literal_class(
    "A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
    "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf"
    "\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
    "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
    "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"
)
_DEEPSEEK_LLM_PUNCT = _literal_class("!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002")

_STARCODER_LIKE = PreTokenizer((r"\p{N}", _GPT2))
_LLAMA3_LIKE = PreTokenizer((_LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2_LIKE = PreTokenizer((_QWEN2,))
_GPT2_LIKE = PreTokenizer((_GPT2,))
_GPT4O_LIKE = PreTokenizer((_GPT4O,))

# tokenizer.ggml.pre -> pre-tokenizer, the names llama.cpp maps to each (llama_vocab::impl::load)
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": PreTokenizer(_DEFAULT),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
        _STARCODER_LIKE,
    ),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), _LLAMA3_LIKE),
    "dbrx": PreTokenizer((_LLAMA3,)),
    "smaug-bpe": PreTokenizer((_LLAMA3,)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"), _QWEN2_LIKE),
    "qwen35": PreTokenizer((_QWEN35,)),
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jina-es", "jina-de"), _GPT2_LIKE),
    "falcon": PreTokenizer(_FALCON),
    "deepseek-coder": PreTokenizer((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DEEPSEEK_CJK, r"\p{N}")),
    "deepseek-llm": PreTokenizer(
        (
            r"[\r\n]",
            r"\s?" + _DEEPSEEK_LLM_LETTERS + "+",
            r"\s?" + _DEEPSEEK_LLM_PUNCT + "+",
            r"\s+\z",
            _DEEPSEEK_CJK,
            r"\p{N}+",
        )
    ),
    "tekken": PreTokenizer((_TEKKEN,), ignore_merges=True, add_bos=True),
    **dict.fromkeys(("gpt-4o", "llama4"), _GPT4O_LIKE),
    # Gemma 4: no word splitting, only runs of newlines apart (they may be one token each)
    "gemma4": PreTokenizer((r"\n+",), byte_level=False),
}
