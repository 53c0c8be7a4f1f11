"""llama.cpp's own vocabulary fixtures: every vocabulary it ships is tokenized as llama.cpp
does, or refused by name.

llama.cpp keeps, for its tokenizer test (tests/test-tokenizer-0.cpp), the vocabularies of the
model families it supports (models/ggml-vocab-<name>.gguf, tensor-less) and for most of them
texts (.inp) with the ids the model's own Hugging Face tokenizer gives (.out). llama-cpp-python's
source distribution carries them under vendor/llama.cpp/models/. They are fetched with pip (the
installed llama-cpp-python's version, so that they match the llama.cpp it was built from) into
STRATA_HOME/llama-vocab-fixtures/ once, only those files kept; no copy is in the repository.

Every vocabulary found is loaded. One Strata loads must give every case's ids (tokenized as
test-tokenizer-0 does: no BOS/EOS, special texts as plain text), the live llama.cpp's ids on
all the fixtures' texts and a fuzz corpus (BOS/EOS as the model asks, special texts parsed and
not), and llama.cpp's end-of-generation and special tokens and token bytes. One Strata refuses
must be in REFUSED, with the name its ModelLoadError gives. A fixture a later llama.cpp adds is
thus covered, or fails until it is named here.

These tests take the `llama_cpp` fixture: they run in `nox -s llama`, where llama-cpp-python is
built, and fail there (not skip) without it.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from strata_engine.api import ModelLoadError
from strata_engine.gguf_loader import GGUFFile
from strata_engine.paths import strata_home
from strata_engine.testing.bpe_vocab import random_texts
from strata_engine.text.load import load_tokenizer
from strata_engine.text.tokenizer import TOKEN_USER_DEFINED, Tokenizer

# Vocabularies Strata refuses, each with what its refusal names: encoders' tokenizers, which
# no generative model Strata runs uses.
REFUSED = {
    "bert-bge": "unsupported tokenizer model 'bert'",  # WordPiece
    "nomic-bert-moe": "unsupported tokenizer model 't5'",  # Unigram (SentencePiece UGM)
}
# What issue 39 asks for by name, besides the vocabularies that passed before: never refused
REQUIRED = (
    "qwen35", "gemma-4", "deepseek-coder", "deepseek-llm", "falcon",
    "llama-bpe", "llama-spm", "qwen2", "phi-3", "gpt-2", "starcoder", "refact", "mpt", "command-r",
)  # fmt: skip

SEPARATOR = "\n__ggml_vocab_test__\n"  # between the texts of a .inp file
ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED = 1 << 0, 1 << 3, 1 << 4  # llama_token_attr


def fetch_vocab_fixtures(version: str) -> Path:
    """The ggml-vocab-* files of llama-cpp-python `version`'s sdist, downloaded and unpacked on
    first use into STRATA_HOME/llama-vocab-fixtures/<version>/ (renamed into place whole, so an
    interrupted or concurrent fetch never leaves a partial directory under the final name)."""
    root = strata_home() / "llama-vocab-fixtures"
    target = root / f"llama-cpp-python-{version}"
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    print(f"fetching llama-cpp-python {version}'s source distribution for its vocabularies", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
            "-d", tmp, f"llama-cpp-python=={version}",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        (sdist,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        models = Path(tmp) / "models"
        models.mkdir()
        with tarfile.open(sdist) as tar:
            for member in tar:
                parent, _, name = member.name.rpartition("/")
                if (
                    member.isfile()
                    and parent.endswith("/vendor/llama.cpp/models")
                    and name.startswith("ggml-vocab-")
                ):
                    src = tar.extractfile(member)
                    assert src is not None
                    (models / name).write_bytes(src.read())
        if not any(models.glob("ggml-vocab-*.gguf")):
            raise RuntimeError(f"{sdist.name} holds no vendor/llama.cpp/models/ggml-vocab-*.gguf")
        try:
            os.rename(models, target)
        except OSError:
            if not target.is_dir():  # else a concurrent fetch put it there first
                raise
    return target


def read_cases(gguf_path: Path) -> list[tuple[str, list[int]]]:
    """The (text, ids) pairs of a vocabulary's .inp/.out, split as test-tokenizer-0 splits them."""
    raw = Path(f"{gguf_path}.inp").read_bytes().decode("utf-8")
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEPARATOR, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEPARATOR)
    lines = Path(f"{gguf_path}.out").read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's final newline
    assert len(lines) == len(texts), f"{gguf_path.name}: {len(texts)} texts but {len(lines)} id lines"
    return [(text, [int(t) for t in line.split()]) for text, line in zip(texts, lines, strict=True)]


