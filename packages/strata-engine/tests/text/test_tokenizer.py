"""The tokenizer against llama.cpp: golden ids, special tokens, byte-level decoding, streaming."""

from __future__ import annotations

import json
import random
from pathlib import Path

import gguf
import pytest

from strata_engine.api import ModelLoadError
from strata_engine.testing.bpe_vocab import gemma4_vocab, random_texts
from strata_engine.text.load import load_tokenizer
from strata_engine.text.tokenizer import Tokenizer

DATA = Path(__file__).parent / "data"
GOLDEN = sorted(DATA.glob("tokenizer_reference_*.json"))


def _load_golden(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def smollm_meta(model_path: Path) -> dict:
    """The default model's tokenizer metadata, from the model store (STRATA_HOME / XDG aware)."""
    reader = gguf.GGUFReader(model_path)
    return {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}


@pytest.fixture(scope="module")
def tok(smollm_meta: dict) -> Tokenizer:
    return load_tokenizer(smollm_meta)


def _with_pre(meta: dict, pre: str) -> dict:
    return {**meta, "tokenizer.ggml.pre": pre}


def _variant_overrides(meta: dict, doc: dict) -> dict:
    """The metadata a golden file was made with: SmolLM2's, another pre-tokenizer, extra tokens."""
    extra = doc["extra_tokens"]
    return {
        "tokenizer.ggml.pre": doc["pre"],
        "tokenizer.ggml.tokens": meta["tokenizer.ggml.tokens"] + extra,
        "tokenizer.ggml.token_type": meta["tokenizer.ggml.token_type"] + [1] * len(extra),
        "tokenizer.ggml.merges": meta["tokenizer.ggml.merges"] + doc["extra_merges"],
    }


# --- golden ids from llama.cpp -------------------------------------------------------------


def test_golden_files_exist_and_cover_a_broad_corpus() -> None:
    names = {p.name for p in GOLDEN}
    assert "tokenizer_reference_smollm2.json" in names
    doc = _load_golden(DATA / "tokenizer_reference_smollm2.json")
    texts = [c["text"] for c in doc["cases"]]
    assert len(texts) >= 40
    assert any("<|im_start|>" in t for t in texts)
    assert any("\u200d" in t for t in texts)  # an emoji ZWJ sequence
    assert any(t.isdigit() and len(t) >= 10 for t in texts)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem.removeprefix("tokenizer_reference_"))
def test_ids_equal_llama_cpp(smollm_meta: dict, path: Path) -> None:
    doc = _load_golden(path)
    tokenizer = load_tokenizer({**smollm_meta, **_variant_overrides(smollm_meta, doc)})
    wrong = []
    for case in doc["cases"]:
        got = tokenizer.encode(case["text"])
        got_plain = tokenizer.encode(case["text"], parse_special=False)
        if got != case["ids"] or got_plain != case["ids_plain"]:
            wrong.append((case["text"], got, case["ids"], got_plain, case["ids_plain"]))
    assert not wrong, f"{len(wrong)} of {len(doc['cases'])} differ from llama.cpp: {wrong[:3]}"


def _fuzz_corpus(n: int, seed: int) -> list[str]:
    """Random strings over the character classes the pre-tokenizer regexes care about."""
    alphabet = (
        "abcXYZ019 \t\n\r'’.,!?-_()[]{}<>|$+=^~`\"\\/é́ßÆ你好世界ひらがなカタ한글"
        "שלוםمرحبا١٢३①½\u00a0\u2003\u3000\u200b\u200d😀🍕👍🏽🇫🇷❤️"
    )
    pieces = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "'s", "'LL", "   ", "\n\n"]
    return random_texts(alphabet, pieces, n, seed)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem.removeprefix("tokenizer_reference_"))
