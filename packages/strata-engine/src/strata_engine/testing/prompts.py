"""Prompts and requests the invariance, kernel and golden tests share, on the real default model."""

from __future__ import annotations

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams

PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "1234567890 + 987654321 =",
    "Ünïcödé text: 日本語の文章、中文句子, emoji 🚀🎉 and ß.",
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName a prime.<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time",
    "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;",
    "a",
    "Translate to French: I love reading books in the evening.",
    "    indented\n\t\ttabs\n\n\nnewlines",
    "The mitochondria is the powerhouse of the",
    "Q: 2+2=? A:",
    "import numpy as np\nx = np.arange(10)\nprint(x.",
    "Roses are red, violets are blue,",
    "In 1969, Neil Armstrong became the first person to",
]


def text_request(engine: LLMEngine, text: str, max_tokens: int = 6, echo: bool = True, **sampling) -> Request:
    ids = tuple(engine.tokenizer.encode(text))
    return Request(
        ids,
        SamplingParams(max_tokens=max_tokens, temperature=sampling.pop("temperature", 0.0), **sampling),
        LogprobParams(top_n=5, prompt_logprobs=echo),
    )


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


def prompt_ids(engine: LLMEngine, name: str) -> list[int]:
    if name in RAW_PROMPTS:
        return engine.tokenizer.encode(RAW_PROMPTS[name])
    assert engine.chat_template is not None
    text = engine.chat_template.render(CHAT_PROMPTS[name], add_generation_prompt=True)
    return engine.tokenizer.encode(text, add_special=False)
