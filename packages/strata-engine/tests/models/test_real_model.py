"""The real SmolLM2 model: the engine's logprobs at every position equal an independent float64
forward pass (gguf-py dequantisation), and greedy decoding answers the France question."""

from __future__ import annotations

import pytest
import torch

from strata_engine.api import LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.engine import LLMEngine
from strata_engine.testing.prompts import CHAT_PROMPTS, RAW_PROMPTS, prompt_ids

TOP = 20
TOLERANCE = 1e-3
IM_END = 2


FRANCE = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


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