def test_ids_equal_live_llama_cpp(
    smollm_meta: dict, model_path: Path, path: Path, tmp_path: Path, llama_cpp
) -> None:
    """Against llama.cpp itself, when llama-cpp-python is installed: corpus plus fuzz."""
    doc = _load_golden(path)
    overrides = _variant_overrides(smollm_meta, doc)
    gguf_path = tmp_path / "vocab.gguf"
    _write_vocab_gguf(gguf, model_path, gguf_path, overrides)
    llm = llama_cpp.Llama(str(gguf_path), vocab_only=True, verbose=False)
    tokenizer = load_tokenizer({**smollm_meta, **overrides})
    texts = [c["text"] for c in doc["cases"]] + _fuzz_corpus(300, seed=1234)
    wrong = []
    for text in texts:
        for special in (True, False):
            want = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
            got = tokenizer.encode(text, parse_special=special)
            if got != want:
                wrong.append((text, special, got, want))
    assert not wrong, f"{len(wrong)} of {2 * len(texts)} differ from llama.cpp: {wrong[:3]}"


def _write_vocab_gguf(gguf, model_path: Path, path: Path, overrides: dict) -> None:
    """SmolLM2's metadata with `overrides`, no tensors: enough for llama.cpp's vocab_only."""
    reader = gguf.GGUFReader(model_path)
    arch = reader.fields["general.architecture"].contents()
    overrides = {**overrides, f"{arch}.vocab_size": len(overrides["tokenizer.ggml.tokens"])}
    writer = gguf.GGUFWriter(path, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = overrides[key] if key in overrides else field.contents()
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# --- model facts ---------------------------------------------------------------------------


def test_smollm2_special_ids(tok: Tokenizer) -> None:
    assert tok.vocab_size == 49152
    # <|endoftext|>, <|im_end|> and <fim_pad> (llama.cpp ends generation at a fill-in-the-middle pad)
    assert tok.eog_ids == frozenset({0, 2, 4})
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 2)
    assert tok.add_bos is False
    assert tok.encode("Hello")[0] != tok.bos_id


def test_chat_prompt_has_sixteen_ids(tok: Tokenizer) -> None:
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(prompt)
    assert len(ids) == 16
    assert ids[0] == 1 and ids[10] == 2 and ids.count(1) == 2


# --- special tokens ------------------------------------------------------------------------


def test_special_tokens_parsed_only_when_asked(tok: Tokenizer) -> None:
    assert tok.encode("<|im_start|>") == [1]
    assert tok.encode("a<|im_end|>b") == [*tok.encode("a"), 2, *tok.encode("b")]
    plain = tok.encode("<|im_start|>", parse_special=False)
    assert len(plain) > 1 and 1 not in plain
    assert tok.decode(plain) == "<|im_start|>"


def test_decode_skip_special(tok: Tokenizer) -> None:
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>"
    assert tok.decode(ids, skip_special=True) == "user\nhi"


# --- decoding ------------------------------------------------------------------------------


def test_round_trip(tok: Tokenizer) -> None:
    texts = [c["text"] for c in _load_golden(DATA / "tokenizer_reference_smollm2.json")["cases"]]
    texts += _fuzz_corpus(100, seed=7)
    for text in texts:
        assert tok.decode(tok.encode(text)) == text
        assert tok.decode(tok.encode(text, parse_special=False)) == text


def test_token_bytes_and_piece(tok: Tokenizer) -> None:
    (the,) = tok.encode(" the")
    assert tok.token_piece(the) == "Ġthe"
    assert tok.token_bytes(the) == b" the"
    assert tok.token_text(the) == " the"
    assert tok.token_text(2) == "<|im_end|>"
    assert tok.token_bytes(2) == b"<|im_end|>"


