"""The real SmolLM2 model: the engine's logprobs at every position equal an independent float64
forward pass (gguf-py dequantisation), and greedy decoding answers the France question."""

from __future__ import annotations

import pytest
import torch

from strata_engine.api import LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.engine import LLMEngine

TOP = 20
TOLERANCE = 1e-3
IM_END = 2

_LONG = (
    "The history of numerical computing is, in large part, the history of rounding. Early "
    "machines such as the ENIAC (1945) stored decimal digits; later designs moved to binary "
    "floating point, and in 1985 the IEEE 754 standard fixed the formats: binary32 has a "
    "24-bit significand, binary64 a 53-bit one. A sum of n terms computed in order can lose "
    "about n * 2^-24 of its magnitude in single precision, which is why careful libraries "
    "reorder, pair or compensate their additions (Kahan, 1965). Today the same questions "
    "return in machine learning: a matrix product split across threads, tiles or GPUs adds "
    "its terms in an order that depends on the shape of the batch, so one request's "
    "numbers can change when another request joins it. Deterministic kernels fix the "
    "reduction order per output element.\n\nConsider three tests:\n1. run a prompt alone;\n"
    "2. run it next to 7 others;\n3. run it after a prefix cache hit.\nAll three must give "
    "identical bits — not merely close values — for log-probabilities to be reproducible. "
    "The cost is small: a fixed order of additions is as fast as any other order, once the "
    "kernels are written with it in mind."
)

RAW_PROMPTS = {
    "sentence": "The quick brown fox jumps over the lazy dog.",
    "python": "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "rust": 'fn main() {\n    let v: Vec<i32> = (1..=10).map(|x| x * x).collect();\n    println!("{:?}", v);\n}\n',
    "arithmetic": "3.14159 + 2.71828 = 5.85987; 1234567890 * 42 = 51851851380; 0x1F = 31",
    "fibonacci-numbers": "1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233,",
    "unicode": "Ünïcödé: 日本語のテキスト、中文，русский текст, ελληνικά, emoji 🤖🎉👍🏽 — “quotes”",
    "whitespace": "   multiple   spaces\t\ttabs\n\n\nnewlines   end",
    "json": '{"name": "Strata", "version": [0, 1, 0], "ok": true, "ratio": 0.75, "tags": null}',
    "sql": "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name ORDER BY 2 DESC;",
    "html": '<html><body><p class="x">Hello &amp; welcome</p></body></html>',
    "url": "https://example.com/path?query=1&lang=en#frag and C:\\Users\\test\\file.txt",
    "repetition": "the the the the the the the the the the the the",
    "one-token": "Hello",
    "long": _LONG,
}

CHAT_PROMPTS = {
    "chat-france": [{"role": "user", "content": "What is the capital of France?"}],
    "chat-haiku": [{"role": "user", "content": "Write a haiku about the sea."}],
    "chat-system": [
        {"role": "system", "content": "You are a terse translator."},
        {"role": "user", "content": "Translate 'good morning' to Spanish."},
    ],
    "chat-multi-turn": [
        {"role": "user", "content": "Is 17 a prime number? Answer yes or no."},
        {"role": "assistant", "content": "Yes."},
        {"role": "user", "content": "And 21?"},
    ],
    "chat-unicode": [{"role": "user", "content": "¿Cómo estás? Réponds en français, s'il te plaît. 😊"}],
    "chat-code": [{"role": "user", "content": "Explain this code: `print(sum(range(10)))`"}],
    "chat-math": [{"role": "user", "content": "Solve for x: 2x + 3 = 11."}],
}

FRANCE = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


def prompt_ids(engine: LLMEngine, name: str) -> list[int]:
    if name in RAW_PROMPTS:
        return engine.tokenizer.encode(RAW_PROMPTS[name])
    assert engine.chat_template is not None
    text = engine.chat_template.render(CHAT_PROMPTS[name], add_generation_prompt=True)
    return engine.tokenizer.encode(text, add_special=False)


def test_prompt_set_is_varied_enough(engine: LLMEngine) -> None:
    lengths = [len(prompt_ids(engine, name)) for name in [*RAW_PROMPTS, *CHAT_PROMPTS]]
    assert len(lengths) >= 20
    assert max(lengths) > 256  # longer than one prefill chunk: exercises chunked prefill
    assert min(lengths) == 1


@pytest.mark.parametrize("name", [*RAW_PROMPTS, *CHAT_PROMPTS])
def test_logprobs_match_float64_reference_at_every_position(engine: LLMEngine, reference, name: str) -> None:
    ids = prompt_ids(engine, name)
    want = reference.logprobs(ids).float()  # [T, vocab]: row p predicts token p + 1
    want_top = torch.topk(want, TOP).indices  # [T, TOP]
    request = Request(
        tuple(ids),
        SamplingParams(max_tokens=1, temperature=0.0),
        LogprobParams(
            top_n=1, prompt_logprobs=True, named_ids=tuple(sorted(set(want_top.flatten().tolist())))
        ),
    )
    events = engine.generate(request)
    scores = next(e for e in events if isinstance(e, PromptScores))
    (step,) = [e for e in events if isinstance(e, Step)]
    rows = [*scores.rows[1:], step.logprobs]  # row p: the distribution after position p
    assert len(rows) == len(ids)
    for p, row in enumerate(rows):
        assert row is not None
        assert row.top[0][0] == int(want_top[p, 0]), f"position {p}: top-1 differs"
        for token in want_top[p].tolist():
            diff = abs(row.named[token] - float(want[p, token]))
            assert diff <= TOLERANCE, f"position {p}, token {token}: off by {diff:.3g}"


def test_greedy_answer_to_the_france_question(engine: LLMEngine, reference) -> None:
    ids = engine.tokenizer.encode(FRANCE, add_special=False)
    events = engine.generate(
        Request(tuple(ids), SamplingParams(max_tokens=32, temperature=0.0), LogprobParams(top_n=1))
    )
    steps = [e for e in events if isinstance(e, Step)]
    assert "".join(s.text for s in steps) == "The capital of France is Paris."
    assert steps[-1].token_id == IM_END
    assert steps[-1].finish_reason == "stop"
    assert steps[-1].text == ""
    assert all(s.finish_reason is None for s in steps[:-1])
    generated = [s.token_id for s in steps]
    want = reference.logprobs(ids + generated[:-1])
    # the reference agrees with every greedy step (this also runs the KV-cache decode path)
    assert generated == want[len(ids) - 1 :].argmax(dim=1).tolist()
