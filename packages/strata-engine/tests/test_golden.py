"""Cross-machine golden hashes: the default model's full-vocabulary log-probabilities (issue 9).

For a few fixed prompts, every prompt position's full-vocabulary fp32 log-probabilities
(the log-softmax of the logits, over all 49,152 ids) hash to the sha256 committed below,
whether the prompt runs alone, inside a batch of other prompts, in chunks of 7 tokens, or
after a warm prefix cache, on 1, 2 or 3 threads, and with every kernel target this host runs. Every CI machine
(AVX-512, AVX2-only, AArch64) re-proves that its bits equal everyone else's.

Update the hashes only with a deliberate change of the arithmetic, and say why in the commit.
"""

from __future__ import annotations

import hashlib
import platform
from collections import defaultdict

import pytest
import torch
from test_invariance import run_batch

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams
from strata_engine.native import targets_to_test

GOLDEN = {
    "chat": "91732edb0e966ed3440c9eb6b04e86d822b6beefa23ee844429c3d5c5500d829",
    "code": "87282e2bb89a648cff36be9199a2edc96e388fab9ebe0c524ecb7d632742252a",
    "unicode": "07b8e380529a5de33b9dc7d18f49175ce691ad843724163a9d60e0a304b78090",
}
PROMPTS = {
    "chat": "<|im_start|>user\nIs the sky blue? Answer Yes or No.<|im_end|>\n<|im_start|>assistant\n",
    "code": "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) +",
    "unicode": "Ünïcödé: 日本語の文章、中文句子, emoji 🚀🎉 and ß. The quick brown fox",
}
FILLERS = ["Once upon a time", "SELECT * FROM t;", "1 2 3 4 5 6 7 8 9 10 11 12", "Roses are red,", "a"]


def _targets() -> list[str]:
    """Every vector target; the portable build too where it has hardware FMA (AArch64):
    on x86 its fmaf is a software routine, too slow for a model (kernel tests cover it)."""
    targets = targets_to_test()
    return targets if platform.machine() in ("aarch64", "arm64") else [t for t in targets if t != "portable"]


class Recorder:
    """Wraps the engine's model runner and keeps every row's full log-probabilities by prompt."""

    def __init__(self, engine: LLMEngine) -> None:
        self.rows: dict[tuple[int, ...], dict[int, bytes]] = defaultdict(dict)
        run = engine.runner.run

        def recording_run(work):
            refs, lp = run(work)
            for ref, row in zip(refs, lp, strict=True):
                if ref.scores_prompt:
                    self.rows[ref.work.seq.request.prompt_ids][ref.position] = row.numpy().tobytes()
            return refs, lp

        engine.runner.run = recording_run

    def digest(self, prompt_ids: tuple[int, ...]) -> str:
        rows = self.rows[prompt_ids]
        assert sorted(rows) == list(range(len(prompt_ids) - 1)), "every prompt position scored once"
        return hashlib.sha256(b"".join(rows[p] for p in sorted(rows))).hexdigest()


def _request(engine: LLMEngine, text: str) -> Request:
    return Request(
        tuple(engine.tokenizer.encode(text)),
        SamplingParams(max_tokens=1, temperature=0.0),
        LogprobParams(top_n=1, prompt_logprobs=True),
    )


@pytest.fixture(scope="module", params=_targets())
def digests(request, model_path, monkeypatch_module) -> dict[str, dict[str, str]]:
    """{scenario: {prompt name: digest}} on one kernel target."""
    monkeypatch_module.setenv("STRATA_KERNELS_TARGET", request.param)
    out: dict[str, dict[str, str]] = {}

    def scenario(threads: int, **engine_kw) -> tuple[LLMEngine, Recorder]:
        engine = LLMEngine(model_path, num_threads=threads, kernels="native", parallel=16, **engine_kw)
        assert engine.kernels == f"native-{request.param}"
        return engine, Recorder(engine)

    engine, rec = scenario(2, prefix_cache=False)
    for text in PROMPTS.values():
        run_batch(engine, [_request(engine, text)])
    out["alone"] = {k: rec.digest(_request(engine, t).prompt_ids) for k, t in PROMPTS.items()}

    engine, rec = scenario(3, prefix_cache=False)
    run_batch(engine, [_request(engine, t) for t in [*FILLERS[:3], *PROMPTS.values(), *FILLERS[3:]]])
    out["batch"] = {k: rec.digest(_request(engine, t).prompt_ids) for k, t in PROMPTS.items()}

    engine, rec = scenario(1, prefix_cache=False, step_tokens=7)
    run_batch(engine, [_request(engine, t) for t in PROMPTS.values()])
    out["chunked"] = {k: rec.digest(_request(engine, t).prompt_ids) for k, t in PROMPTS.items()}

    engine, rec = scenario(2)
    for text in PROMPTS.values():  # warm: the same text plus a tail shares the first full blocks
        run_batch(engine, [_request(engine, text + " and then some more words to extend it")])
    rec.rows.clear()
    for text in PROMPTS.values():
        run_batch(engine, [_request(engine, text)])
    cached = {k: rec.digest(_request(engine, t).prompt_ids) for k, t in PROMPTS.items()}
    out["prefix cache"] = cached
    return out


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("scenario", ["alone", "batch", "chunked", "prefix cache"])
def test_full_vocabulary_logprobs_hash_to_the_committed_golden(digests, scenario: str) -> None:
    assert digests[scenario] == GOLDEN


def test_golden_rows_are_the_models_log_probabilities(model_path) -> None:
    """The hashed rows are real: one value per vocabulary id, normalised."""
    engine = LLMEngine(model_path, num_threads=2, kernels="native")
    rec = Recorder(engine)
    request = _request(engine, PROMPTS["chat"])
    run_batch(engine, [request])
    last = torch.frombuffer(
        bytearray(rec.rows[request.prompt_ids][len(request.prompt_ids) - 2]), dtype=torch.float32
    )
    assert last.shape[0] == engine.vocab_size
    assert abs(float(torch.logsumexp(last.double(), 0))) < 1e-5
