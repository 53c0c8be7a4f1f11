"""SentencePiece (`tokenizer.ggml.model = "llama"`) vocabularies, tokenized as llama.cpp does.

Llama 2, TinyLlama, Mistral, Gemma and Phi-3 GGUFs carry a SentencePiece vocabulary: pieces
with scores, `<0xNN>` byte tokens and "▁" for a space. llama.cpp does not run SentencePiece
itself; it applies its own rules (`llm_tokenizer_spm` in llama-vocab.cpp), and those are what
decide the ids a model was evaluated with, so they are rebuilt here step by step:

- special tokens are split out first (longest text first), control/unknown ones only when
  parsing specials, user-defined ones always;
- each raw-text fragment gets a leading space when `add_space_prefix` is set and it starts
  the text or follows a special token, then every " " becomes "▁";
- the fragment is cut into UTF-8 characters and adjacent symbols are merged greedily, the
  pair whose merged text is the highest-scoring vocabulary entry first (ties: leftmost);
- a final symbol that is not a vocabulary entry is written as its bytes' `<0xNN>` tokens.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from strata_engine.api import ModelLoadError
from strata_engine.text.packed_bytes import PackedBytes
from strata_engine.text.tokenizer import (
    SPACE,
    TOKEN_CONTROL,
    TOKEN_NORMAL,
    TOKEN_UNKNOWN,
    TOKEN_USER_DEFINED,
    Tokenizer,
    _spm_piece_bytes,
    mark_special_tokens,
    special_ids,
)

_ASCII_SPACE = frozenset(" \t\n\v\f\r")  # C isspace(), for the lstrip/rstrip token attributes


def _id_or_default(meta: Mapping[str, Any], key: str, default: int | None, n_vocab: int) -> int | None:
    """llama.cpp's SPM defaults (BOS 1, EOS 2, UNK 0) apply when the key is absent."""
    value = meta.get(key, default)
    if value is None:
        return None
    value = int(value)
    return value if 0 <= value < n_vocab else None


