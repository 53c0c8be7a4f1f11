"""The model's tokenizer, rebuilt from GGUF metadata so that ids equal llama.cpp's.

A GGUF `gpt2` tokenizer is byte-level BPE: text is split by the pre-tokenizer's regexes
(chosen by `tokenizer.ggml.pre`, see pretokenizers.py), each piece is mapped byte by byte to
printable characters and merged by rank. We hand that to the Rust `tokenizers` library for
speed and keep the llama.cpp rules that differ from Hugging Face defaults: no Unicode
normalisation, the regex sequence per pre-tokenizer, special tokens split out before BPE, and
llama.cpp's end-of-generation heuristic.

A GGUF `gemma4` tokenizer (Gemma 4) is BPE of another kind, which llama.cpp runs through the
same code: no byte mapping, " " written as "▁", only runs of newlines split apart, and a piece
that no merge makes a vocabulary entry written as `<0xNN>` byte tokens.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from strata_engine.api import ModelLoadError
from strata_engine.text.packed_bytes import PackedBytes
from strata_engine.text.pretokenizers import PRE_TOKENIZERS, PreTokenizer

if TYPE_CHECKING:  # imported where a BPE vocabulary is built: a SentencePiece model never loads it (4 MB)
    from tokenizers import Tokenizer as _RustTokenizer

__all__ = ["BPE_MODELS", "EOG_TEXTS", "PRE_TOKENIZERS", "IncrementalDecoder", "PreTokenizer", "Tokenizer"]

# GGUF `tokenizer.ggml.token_type` values.
TOKEN_NORMAL = 1
TOKEN_UNKNOWN = 2
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4
TOKEN_UNUSED = 5
TOKEN_BYTE = 6

# Texts longer than this are encoded by `encode_batch`, which (unlike `encode`) lets other
# Python threads run meanwhile: tokenizing a megabyte takes seconds.
LONG_TEXT = 10_000

BPE_MODELS = ("gpt2", "gemma4")  # the `tokenizer.ggml.model` values this class builds

SPACE = "\u2581"  # "▁", SentencePiece's visible space (Gemma 4's BPE vocabulary writes it too)

# Token texts llama.cpp (llama_vocab::impl::load) treats as end-of-generation whatever the
# metadata says, promoting each to a control token.
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",  # gpt-oss
        "<|call|>",  # gpt-oss
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",  # Gemma 4
        "<turn|>",  # Gemma 4
        "<|tool_response>",  # Gemma 4
        "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek
        "[e~[",
    }
)
# Fill-in-the-middle tokens llama.cpp finds by text when the metadata names none (the first
# found becomes a control token); the pad, repo and file-separator ones also end generation.
_FIM_TEXTS: dict[str, tuple[str, ...]] = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>", "<PRE>",
                "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>", "<SUF>",
                "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>", "<MID>",
                "\u2581<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}  # fmt: skip
# the metadata keys naming them (a deprecated name, when present, wins as in llama.cpp)
_FIM_KEYS = {
    "fim_pre": ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"),
    "fim_suf": ("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"),
    "fim_mid": ("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"),
    "fim_pad": ("tokenizer.ggml.fim_pad_token_id",),
    "fim_rep": ("tokenizer.ggml.fim_rep_token_id",),
    "fim_sep": ("tokenizer.ggml.fim_sep_token_id",),
}
# gpt-oss's tokens that llama.cpp always renders: user-defined, split out even from plain text
_USER_DEFINED_TEXTS = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


def special_ids(meta: Mapping[str, Any], n_vocab: int) -> dict[str, int | None]:
    """The end-of-turn, end-of-message and fill-in-the-middle ids the metadata names (None
    where it names none, or one out of range: llama.cpp ignores those)."""
    out: dict[str, int | None] = {
        "eot": _optional_id(meta, "tokenizer.ggml.eot_token_id", n_vocab),
        "eom": _optional_id(meta, "tokenizer.ggml.eom_token_id", n_vocab),
    }
    for name, keys in _FIM_KEYS.items():
        ids = [_optional_id(meta, key, n_vocab) for key in keys]
        out[name] = next((i for i in reversed(ids) if i is not None), None)
    return out


def mark_special_tokens(
    pieces: Sequence[str], types: list[int], ids: Mapping[str, int | None], text_to_id: Mapping[str, int]
) -> frozenset[int]:
    """llama.cpp's load-time rules on token types, applied to `types` in place; returns the
    end-of-generation ids. `ids`: eos, eot, eom and the fim_* ids from the metadata;
    `text_to_id`: the vocabulary (a repeated text: its last id, as llama.cpp's token_to_id).

    Tokens with an EOG or fill-in-the-middle text become control tokens (split out only when
    parsing specials), gpt-oss's channel tokens user-defined, and so on, as llama_vocab does.
    Where several tokens match one fill-in-the-middle role llama.cpp takes the first in its hash
    map's order; the lowest id here.
    """
    found = {name: ids.get(name) for name in _FIM_TEXTS}
    for name, texts in _FIM_TEXTS.items():
        if found[name] is None:
            matches = [text_to_id[t] for t in texts if t in text_to_id]
            if matches:
                found[name] = min(matches)
                types[min(matches)] = TOKEN_CONTROL
    eog = {i for name in ("fim_pad", "fim_rep", "fim_sep") if (i := found[name]) is not None}
    for text in EOG_TEXTS:
        if (i := text_to_id.get(text)) is not None:
            eog.add(i)
            types[i] = TOKEN_CONTROL
    for text in _USER_DEFINED_TEXTS:
        if (i := text_to_id.get(text)) is not None:
            types[i] = TOKEN_USER_DEFINED
    eog.update(i for name in ("eos", "eot", "eom") if (i := ids.get(name)) is not None)
    eog_texts = {pieces[i]: i for i in eog}
    # gpt-oss (and solar-open): "<|end|>" ends a message, not the generation
    end = eog_texts.get("<|end|>")
    has_call = "<|call|>" in eog_texts or "<|calls|>" in eog_texts
    if end is not None and has_call and ("<|return|>" in eog_texts or "<|flush|>" in eog_texts):
        eog.discard(end)
        types[end] = TOKEN_USER_DEFINED
    # Gemma 4 (and PLaMo): "</s>" is a plain token
    s = eog_texts.get("</s>")
    if s is not None and ("<|tool_response>" in eog_texts or "<|plamo:eos|>" in eog_texts):
        eog.discard(s)
        types[s] = TOKEN_NORMAL
    return frozenset(eog)


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


def _spm_piece_bytes(piece: str, ttype: int) -> bytes:
    """What a SentencePiece-style token stands for (llama.cpp's token_to_piece): "▁" as a space,
    `<0xNN>` as its byte, control / user-defined / unknown tokens as their text."""
    if ttype == TOKEN_BYTE and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    if ttype in (TOKEN_NORMAL, TOKEN_BYTE):
        return piece.replace(SPACE, " ").encode("utf-8")
    return piece.encode("utf-8")


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
    """BPE tokenizer with llama.cpp-equal ids; built once per model, then read-only."""

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
        special_ids: Mapping[str, int | None] | None = None,
    ) -> None:
        if pre not in PRE_TOKENIZERS:
            known = ", ".join(sorted(PRE_TOKENIZERS))
            raise ModelLoadError(f"unsupported pre-tokenizer {pre!r} (supported: {known})")
        self.pre = pre
        spec = PRE_TOKENIZERS[pre]
        self._byte_level = spec.byte_level
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
        ids = dict(special_ids or {})
        ids["eos"] = eos_id
        self.eog_ids = mark_special_tokens(self._pieces, types, ids, vocab) | frozenset(extra_eog_ids)
        self._types = types
        self.add_bos = spec.add_bos if add_bos is None else add_bos
        if pre == "gemma4":
            self.add_bos = True  # llama.cpp overrides the metadata for Gemma 4
        self.add_eos = add_eos
        if self.add_bos and bos_id is None:
            raise ModelLoadError("GGUF asks for a BOS token but has no tokenizer.ggml.bos_token_id")
        if self.add_eos and eos_id is None:
            raise ModelLoadError("GGUF asks for an EOS token but has no tokenizer.ggml.eos_token_id")

        # tokenizers panics on a merge whose parts or result are not in the vocabulary; such a
        # merge can never produce a token id, so it is left out.
        pairs = [(a, b) for a, b in _split_merges(merges) if a in vocab and b in vocab and a + b in vocab]
        from tokenizers import Regex, normalizers, pre_tokenizers
        from tokenizers.models import BPE

        self._bpe = BPE(vocab, pairs, ignore_merges=spec.ignore_merges, byte_fallback=not spec.byte_level)
        splits: list[pre_tokenizers.PreTokenizer] = [
            pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes
        ]
        if spec.byte_level:
            splits.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
            self._normalizer = None
            self._token_bytes: Sequence[bytes] = PackedBytes(
                piece.encode("utf-8") if t != TOKEN_NORMAL and t != TOKEN_BYTE else _piece_to_bytes(piece)
                for piece, t in zip(self._pieces, types, strict=True)
            )
        else:
            self._normalizer = normalizers.Replace(" ", SPACE)
            self._token_bytes = PackedBytes(
                piece.replace(SPACE, " ").encode("utf-8") if t == TOKEN_NORMAL else _spm_piece_bytes(piece, t)
                for piece, t in zip(self._pieces, types, strict=True)
            )
        self._pre_tokenizer = pre_tokenizers.Sequence(splits)
        # Control and unknown tokens are split out only when parsing specials; user-defined
        # tokens always (llama.cpp's tokenizer_st_partition).
        self._special_texts = [
            p for p, t in zip(self._pieces, types, strict=True) if t in (TOKEN_CONTROL, TOKEN_UNKNOWN)
        ]
        self._user_texts = [p for p, t in zip(self._pieces, types, strict=True) if t == TOKEN_USER_DEFINED]
        self._with_specials = self._rust_tokenizer(self._special_texts + self._user_texts)
        if not spec.byte_level:
            self._check_newline_runs(vocab)

    def _check_newline_runs(self, vocab: Mapping[str, int]) -> None:
        """llama.cpp takes a run of newlines that is a vocabulary entry as that one token
        (Gemma 4), where the Rust BPE merges it; the two agree when the merges build every such
        entry, as Gemma 4's do. A vocabulary whose merges do not is refused, not tokenized
        otherwise than llama.cpp does."""
        from tokenizers import Tokenizer as _RustTokenizer

        bpe_only = _RustTokenizer(self._bpe)
        for piece, i in vocab.items():
            if piece and piece.count("\n") == len(piece):
                got = bpe_only.encode(piece, add_special_tokens=False).ids
                if got != [i]:
                    raise ModelLoadError(
                        f"the vocabulary's merges do not build its newline token {i} ({len(piece)} newlines) "
                        "as llama.cpp's Gemma 4 tokenizer takes it: unsupported"
                    )

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> Tokenizer:
        """Build a BPE vocabulary (`gpt2`, `gemma4`) from GGUF key/values (plain Python values,
        as gguf-py's `contents()` gives); `load_tokenizer` picks the class for any model."""
        model = meta.get("tokenizer.ggml.model")
        if model not in BPE_MODELS:
            raise ModelLoadError(f"tokenizer model {model!r} is not BPE (see text.load.load_tokenizer)")
        tokens = meta.get("tokenizer.ggml.tokens")
        merges = meta.get("tokenizer.ggml.merges")
        if not tokens or merges is None:
            raise ModelLoadError("GGUF has no tokenizer.ggml.tokens / tokenizer.ggml.merges")
        n = len(tokens)
        add_bos = meta.get("tokenizer.ggml.add_bos_token")
        # llama.cpp ignores tokenizer.ggml.pre for a gemma4 vocabulary
        pre = "gemma4" if model == "gemma4" else meta.get("tokenizer.ggml.pre") or "default"
        return cls(
            tokens,
            merges,
            meta.get("tokenizer.ggml.token_type"),
            pre,
            bos_id=_optional_id(meta, "tokenizer.ggml.bos_token_id", n),
            eos_id=_optional_id(meta, "tokenizer.ggml.eos_token_id", n),
            pad_id=_optional_id(meta, "tokenizer.ggml.padding_token_id", n),
            add_bos=None if add_bos is None else bool(add_bos),
            add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
            special_ids=special_ids(meta, n),
        )

    def _rust_tokenizer(self, split_texts: list[str]) -> _RustTokenizer:
        from tokenizers import AddedToken
        from tokenizers import Tokenizer as _RustTokenizer

        tok = _RustTokenizer(self._bpe)  # the BPE model is shared, not copied
        tok.pre_tokenizer = self._pre_tokenizer
        if self._normalizer is not None:  # applied after the split texts are taken out
            tok.normalizer = self._normalizer
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
        if not self._byte_level:
            return [piece for piece, _ in pieces]
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
