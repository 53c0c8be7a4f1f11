"""The model's tokenizer, rebuilt from GGUF metadata so that ids equal llama.cpp's.

A GGUF `gpt2` tokenizer is byte-level BPE: text is split by the pre-tokenizer's regexes
(chosen by `tokenizer.ggml.pre`), each piece is mapped byte by byte to printable characters
and merged by rank. We hand that to the Rust `tokenizers` library for speed and keep the
llama.cpp rules that differ from Hugging Face defaults: no Unicode normalisation, the
regex sequence per pre-tokenizer, special tokens split out before BPE, and llama.cpp's
end-of-generation heuristic.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tokenizers import AddedToken, Regex, pre_tokenizers
from tokenizers import Tokenizer as _RustTokenizer
from tokenizers.models import BPE

from .api import ModelLoadError

# GGUF `tokenizer.ggml.token_type` values.
TOKEN_NORMAL = 1
TOKEN_UNKNOWN = 2
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4
TOKEN_UNUSED = 5
TOKEN_BYTE = 6

# Pre-tokenizer regexes, as llama.cpp applies them (src/llama-vocab.cpp): each regex in a
# sequence splits every piece left by the previous one, keeping the text between matches.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}" + _LLAMA3_TAIL
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}" + _LLAMA3_TAIL
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")

# Texts longer than this are encoded by `encode_batch`, which (unlike `encode`) lets other
# Python threads run meanwhile: tokenizing a megabyte takes seconds.
LONG_TEXT = 10_000


@dataclass(frozen=True)
class _PreTokenizer:
    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a piece that is already a vocab entry stays whole
    add_bos: bool = False  # llama.cpp's default when the GGUF has no add_bos_token key


_STARCODER_LIKE = _PreTokenizer((r"\p{N}", _GPT2))
_LLAMA3_LIKE = _PreTokenizer((_LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2_LIKE = _PreTokenizer((_QWEN2,))
_GPT2_LIKE = _PreTokenizer((_GPT2,))

PRE_TOKENIZERS: dict[str, _PreTokenizer] = {
    "default": _PreTokenizer(_DEFAULT),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
        _STARCODER_LIKE,
    ),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), _LLAMA3_LIKE),
    "dbrx": _PreTokenizer((_LLAMA3,)),
    "smaug-bpe": _PreTokenizer((_LLAMA3,)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"), _QWEN2_LIKE),
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jina-es", "jina-de"), _GPT2_LIKE),
}

# Token texts llama.cpp treats as end-of-generation whatever the metadata says.
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "<|end_of_text|>",
        "<end_of_utterance>",
    }
)


def _byte_decoder() -> dict[str, int]:
    """The GPT-2 byte-level alphabet, inverted: printable character -> the byte it stands for.

    Printable Latin-1 bytes map to themselves; the other 68 bytes map, in order, to U+0100...
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(0x100 + extra)] = b
            extra += 1
    return table


_BYTE_DECODER = _byte_decoder()
# the same mapping for str.translate; the Latin-1 characters outside the alphabet become U+0100,
# which no Latin-1 encoding accepts, so a piece holding one takes the character-wise path
_TO_LATIN1 = {**{c: 0x100 for c in range(0x100)}, **{ord(ch): b for ch, b in _BYTE_DECODER.items()}}


def _piece_to_bytes(piece: str) -> bytes:
    """Undo the byte-level mapping; a character outside the alphabet keeps its UTF-8 bytes."""
    try:  # the whole piece in the alphabet (nearly every piece): one translation, one encoding
        return piece.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        pass
    out = bytearray()
    for ch in piece:
        b = _BYTE_DECODER.get(ch)
        if b is None:
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)


def _split_merges(merges: Sequence[str]) -> list[tuple[str, str]]:
    """GGUF merges "left right" as pairs, each split at the first space after its first
    character. Comprehensions, not a call per merge: a vocabulary has tens of thousands."""
    parts = [m.partition(" ") for m in merges]
    for i in [i for i, m in enumerate(merges) if m.startswith(" ")]:  # the left part is a space
        head, sep, tail = merges[i][1:].partition(" ")
        parts[i] = (" " + head, sep, tail)
    if not all(sep for _, sep, _ in parts):
        bad = next(m for m, (_, sep, _) in zip(merges, parts, strict=True) if not sep)
        raise ModelLoadError(f"bad BPE merge in GGUF metadata: {bad!r}")
    return [(left, right) for left, _, right in parts]