class SentencePieceTokenizer(Tokenizer):
    """A GGUF SentencePiece vocabulary with llama.cpp-equal ids; read-only after construction.

    Shares the decoding side (token bytes, special flags, streaming decoder) with the BPE
    `Tokenizer`; only building the vocabulary and encoding differ.
    """

    def __init__(
        self,
        tokens: Sequence[str],
        scores: Sequence[float] | None,
        token_types: Sequence[int] | None,
        *,
        bos_id: int | None = 1,
        eos_id: int | None = 2,
        unk_id: int | None = 0,
        pad_id: int | None = None,
        extra_eog_ids: Sequence[int] = (),
        add_bos: bool = True,
        add_eos: bool = False,
        add_space_prefix: bool = True,
        rstrip_specials: bool = False,
        special_ids: Mapping[str, int | None] | None = None,
    ) -> None:
        self.pre = "spm"
        self._pieces = list(tokens)
        n = self.vocab_size = len(self._pieces)
        if scores is None:
            scores = [0.0] * n
        elif len(scores) < n:
            raise ModelLoadError("GGUF tokenizer.ggml.scores is shorter than the vocabulary")
        if token_types is None:
            types = [TOKEN_NORMAL] * n
        elif len(token_types) < n:
            raise ModelLoadError("GGUF tokenizer.ggml.token_type is shorter than the vocabulary")
        else:
            types = [int(t) for t in token_types[:n]]
        # text -> id; on a duplicate text the later id wins, as in llama.cpp's token_to_id map
        self._vocab = {piece: i for i, piece in enumerate(self._pieces)}
        self._scores = array("d", (float(s) for s in scores[:n]))  # 2 MiB at 262k ids, not 8
        self.bos_id, self.eos_id, self.pad_id, self.unk_id = bos_id, eos_id, pad_id, unk_id
        ids = dict(special_ids or {})
        ids["eos"] = eos_id
        self.eog_ids = mark_special_tokens(self._pieces, types, ids, self._vocab) | frozenset(extra_eog_ids)
        self._types = types
        self.add_bos, self.add_eos, self.add_space_prefix = add_bos, add_eos, add_space_prefix
        if self.add_bos and bos_id is None:
            raise ModelLoadError("GGUF asks for a BOS token but has no valid tokenizer.ggml.bos_token_id")
        if self.add_eos and eos_id is None:
            raise ModelLoadError("GGUF asks for an EOS token but has no valid tokenizer.ggml.eos_token_id")

        self._byte_ids = [self._byte_token(b) for b in range(256)]
        self._token_bytes = PackedBytes(
            _spm_piece_bytes(p, t) for p, t in zip(self._pieces, types, strict=True)
        )
        # llama.cpp's cache_special_tokens: longest text first (ties here by id, a fixed order)
        specials = [i for i, t in enumerate(types) if t in (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN)]
        specials.sort(key=lambda i: (-len(self._pieces[i].encode("utf-8")), i))
        self._specials = [(i, self._pieces[i]) for i in specials if self._pieces[i]]
        # Phi-3 GGUFs: llama.cpp strips whitespace after special tokens except these three
        keep = {"<unk>", "<s>", "<|endoftext|>"}
        self._rstrip = (
            frozenset(i for i in specials if self._pieces[i] not in keep) if rstrip_specials else frozenset()
        )

    def _byte_token(self, b: int) -> int | None:
        """`<0xNN>` for byte b, else the one-character token (llama.cpp's byte_to_token)."""
        i = self._vocab.get(f"<0x{b:02X}>")
        if i is None and b < 0x80:
            i = self._vocab.get(chr(b))
        return i

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> SentencePieceTokenizer:
        """Build from GGUF key/values, with llama.cpp's SPM defaults for absent keys."""
        tokens = meta.get("tokenizer.ggml.tokens")
        if not tokens:
            raise ModelLoadError("GGUF has no tokenizer.ggml.tokens")
        n = len(tokens)
        name = str(meta.get("general.name", "")).lower()
        return cls(
            tokens,
            meta.get("tokenizer.ggml.scores"),
            meta.get("tokenizer.ggml.token_type"),
            bos_id=_id_or_default(meta, "tokenizer.ggml.bos_token_id", 1, n),
            eos_id=_id_or_default(meta, "tokenizer.ggml.eos_token_id", 2, n),
            unk_id=_id_or_default(meta, "tokenizer.ggml.unknown_token_id", 0, n),
            pad_id=_id_or_default(meta, "tokenizer.ggml.padding_token_id", None, n),
            add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", True)),
            add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
            add_space_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix", True)),
            rstrip_specials="phi-3" in name or "phi3" in name,
            special_ids=special_ids(meta, n),
        )

    # --- encoding --------------------------------------------------------------------------

    def _partition(self, text: str, parse_special: bool) -> list[str | int]:
        """Text -> raw-text fragments (str) and special token ids (int), llama.cpp's
        tokenizer_st_partition: each special, longest first, splits every raw fragment."""
        parts: list[str | int] = [text]
        for token_id, special in self._specials:
            if not parse_special and self._types[token_id] != TOKEN_USER_DEFINED:
                continue
            if not any(isinstance(p, str) and special in p for p in parts):
                continue
            rstrip = token_id in self._rstrip
            out: list[str | int] = []
            for part in parts:
                if not isinstance(part, str):
                    out.append(part)
                    continue
                start = 0
                while (match := part.find(special, start)) >= 0:
                    if match > start:
                        out.append(part[start:match])
                    out.append(token_id)
                    start = match + len(special)
                    if rstrip:
                        while start < len(part) and part[start] in _ASCII_SPACE:
                            start += 1
                if start < len(part):
                    out.append(part[start:])
            parts = out
        return parts

    def _encode_fragment(self, text: str, out: list[int]) -> None:
        """llm_tokenizer_spm_session::tokenize: score-ordered merges over UTF-8 characters."""
        symbols = list(text)  # one symbol per character; merged symbols grow, absorbed ones empty
        n = len(symbols)
        nxt = [*range(1, n), -1]
        prv = list(range(-1, n - 1))
        vocab, scores = self._vocab, self._scores
        heap: list[tuple[float, int, int, int]] = []

        def add_bigram(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            merged = symbols[left] + symbols[right]
            token = vocab.get(merged)
            if token is not None:
                heapq.heappush(heap, (-scores[token], left, right, len(merged)))

        for i in range(1, n):
            add_bigram(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            a, b = symbols[left], symbols[right]
            if not a or not b or len(a) + len(b) != size:
                continue  # stale: one side has been merged since
            symbols[left], symbols[right] = a + b, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            add_bigram(prv[left], left)
            add_bigram(left, nxt[left])
        i = 0 if n else -1
        while i >= 0:
            piece = symbols[i]
            token = vocab.get(piece)
            if token is not None:
                out.append(token)
            else:
                for byte in piece.encode("utf-8"):
                    byte_id = self._byte_ids[byte]
                    if byte_id is None:
                        raise ValueError(f"the vocabulary has no byte token for 0x{byte:02X}")
                    out.append(byte_id)
            i = nxt[i]

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text -> ids, as llama.cpp's llama_tokenize(add_special, parse_special)."""
        ids: list[int] = []
        if add_special and self.add_bos and self.bos_id is not None:
            ids.append(self.bos_id)
        prev_special = True  # the text's start counts as "after a special token"
        for part in self._partition(text, parse_special) if text else []:
            if isinstance(part, int):
                ids.append(part)
                prev_special = True
                continue
            if self.add_space_prefix and prev_special:
                part = " " + part
            self._encode_fragment(part.replace(" ", SPACE), ids)
            prev_special = False
        if add_special and self.add_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    def encode_exact(self, text: str) -> list[int]:
        """Ids whose bytes are exactly `text`: one fragment, without the space prefix `encode`
        adds at the start (a constrained-decoding library tokenizes text mid-output)."""
        ids: list[int] = []
        if text:
            self._encode_fragment(text.replace(" ", SPACE), ids)
        return ids

    def split_words(self, text: str) -> list[str]:
        """SentencePiece has no pre-tokenizer: a special-free text is one piece."""
        return [text] if text else []

    # --- decoding --------------------------------------------------------------------------

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Ids -> text as llama.cpp's llama_detokenize: the space that `add_space_prefix` put in
        front of the first piece is taken off again (a leading BOS is dropped first when
        skipping specials); bytes that are not valid UTF-8 become U+FFFD."""
        ids = list(ids)
        strip = self.add_space_prefix
        if skip_special and self.add_bos and ids and ids[0] == self.bos_id:
            strip = False
            ids = ids[1:]
        parts = []
        for i in ids:
            raw = b"" if skip_special and self.is_special(i) else self._token_bytes[i]
            if strip and raw.startswith(b" "):
                raw = raw[1:]
            strip = False
            parts.append(raw)
        return b"".join(parts).decode("utf-8", errors="replace")
