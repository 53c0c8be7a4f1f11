"""vLLM's extra request fields in the engine: stop strings kept or dropped, special tokens
skipped, `min_tokens`, and the logit processors (bias, presence/frequency penalties) that
change the draw but never the reported rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata_engine.api import LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.engine import LLMEngine
from strata_engine.sampler import Sampler
from strata_engine.text.stream import TextStream
from strata_engine.text.tokenizer import Tokenizer

STORY = "Once upon a time, in a small village by the sea,"
FRANCE = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


@pytest.fixture(scope="module")
def tok(engine: LLMEngine) -> Tokenizer:
    return engine.tokenizer


def push_all(ts: TextStream, ids: list[int]) -> tuple[str, bool]:
    """Push ids until a stop string hits: (all released text, whether one hit)."""
    out = []
    for token in ids:
        piece, hit = ts.push(token)
        out.append(piece)
        if hit:
            return "".join(out), True
    return "".join(out) + ts.finish(), False


# ---------------------------------------------------------------- text: stops and specials


@pytest.mark.parametrize("stop", ["Paris", "ce is", "."])
def test_include_stop_keeps_the_stop_and_cuts_after_it(tok: Tokenizer, stop: str) -> None:
    text = "The capital of France is Paris. It is big."
    end = text.index(stop) + len(stop)
    kept, hit = push_all(TextStream(tok, (stop,), include_stop=True), tok.encode(text))
    dropped, hit2 = push_all(TextStream(tok, (stop,)), tok.encode(text))
    assert hit and hit2
    assert kept == text[:end]
    assert dropped == text[: text.index(stop)]


def test_min_tokens_ignores_a_stop_that_ends_before_them(tok: Tokenizer) -> None:
    text = "yes no yes no yes"
    ids = tok.encode(text)
    first_no_end = len(tok.decode(ids[:2]))
    assert tok.decode(ids[:2]) == "yes no"  # the first " no" is the second token
    early, _ = push_all(TextStream(tok, ("no",)), ids)
    late, hit = push_all(TextStream(tok, ("no",), min_tokens=2), ids)
    assert early == text[: text.index("no")]
    assert hit and late == text[: text.index("no", first_no_end)]


def test_skip_special_drops_control_tokens_only(tok: Tokenizer) -> None:
    text = "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user"
    ids = tok.encode(text)
    assert any(tok.is_special(i) for i in ids)
    skipped, _ = push_all(TextStream(tok, (), skip_special=True), ids)
    kept, _ = push_all(TextStream(tok, ()), ids)
    expected = text
    for special in SPECIALS:
        expected = expected.replace(special, "")
    assert kept == text
    assert skipped == expected


def test_a_stop_tokens_text_is_added_only_with_include_stop(tok: Tokenizer) -> None:
    ids = tok.encode("Hello world")
    for include, tail in ((True, tok.decode(ids[-1:])), (False, "")):
        ts = TextStream(tok, (), include_stop=include)
        head = "".join(ts.push(i)[0] for i in ids[:-1])
        assert head + ts.end_on_token(ids[-1]) == tok.decode(ids[:-1]) + tail


# ---------------------------------------------------------------- sampler: logit processors


def logits_and_lp(seed: int, vocab: int = 64) -> tuple[torch.Tensor, np.ndarray]:
    """Random fp32 logits (the reference's) and their log-probabilities as the sampler gets them."""
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float32) * 4
    return logits, torch.log_softmax(logits, dim=-1).numpy()


def test_processors_give_vllms_distribution_on_logits() -> None:
    """vLLM adds bias and subtracts penalties on the logits; the sampler works on the
    log-probabilities: the two must give the same distribution."""
    logits, lp = logits_and_lp(1)
    output = [3, 3, 3, 7, 9, 9]
    params = SamplingParams(
        presence_penalty=0.7, frequency_penalty=0.4, logit_bias=((5, 3.5), (7, -100.0), (11, 1.25))
    )
    reference = logits.double().clone()
    for token_id, value in params.logit_bias:
        reference[token_id] += value
    for token_id in set(output):
        reference[token_id] -= 0.7 + 0.4 * output.count(token_id)
    got = Sampler(params).process(lp.astype(np.float64), output)
    expected = torch.softmax(reference, dim=-1).numpy()
    probs = np.exp(got - got.max())
    probs /= probs.sum()
    assert np.allclose(probs, expected, rtol=1e-5, atol=1e-9)  # lp is fp32: ~1e-7 relative