def _optional_id(meta: Mapping[str, Any], key: str, n_vocab: int) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    value = int(value)
    return value if 0 <= value < n_vocab else None


class IncrementalDecoder:
    """Turns a stream of ids into text pieces, holding back an incomplete UTF-8 tail.

    Bytes that can never become a valid character are replaced by U+FFFD (as a whole-text
    decode would); bytes that may still be completed by the next token are kept back.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """The text completed by this token (may be "" while a character is incomplete)."""
        if self._skip_special and self._tokenizer.is_special(token_id):
            return ""
        return self._utf8.decode(self._tokenizer.token_bytes(token_id))

    def flush(self) -> str:
        """End of stream: whatever is still held back, with broken bytes as U+FFFD."""
        return self._utf8.decode(b"", final=True)


class Tokenizer:
    """Byte-level BPE tokenizer with llama.cpp-equal ids; built once per model, then read-only."""

    def __init__(
        self,
        tokens: Sequence[str],
        merges: Sequence[str],
        token_types: Sequence[int] | None,
        pre: str,
        *,
        bos_id: int | None = None,
        eos_id: int | None = None,
        pad_id: int | None = None,
        extra_eog_ids: Sequence[int] = (),
        add_bos: bool | None = None,
        add_eos: bool = False,
    ) -> None:
        if pre not in PRE_TOKENIZERS:
            known = ", ".join(sorted(PRE_TOKENIZERS))
            raise ModelLoadError(f"unsupported pre-tokenizer {pre!r} (supported: {known})")
        self.pre = pre
        spec = PRE_TOKENIZERS[pre]
        self._pieces = list(tokens)
        self.vocab_size = len(self._pieces)
        vocab = {piece: i for i, piece in enumerate(self._pieces)}
        if len(vocab) != self.vocab_size:
            raise ModelLoadError("GGUF vocabulary has duplicate tokens")

        if token_types is None:
            types = [TOKEN_NORMAL] * self.vocab_size
        elif len(token_types) < self.vocab_size:
            raise ModelLoadError("GGUF tokenizer.ggml.token_type is shorter than the vocabulary")
        else:
            types = [int(t) for t in token_types[: self.vocab_size]]
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        eog = {i for i in (eos_id, *extra_eog_ids) if i is not None}
        for i, piece in enumerate(self._pieces):
            if piece in EOG_TEXTS:
                eog.add(i)
                if types[i] != TOKEN_CONTROL:  # llama.cpp promotes these to control tokens
                    types[i] = TOKEN_CONTROL
        self.eog_ids = frozenset(eog)
        self._types = types
        self.add_bos = spec.add_bos if add_bos is None else add_bos
        self.add_eos = add_eos
        if self.add_bos and bos_id is None:
            raise ModelLoadError("GGUF asks for a BOS token but has no tokenizer.ggml.bos_token_id")
        if self.add_eos and eos_id is None:
            raise ModelLoadError("GGUF asks for an EOS token but has no tokenizer.ggml.eos_token_id")

        # tokenizers panics on a merge whose parts or result are not in the vocabulary; such a
        # merge can never produce a token id, so it is left out.
        pairs = [(a, b) for a, b in _split_merges(merges) if a in vocab and b in vocab and a + b in vocab]
        self._bpe = BPE(vocab, pairs, ignore_merges=spec.ignore_merges)
        self._pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
        # Control and unknown tokens are split out only when parsing specials; user-defined
        # tokens always (llama.cpp's tokenizer_st_partition).
        self._special_texts = [
            p for p, t in zip(self._pieces, types, strict=True) if t in (TOKEN_CONTROL, TOKEN_UNKNOWN)
        ]
        self._user_texts = [p for p, t in zip(self._pieces, types, strict=True) if t == TOKEN_USER_DEFINED]
        self._token_bytes = [
            piece.encode("utf-8") if t != TOKEN_NORMAL and t != TOKEN_BYTE else _piece_to_bytes(piece)
            for piece, t in zip(self._pieces, types, strict=True)
        ]
        self._with_specials = self._rust_tokenizer(self._special_texts + self._user_texts)

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> Tokenizer:
        """Build from GGUF key/values (plain Python values, as gguf-py's `contents()` gives)."""
        model = meta.get("tokenizer.ggml.model")
        if model == "llama":
            from .spm_tokenizer import SentencePieceTokenizer  # a subclass: imported late

            return SentencePieceTokenizer.from_metadata(meta)
        if model != "gpt2":
            raise ModelLoadError(
                f"unsupported tokenizer model {model!r}: supported are 'gpt2' (byte-level BPE) "
                "and 'llama' (SentencePiece)"
            )
        tokens = meta.get("tokenizer.ggml.tokens")
        merges = meta.get("tokenizer.ggml.merges")
        if not tokens or merges is None:
            raise ModelLoadError("GGUF has no tokenizer.ggml.tokens / tokenizer.ggml.merges")
        n = len(tokens)
        add_bos = meta.get("tokenizer.ggml.add_bos_token")
        return cls(
            tokens,
            merges,
            meta.get("tokenizer.ggml.token_type"),
            meta.get("tokenizer.ggml.pre") or "default",
            bos_id=_optional_id(meta, "tokenizer.ggml.bos_token_id", n),
            eos_id=_optional_id(meta, "tokenizer.ggml.eos_token_id", n),
            pad_id=_optional_id(meta, "tokenizer.ggml.padding_token_id", n),
            extra_eog_ids=[
                i
                for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
                if (i := _optional_id(meta, key, n)) is not None
            ],
            add_bos=None if add_bos is None else bool(add_bos),
            add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        )

    def _rust_tokenizer(self, split_texts: list[str]) -> _RustTokenizer:
        tok = _RustTokenizer(self._bpe)  # the BPE model is shared, not copied
        tok.pre_tokenizer = self._pre_tokenizer
        if split_texts:
            tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in split_texts])
        return tok

    @cached_property
    def _without_specials(self) -> _RustTokenizer:
        # Rarely used (parse_special=False), so built on first use.
        return self._rust_tokenizer(self._user_texts)

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text -> ids. `add_special`: BOS/EOS as the model wants; `parse_special`: control
        token texts such as "<|im_start|>" become their single id instead of plain text."""
        tok = self._with_specials if parse_special else self._without_specials
        if len(text) > LONG_TEXT:  # `encode_batch` releases the GIL: a server thread keeps running
            ids = tok.encode_batch([text], add_special_tokens=False)[0].ids
        else:
            ids = tok.encode(text, add_special_tokens=False).ids if text else []
        if add_special and self.add_bos and self.bos_id is not None:  # __init__ refuses add_bos without one
            ids.insert(0, self.bos_id)
        if add_special and self.add_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    def encode_exact(self, text: str) -> list[int]:
        """Ids whose bytes are exactly `text`: no BOS/EOS, control-token texts as plain text
        (what a constrained-decoding library needs to tokenize forced text)."""
        return self.encode(text, add_special=False, parse_special=False)

    def split_words(self, text: str) -> list[str]:
        """The pieces the pre-tokenizer cuts plain text into (BPE never merges across them);
        for checking a pre-tokenizer's regexes."""
        pieces = self._pre_tokenizer.pre_tokenize_str(text)
        return [_piece_to_bytes(piece).decode("utf-8", errors="replace") for piece, _ in pieces]

    def is_special(self, token_id: int) -> bool:
        """Control / unknown tokens: the ones a `skip_special` decode leaves out."""
        return self._types[token_id] in (TOKEN_CONTROL, TOKEN_UNKNOWN)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes this token stands for (a control token: its text)."""
        return self._token_bytes[token_id]

    def token_piece(self, token_id: int) -> str:
        """The vocabulary entry as stored, e.g. "Ġthe"."""
        return self._pieces[token_id]

    def token_text(self, token_id: int) -> str:
        """Display text for logprob listings; `bytes:\\xNN...` when not valid UTF-8 alone."""
        raw = self._token_bytes[token_id]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Ids -> text; bytes that are not valid UTF-8 become U+FFFD."""
        parts = (self._token_bytes[i] for i in ids if not (skip_special and self.is_special(i)))
        return b"".join(parts).decode("utf-8", errors="replace")

    def new_decoder(self, skip_special: bool = False) -> IncrementalDecoder:
        """A fresh streaming decoder (one per sequence)."""
        return IncrementalDecoder(self, skip_special=skip_special)
