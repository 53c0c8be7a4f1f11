"""A whole tiny model through `TritonOps` (the interpreter without a GPU): its logprobs match
an independent float64 forward pass, and its bits do not depend on the batch, the chunking of
the prefill or decode-vs-prefill (issue 11)."""

from __future__ import annotations

import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine import LLMEngine, LogprobParams, PromptScores, Request, SamplingParams, Step
from strata_engine.testing.reference_forward import ReferenceModel
from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

PROMPTS = [
    (5, 70, 100, 33, 250, 17, 9, 120, 44, 3, 61, 200),
    (280, 12, 99),
    (7, 7, 7, 7, 19, 140, 33, 2),
    (150,),
]
TOLERANCE = 1e-4  # |logprob - float64 reference|; fp32 over 2 layers is ~1e-6, a wrong kernel is > 1e-2


def _triton_engine(path, **kw) -> LLMEngine:
    # the fp32 matmuls (the default's integer ones: test_triton_intmatmul.py); the interpreter's CPU when no GPU
    return LLMEngine(path, device="cuda", kernels="native-fp32", parallel=8, **kw)


@pytest.fixture(scope="module", params=TINY_SPECS, ids=lambda s: s.name)
def tiny(request, tmp_path_factory):
    spec = request.param
    return write_tiny_model(tmp_path_factory.mktemp("triton") / f"{spec.name}.gguf", spec)


def test_prompt_logprobs_match_float64_reference(tiny):
    engine = _triton_engine(tiny)
    assert (engine.kernels, engine.invariant) == ("triton-fp32", True)
    ids = PROMPTS[0]
    (scores,) = engine.generate(
        Request(ids, SamplingParams(max_tokens=0), LogprobParams(top_n=5, prompt_logprobs=True))
    )
    ref = ReferenceModel(str(tiny)).logprobs(list(ids))
    worst = 0.0
    for p in range(1, len(ids)):
        row = scores.rows[p]
        worst = max(worst, abs(row.logprob - float(ref[p - 1, ids[p]])))
        worst = max(worst, *(abs(v - float(ref[p - 1, t])) for t, v in row.top))
    assert worst < TOLERANCE


def _signature(events) -> list:
    out = []
    for ev in events:
        rows = ev.rows if isinstance(ev, PromptScores) else (ev.logprobs,)
        if isinstance(ev, Step):
            out.append(("step", ev.token_id))
        out += [(r.token_id, r.logprob, r.top) for r in rows if r is not None]
    return out


def _run(engine: LLMEngine, requests: list[Request]) -> list[list]:
    return [_signature(e) for e in engine.generate_batch(requests)]


def _request(ids, max_tokens: int = 3) -> Request:
    return Request(
        tuple(ids), SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True),
        LogprobParams(top_n=3, prompt_logprobs=True),
    )  # fmt: skip


@pytest.mark.parametrize("spec", [TINY_SPECS[2]], ids=lambda s: s.name)
def test_batch_chunking_and_decode_invariance(spec, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", spec)
    engine = _triton_engine(path)
    requests = [_request(p) for p in PROMPTS]
    together = _run(engine, requests)
    # alone: the longest prompt and the one-token prompt (a prefill of one row), each the rows it
    # had among the four (a batch-dependent row would differ in any of them)
    assert [_run(engine, [requests[i]])[0] for i in (0, 3)] == [together[0], together[3]]
    chunked = _triton_engine(path, step_tokens=5, prefix_cache=False)
    assert _run(chunked, [requests[0]])[0] == together[0]
    # decode == prefill: score the prompt plus the generated tokens, compare the last row
    at = [i for i, x in enumerate(together[0]) if x[0] == "step"]
    tokens = [together[0][i][1] for i in at]
    (scores,) = engine.generate(
        Request(
            PROMPTS[0] + tuple(tokens[:2]),
            SamplingParams(max_tokens=0),
            LogprobParams(top_n=3, prompt_logprobs=True),
        )
    )
    row = scores.rows[-1]  # the prefill row of the second generated token
    assert (row.token_id, row.logprob, row.top) == together[0][at[1] + 1]