def test_greedy_takes_the_penalised_best() -> None:
    logits, lp = logits_and_lp(2)
    best = int(torch.argmax(logits))
    runner_up = int(torch.argsort(logits, descending=True)[1])
    gap = float(logits[best] - logits[runner_up])
    params = SamplingParams(temperature=0.0, presence_penalty=gap / 2, frequency_penalty=gap)
    sampler = Sampler(params)
    assert sampler.sample(lp, []) == best
    assert sampler.sample(lp, [best]) == runner_up
    biased = Sampler(SamplingParams(temperature=0.0, logit_bias=((runner_up, gap + 0.01),)))
    assert biased.sample(lp, []) == runner_up


def test_min_tokens_blocks_stop_ids_until_reached() -> None:
    logits, lp = logits_and_lp(3)
    best = int(torch.argmax(logits))
    params = SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=(best,))
    sampler = Sampler(params)
    assert sampler.sample(lp, [1]) != best
    assert sampler.sample(lp, [1, 2]) == best
    eog = Sampler(SamplingParams(temperature=0.0, min_tokens=1))
    assert eog.sample(lp, [], eog_ids={best}) != best
    ignored = Sampler(SamplingParams(temperature=0.0, min_tokens=1, ignore_eos=True))
    assert ignored.sample(lp, [], eog_ids={best}) == best
    only_stops = Sampler(SamplingParams(temperature=0.0, min_tokens=5, allowed_token_ids=(best,)))
    assert only_stops.sample(lp, [], eog_ids={best}) == best  # nothing else may be drawn


# ---------------------------------------------------------------- engine, real model


def run(engine: LLMEngine, text: str, top_n: int | None = 5, **sampling) -> list[Step]:
    ids = engine.tokenizer.encode(text, add_special=False)
    request = Request(tuple(ids), SamplingParams(**sampling), LogprobParams(top_n=top_n))
    return [e for e in engine.generate(request) if isinstance(e, Step)]


def test_min_tokens_keeps_generating_past_the_end_of_turn(engine: LLMEngine) -> None:
    plain = run(engine, FRANCE, max_tokens=40, temperature=0.0)
    assert plain[-1].token_id in engine.tokenizer.eog_ids and len(plain) < 20
    longer = run(engine, FRANCE, max_tokens=40, temperature=0.0, min_tokens=20)
    assert len(longer) >= 20
    assert not {s.token_id for s in longer[:20]} & engine.tokenizer.eog_ids
    assert [s.token_id for s in longer[: len(plain) - 1]] == [s.token_id for s in plain[:-1]]


def test_penalties_change_the_draw_but_rows_stay_raw(engine: LLMEngine) -> None:
    """Each step's row equals the unpenalised echo score of the same tokens, and the chosen
    token beats every listed alternative once the penalties are taken off the raw values."""
    presence, frequency = 0.5, 1.5
    plain = run(engine, STORY, max_tokens=24, temperature=0.0, ignore_eos=True)
    steps = run(
        engine,
        STORY,
        max_tokens=24,
        temperature=0.0,
        ignore_eos=True,
        presence_penalty=presence,
        frequency_penalty=frequency,
    )
    generated = [s.token_id for s in steps]
    assert generated != [s.token_id for s in plain]
    prompt = engine.tokenizer.encode(STORY, add_special=False)
    echo = Request(
        tuple(prompt + generated),
        SamplingParams(max_tokens=0),
        LogprobParams(top_n=5, prompt_logprobs=True),
    )
    scores = next(e for e in engine.generate(echo) if isinstance(e, PromptScores))
    for i, step in enumerate(steps):
        row = scores.rows[len(prompt) + i]
        assert row is not None and step.logprobs is not None
        assert step.logprobs.logprob == row.logprob and step.logprobs.top == row.top
        raw = dict((*row.top, (step.token_id, row.logprob)))
        done = generated[:i]
        penalised = {t: v - presence * (t in done) - frequency * done.count(t) for t, v in raw.items()}
        assert penalised[step.token_id] == max(penalised.values())


def test_special_tokens_are_skipped_unless_asked(engine: LLMEngine) -> None:
    """Past the end of turn (ignore_eos) the model writes control tokens: the default text
    leaves them out, `skip_special_tokens=False` keeps them, the tokens are the same."""
    options = {"max_tokens": 24, "temperature": 0.0, "ignore_eos": True}
    skipped = run(engine, FRANCE, **options)
    kept = run(engine, FRANCE, skip_special_tokens=False, **options)
    assert [s.token_id for s in skipped] == [s.token_id for s in kept]
    assert any(engine.tokenizer.is_special(s.token_id) for s in kept)
    full = "".join(s.text for s in kept)
    assert any(special in full for special in SPECIALS)
    for special in SPECIALS:
        full = full.replace(special, "")
    assert "".join(s.text for s in skipped) == full