def test_token_text_of_a_partial_character(tok: Tokenizer) -> None:
    # In the GPT-2 byte alphabet, printable Latin-1 bytes stand for themselves: the vocab
    # entry "é" is the lone byte 0xE9, never valid UTF-8 on its own.
    lone = tok.token_piece(180)
    assert lone == "é"
    assert tok.token_bytes(180) == b"\xe9"
    assert tok.token_text(180) == "bytes:\\xe9"
    # An emoji spread over several tokens: each part shows its own bytes.
    ids = tok.encode("😀")
    assert len(ids) > 1
    parts = [tok.token_bytes(i) for i in ids]
    assert b"".join(parts) == "😀".encode()
    hexed = "bytes:" + "".join(f"\\x{b:02x}" for b in parts[0])
    assert tok.token_text(ids[0]) == hexed
    assert "\ufffd" not in "".join(tok.token_text(i) for i in ids)


def test_decode_replaces_broken_bytes(tok: Tokenizer) -> None:
    (a,) = tok.encode("a")
    assert tok.decode([180, a]) == "\ufffda"


def test_incremental_decoder_never_breaks_a_character(tok: Tokenizer) -> None:
    text = "I love 🍕 and 👨‍👩‍👧‍👦! 你好 😀"
    ids = tok.encode(text)
    decoder = tok.new_decoder()
    pieces = [decoder.push(i) for i in ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "" in pieces  # some token ended inside a character and was held back
    assert "".join(pieces) + decoder.flush() == text


def test_incremental_decoder_equals_full_decode(tok: Tokenizer) -> None:
    rng = random.Random(99)
    for _ in range(200):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 12))]
        decoder = tok.new_decoder()
        streamed = "".join(decoder.push(i) for i in ids) + decoder.flush()
        assert streamed == tok.decode(ids)


def test_incremental_decoder_flushes_a_dangling_tail(tok: Tokenizer) -> None:
    ids = tok.encode("😀")
    decoder = tok.new_decoder()
    assert "".join(decoder.push(i) for i in ids[:-1]) == ""
    assert decoder.flush() == "\ufffd"


# --- pre-tokenizer regexes (llama.cpp golden files exist for these too) ---------------------
# Expected splits are read off llama.cpp's regexes by hand.


@pytest.mark.parametrize(
    ("pre", "text", "words"),
    [
        ("smollm", "x 1234567", ["x", " ", "1", "2", "3", "4", "5", "6", "7"]),
        ("qwen2", "x 1234567", ["x", " ", "1", "2", "3", "4", "5", "6", "7"]),
        ("llama-bpe", "x 1234567", ["x", " ", "123", "456", "7"]),
        ("gpt-2", "x 1234567", ["x", " 1234567"]),
        ("smollm", "YOU'LL you'll", ["YOU", "'", "LL", " you", "'ll"]),
        ("llama-bpe", "YOU'LL you'll", ["YOU", "'LL", " you", "'ll"]),
        ("qwen2", "YOU'LL you'll", ["YOU", "'LL", " you", "'ll"]),
        ("smollm", "$foo  bar\n\n", ["$", "foo", " ", " bar", "\n\n"]),
        ("llama-bpe", "$foo  bar\n\n", ["$foo", " ", " bar", "\n\n"]),
        ("llama-bpe", "a;\n\n  b", ["a", ";\n\n", " ", " b"]),
        # Qwen3.5: a combining mark stays with its letters (Qwen2 splits before it)
        ("qwen35", "e\u0301x ok", ["e\u0301x", " ok"]),
        ("qwen2", "e\u0301x ok", ["e", "\u0301x", " ok"]),
        # Tekken / GPT-4o, as llama.cpp rewrites them: a non-ASCII letter is "upper" and "lower"
        ("tekken", "ÄPFEL iPhone", ["Ä", "PFEL", " i", "Phone"]),
        ("tekken", "x 1234567", ["x", " ", "1", "2", "3", "4", "5", "6", "7"]),
        ("tekken", "path/\nnext", ["path", "/\n", "next"]),
        ("tekken", "you'll", ["you", "'ll"]),
        ("gpt-4o", "x 1234567", ["x", " ", "123", "456", "7"]),
        ("gpt-4o", "YOU'LL you'll HTTPServer", ["YOU'LL", " you'll", " HTTPServer"]),
        # DeepSeek: U+3000 is whitespace, so outside the CJK run (llama.cpp's std::wregex sees U+000B)
        ("deepseek-coder", "a\u3000b 中文x 12", ["a", "\u3000b", " ", "中文", "x", " ", "1", "2"]),
        ("deepseek-coder", "foo,bar\n\nbaz", ["foo", ",", "bar", "\n", "\n", "baz"]),
        ("deepseek-llm", "a\u3000b 中文x 12", ["a", "\u3000b", " ", "中文", "x", " ", "12"]),
        ("deepseek-llm", "end.  ", ["end", ".", "  "]),
        ("deepseek-llm", "Ωμέγα！？x", ["Ωμέγα", "！？", "x"]),
        # Falcon: the backtick is punctuation to its first regex
        ("falcon", "x 1234567 `a`", ["x", " ", "123", "456", "7", " ", "`", "a", "`"]),
        ("default", "x 1234567 `a`", ["x", " ", "123", "456", "7", " `", "a", "`"]),
    ],
)
def test_pre_tokenizer_regexes(smollm_meta: dict, pre: str, text: str, words: list) -> None:
    tokenizer = load_tokenizer(_with_pre(smollm_meta, pre))
    assert tokenizer.split_words(text) == words