def _fuzz(n: int, seed: int, specials: list[str]) -> list[str]:
    """Random strings over what the pre-tokenizers and special-token splitting care about."""
    alphabet = (
        "abcxyzABCXYZ0123456789 \t\n\r'’.,!?-_()[]{}<>|/\\$+=^~`\"@#%&*:;é́ÄßæΣσПпǅ▁"
        "你好世界ひらがなカタ한글שלוםمرحبا١٢३①½\u00a0\u2003\u3000\u200b\u200d\u0085\u2028\u1680"
        "！？。，、“”😀🍕👍🏽🇫🇷❤️\u0301\u0308ﬀＡａ"
    )
    pieces = [*specials, "'s", "'LL", "   ", "\n\n", "\r\n", "/\n", "123", "HTTP", "Äpfel", "\n\n\n\n\n"]
    return random_texts(alphabet, pieces, n, seed)


@dataclass
class VocabResult:
    name: str
    refused: str | None = None  # the ModelLoadError's message
    cases: int = 0
    cases_equal: int = 0
    case_diffs: list = field(default_factory=list)
    live_texts: int = 0
    live_diffs: list = field(default_factory=list)
    token_diffs: list = field(default_factory=list)  # (id, what, ours, llama.cpp's)
    seconds: float = 0.0


def _compare_tokens(tok: Tokenizer, llama_cpp: ModuleType, llm) -> list:
    """End-of-generation, special (control/unknown), user-defined and bytes of every token."""
    vocab = llm._model.vocab
    buf = llama_cpp.ctypes.create_string_buffer(1024)
    diffs = []
    for i in range(tok.vocab_size):
        attr = llama_cpp.llama_vocab_get_attr(vocab, i)
        want_eog = bool(llama_cpp.llama_vocab_is_eog(vocab, i))
        if (i in tok.eog_ids) != want_eog:
            diffs.append((i, "eog", i in tok.eog_ids, want_eog))
        if tok.is_special(i) != bool(attr & (ATTR_CONTROL | ATTR_UNKNOWN)):
            diffs.append((i, "special", tok.is_special(i), attr))
        # split out of plain text too (llama.cpp: user-defined and neither control nor unknown)
        user = attr & (ATTR_USER_DEFINED | ATTR_CONTROL | ATTR_UNKNOWN) == ATTR_USER_DEFINED
        if (tok._types[i] == TOKEN_USER_DEFINED) != user:
            diffs.append((i, "user-defined", tok._types[i], attr))
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, True)
        # A byte-level token holding a character outside the byte alphabet (command-r has
        # 1,403, never produced by encoding): llama.cpp renders it "[UNK_BYTE_0x...<text>]",
        # Strata as the character's UTF-8 bytes (tokenizer._piece_to_bytes)
        if tok.token_bytes(i) != buf.raw[:n] and not buf.raw[:n].startswith(b"[UNK_BYTE_0x"):
            diffs.append((i, "bytes", tok.token_bytes(i), buf.raw[:n]))
    return diffs


def _check_vocab(path: Path, llama_cpp: ModuleType, all_texts: list[str]) -> VocabResult:
    name = path.name.removeprefix("ggml-vocab-").removesuffix(".gguf")
    result = VocabResult(name)
    t0 = time.perf_counter()
    try:
        tok = load_tokenizer(GGUFFile(path).metadata)
    except ModelLoadError as exc:
        result.refused = str(exc)
        return result
    if Path(f"{path}.inp").is_file():
        for text, want in read_cases(path):
            got = tok.encode(text, add_special=False, parse_special=False)
            result.cases += 1
            if got == want:
                result.cases_equal += 1
            else:
                result.case_diffs.append((text, got, want))
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    specials = [
        tok.token_piece(i)
        for i in range(tok.vocab_size)
        if tok.is_special(i) or tok._types[i] == TOKEN_USER_DEFINED
    ]
    specials = random.Random(0).sample(specials, min(len(specials), 40))
    texts = all_texts + _fuzz(150, seed=sum(map(ord, name)), specials=specials)
    for text in texts:
        for special in (True, False):
            want = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
            got = tok.encode(text, add_special=True, parse_special=special)
            result.live_texts += 1
            if got != want:
                result.live_diffs.append((text, special, got, want))
    result.token_diffs = _compare_tokens(tok, llama_cpp, llm)
    llm.close()
    result.seconds = time.perf_counter() - t0
    return result


@pytest.fixture(scope="module")
def vocab_results(llama_cpp: ModuleType) -> dict[str, VocabResult]:
    folder = fetch_vocab_fixtures(llama_cpp.__version__)
    paths = sorted(folder.glob("ggml-vocab-*.gguf"))
    all_texts = sorted({text for p in paths if Path(f"{p}.inp").is_file() for text, _ in read_cases(p)})
    results = {}
    for path in paths:
        result = _check_vocab(path, llama_cpp, all_texts)
        results[result.name] = result
    table = [
        f"  {r.name:16} "
        + (
            "refused"
            if r.refused
            else f"cases {r.cases_equal}/{r.cases}  live {r.live_texts - len(r.live_diffs)}/{r.live_texts}"
            f"  token diffs {len(r.token_diffs)}  {r.seconds:.1f}s"
        )
        for r in results.values()
    ]
    print("\nllama.cpp vocabulary fixtures:\n" + "\n".join(table), file=sys.stderr)
    return results


def test_fixtures_were_found(vocab_results: dict[str, VocabResult]) -> None:
    assert set(REQUIRED) | set(REFUSED) <= set(vocab_results), sorted(vocab_results)


def test_every_vocabulary_is_supported_or_refused_by_name(vocab_results: dict[str, VocabResult]) -> None:
    wrong = {
        r.name: r.refused
        for r in vocab_results.values()
        if (r.refused is None) != (r.name not in REFUSED) or (r.refused and REFUSED[r.name] not in r.refused)
    }
    assert not wrong, f"refused but not in REFUSED, in REFUSED but loaded, or refused otherwise: {wrong}"
    assert not [n for n in REQUIRED if vocab_results[n].refused]


def test_fixture_cases_equal(vocab_results: dict[str, VocabResult]) -> None:
    """Every .inp/.out case of every supported vocabulary, as test-tokenizer-0 runs them."""
    wrong = {
        r.name: (f"{r.cases_equal}/{r.cases}", r.case_diffs[:3])
        for r in vocab_results.values()
        if r.case_diffs
    }
    assert not wrong, wrong
    assert all(vocab_results[n].cases >= 40 for n in REQUIRED)


def test_live_llama_cpp_ids_equal(vocab_results: dict[str, VocabResult]) -> None:
    """Every supported vocabulary (those without cases too) against llama.cpp itself."""
    wrong = {
        r.name: (f"{len(r.live_diffs)} of {r.live_texts} differ", r.live_diffs[:3])
        for r in vocab_results.values()
        if r.live_diffs
    }
    assert not wrong, wrong


def test_tokens_equal_llama_cpp(vocab_results: dict[str, VocabResult]) -> None:
    """End-of-generation ids, special and user-defined tokens and every token's bytes."""
    wrong = {r.name: (len(r.token_diffs), r.token_diffs[:5]) for r in vocab_results.values() if r.token_diffs}
    assert not wrong, wrong