# --- metadata handling without the model ----------------------------------------------------


def _tiny_meta(**overrides) -> dict:
    """A hand-made byte-level vocabulary: single bytes, one merge, two special tokens."""
    singles = [chr(c) for c in range(0x21, 0x7F)] + ["Ġ"]
    tokens = [*singles, "ab", "<|eot_id|>", "<tool>"]
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.token_type": [1] * len(singles) + [1, 1, 4],
        "tokenizer.ggml.eos_token_id": 0,
    }
    meta.update(overrides)
    return meta


def test_eog_heuristic_marks_known_end_tokens() -> None:
    tokenizer = load_tokenizer(_tiny_meta())
    eot = tokenizer.vocab_size - 2
    assert tokenizer.eog_ids == frozenset({0, eot})
    # promoted to a control token: split out only when parsing specials, skipped on request
    assert tokenizer.encode("ab<|eot_id|>") == [tokenizer.vocab_size - 3, eot]
    assert eot not in tokenizer.encode("<|eot_id|>", parse_special=False)
    assert tokenizer.decode([eot], skip_special=True) == ""


def test_user_defined_tokens_split_even_without_special_parsing() -> None:
    tokenizer = load_tokenizer(_tiny_meta())
    tool = tokenizer.vocab_size - 1
    assert tokenizer.encode("a<tool>", parse_special=False)[-1] == tool
    assert tokenizer.decode([tool], skip_special=True) == "<tool>"


def test_add_bos_from_metadata() -> None:
    tokenizer = load_tokenizer(
        _tiny_meta(**{"tokenizer.ggml.bos_token_id": 5, "tokenizer.ggml.add_bos_token": True})
    )
    assert tokenizer.encode("ab")[0] == 5
    assert tokenizer.encode("ab", add_special=False)[0] != 5


def test_gpt_oss_special_tokens() -> None:
    """llama.cpp's gpt-oss rules: <|end|> ends a message, not the generation, and it and the
    channel tokens are user-defined (split out of plain text too); <|return|> ends generation."""
    texts = ["<|return|>", "<|call|>", "<|end|>", "<|channel|>"]
    meta = _tiny_meta()
    meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"] + texts
    meta["tokenizer.ggml.token_type"] = meta["tokenizer.ggml.token_type"] + [3, 3, 3, 1]
    tokenizer = load_tokenizer(meta)
    ret, call, end, channel = range(tokenizer.vocab_size - 4, tokenizer.vocab_size)
    assert {ret, call} <= tokenizer.eog_ids and end not in tokenizer.eog_ids
    assert tokenizer.encode("a<|end|>b<|channel|>", parse_special=False)[1::2] == [end, channel]
    assert tokenizer.encode("<|return|>", parse_special=False) != [ret]
    assert not tokenizer.is_special(end) and tokenizer.is_special(ret)


def test_fill_in_the_middle_texts() -> None:
    """Without fim ids in the metadata llama.cpp finds them by text: the pad ends generation."""
    meta = _tiny_meta()
    meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"] + ["<|fim_prefix|>", "<|fim_pad|>"]
    meta["tokenizer.ggml.token_type"] = meta["tokenizer.ggml.token_type"] + [1, 1]
    tokenizer = load_tokenizer(meta)
    prefix, pad = tokenizer.vocab_size - 2, tokenizer.vocab_size - 1
    assert tokenizer.is_special(prefix) and tokenizer.is_special(pad)  # promoted to control
    assert pad in tokenizer.eog_ids and prefix not in tokenizer.eog_ids
    named = load_tokenizer({**meta, "tokenizer.ggml.fim_pad_token_id": 5})
    assert pad not in named.eog_ids and 5 in named.eog_ids and not named.is_special(pad)


# --- Gemma 4's BPE (tokenizer.ggml.model = "gemma4") ---------------------------------------


def test_gemma4_tokenizer() -> None:
    tokenizer = load_tokenizer(gemma4_vocab())
    ids = {tokenizer.token_piece(i): i for i in range(tokenizer.vocab_size)}
    assert tokenizer.add_bos  # llama.cpp always adds Gemma 4's BOS
    assert tokenizer.encode("ab a", add_special=False) == [ids["ab"], ids["\u2581a"]]
    assert tokenizer.encode("a b") == [2, ids["a"], ids["\u2581"], ids["b"]]
    # no merge makes "zé" an entry: "z" becomes its byte token, "é" is one
    assert tokenizer.encode("zé", add_special=False) == [ids["<0x7A>"], ids["é"]]
    assert tokenizer.encode("\n\n\nx", add_special=False) == [ids["\n\n"], ids["\n"], ids["x"]]
    for text in ("ab a", " a b\n\n\n  z😀", "<eos>x"):
        assert tokenizer.decode(tokenizer.encode(text)[1:]) == text
    assert tokenizer.split_words(" a b\n\n\n  z") == [" a b", "\n\n\n", "  z"]  # only newline runs apart
    assert tokenizer.token_bytes(ids["\u2581a"]) == b" a" and tokenizer.token_bytes(ids["<0xE2>"]) == b"\xe2"
    # <eos> and <|tool_response>: end of generation; </s> a plain token next to the latter
    assert tokenizer.eog_ids == {1, 4} and not tokenizer.is_special(5)


def test_gemma4_newline_tokens_must_be_built_by_merges() -> None:
    """llama.cpp takes a newline run that is a vocabulary entry whole; the Rust BPE merges it."""
    meta = gemma4_vocab()
    meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"] + ["\n\n\n"]
    meta["tokenizer.ggml.token_type"] = meta["tokenizer.ggml.token_type"] + [1]
    with pytest.raises(ModelLoadError, match="newline"):
        load_tokenizer(meta)
    meta["tokenizer.ggml.merges"] = meta["tokenizer.ggml.merges"] + ["\n\n \n"]
    load_tokenizer(meta)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"tokenizer.ggml.model": "ugm"}, "ugm"),
        ({"tokenizer.ggml.model": "bert"}, "bert"),
        ({"tokenizer.ggml.pre": "bloom"}, "bloom"),
        ({"tokenizer.ggml.tokens": []}, "tokens"),
    ],
)
def test_unsupported_tokenizers_are_named(overrides: dict, named: str) -> None:
    with pytest.raises(ModelLoadError, match=named):
        load_tokenizer(_tiny_meta(**overrides))
