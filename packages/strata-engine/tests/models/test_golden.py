"""Cross-machine golden hashes: the default model's full-vocabulary log-probabilities (issue 9).

For a few fixed prompts, every prompt position's full-vocabulary fp32 log-probabilities (the
log-softmax of the logits, over all 49,152 ids) in the default arithmetic (`native`: three-limb
integer matmuls) hash to the sha256 committed below, whether the prompt runs alone, inside a
batch of other prompts, in chunks of 7 tokens, or after a warm prefix cache, on 1, 2 or 3
threads, and with every kernel target this host runs. Every CI machine (AVX-512, AVX2-only,
AArch64) re-proves that its bits equal everyone else's.

Update the hashes only with a deliberate change of the arithmetic, and say why in the commit.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams
from strata_engine.config import ModelConfig
from strata_engine.gguf_loader import GGUFFile
from strata_engine.kernels.base import AttentionMeta
from strata_engine.kernels.choice import make_ops
from strata_engine.model import Transformer
from strata_engine.testing.compare import golden_targets, run_batch
from strata_engine.testing.tiny_arch_models import ARCH_SPECS, write_arch_model
from strata_engine.testing.tiny_gemma4 import write_gemma4
from strata_engine.testing.tiny_gpt_oss import write_gpt_oss

GOLDEN = {
    "chat": "cfd6a1f62ca4dc74aa7e84082ca80995f34dab3bf1e846c5ba25d063869d85ab",
    "code": "1512d334a356412cbb56518382a3c3ed90ec4ea15060ac9dacf7583a5ad1d945",
    "unicode": "d7fadc86432595f2aea6b4f4cf91b0909a4edc72bed93f69ad5b3976f25cb875",
}
PROMPTS = {
    "chat": "<|im_start|>user\nIs the sky blue? Answer Yes or No.<|im_end|>\n<|im_start|>assistant\n",
    "code": "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) +",
    "unicode": "Ünïcödé: 日本語の文章、中文句子, emoji 🚀🎉 and ß. The quick brown fox",
}
FILLERS = ["Once upon a time", "SELECT * FROM t;", "1 2 3 4 5 6 7 8 9 10 11 12", "Roses are red,", "a"]


class Recorder:
    """Wraps the engine's model runner and keeps every row's full log-probabilities by prompt."""

    def __init__(self, engine: LLMEngine) -> None:
        self.rows: dict[tuple[int, ...], dict[int, bytes]] = defaultdict(dict)
        run = engine.runner.run

        def recorded(refs: list, lp: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
            # each row is read as the engine asks for it: the rows share one buffer
            for ref, row in zip(refs, lp, strict=True):
                if ref.scores_prompt:
                    self.rows[ref.work.seq.request.prompt_ids][ref.position] = row.tobytes()
                yield row

        def recording_run(work):
            refs, lp = run(work)
            return refs, recorded(refs, lp)

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


@pytest.fixture(scope="module", params=golden_targets())
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


# ---- tiny mixture-of-experts and sliding-window models (issue 16) ---------------------------
# Models the test writes itself, byte-identical on every machine (integer-drawn weights, see
# write_arch_model(exact=True)): qwen3moe (router top-k, packed experts), gemma2 (GeGLU,
# soft-capped attention and logits, post-norms, an 8-token window on layer 0), mistral3 (YaRN
# with its own betas, the per-position query temperature from exactmath's log) and gpt-oss
# (attention sinks, biases, the clamped SwiGLU, an 8-token window on layer 0, YaRN). Driven at the
# forward level on a paged KV cache, so that the hash does not depend on the engine's API: every
# prompt position's full-vocabulary log-probabilities hash to the values below alone, in one
# batch with the other prompts (scattered blocks, interleaved order) and in 5-token chunks.
TINY_GOLDEN = {
    "qwen3moe": "35a6ee12ee948b16237ba76ec2195f7b25a570756e6a320c18a06300762e90e8",
    "gemma2": "eb7b452d3a05899b4d77f93fda17c36a7756da6f67c9138c5af40e98d8800551",
    "mistral3": "04dad506b491316da25ac705277b2b75bfcf83a26e77986acab859a6fab609c5",
    "gpt-oss": "888305f0c775443ac9bb8858d9be25f27e380bf106c721e256a6d3153e8ff320",
    "gpt-oss-mxfp4": "fd8bbe17e6ad544ed27f1b1b318698ea36399f8e4d81fc1574620f3851a42d22",  # its experts MXFP4 (rewritten at load as Q8_0 blocks with the same values)
    "gemma4": "6e7f9192ba9985bb226280ba9ea18063eead527360cee6e3398deff7893ca1e2",  # two head geometries, V normed, output scales, rope_freqs
    "gemma4-e2b": "853f8ebeb91d62112ea5af6fb2680cbc340540515e6c14e3ddb07eedccadf66d",  # per-layer embeddings, shared-KV layers, doubled FFNs
    "gemma4-moe": "104bd88aa1c425cc0b85507a269ee3aa9355414443087e00399589d1f3f0783e",  # mixture-of-experts layers: fused and separate experts, per-expert scales
}
TINY_PROMPT_LENGTHS = (37, 23, 9)


def _tiny_prompts(vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(5)
    return [rng.integers(7, vocab - 3, size=n).tolist() for n in TINY_PROMPT_LENGTHS]


def _tiny_step(
    model: Transformer, kv: list, parts: list[tuple[list[int], list[int], int, int]], block_size: int
) -> list[np.ndarray]:
    """One forward over (prompt, block table, start, end) parts; each part's log-probabilities."""
    ids, positions, token_seq, slots = [], [], [], []
    max_blocks = max(len(table) for _, table, _, _ in parts)
    tables = np.zeros((len(parts), max_blocks), dtype=np.int32)
    for i, (prompt, table, start, end) in enumerate(parts):
        tables[i, : len(table)] = table
        for p in range(start, end):
            ids.append(prompt[p])
            positions.append(p)
            token_seq.append(i)
            slots.append(table[p // block_size] * block_size + p % block_size)
    meta = AttentionMeta(
        positions=np.array(positions, dtype=np.int32),
        token_seq=np.array(token_seq, dtype=np.int32),
        block_tables=tables,
        slots=np.array(slots, dtype=np.int64),
        block_size=block_size,
    )
    lp = model.ops.log_softmax(model.logits(model.forward(np.array(ids, dtype=np.int64), meta, kv)))
    out, at = [], 0
    for _, _, start, end in parts:
        out.append(lp[at : at + end - start])
        at += end - start
    return out


def _tiny_digests(path: Path, threads: int) -> dict[str, str]:
    """{scenario: digest over every prompt's rows} with the kernels of $STRATA_KERNELS_TARGET."""
    gguf = GGUFFile(path)
    cfg = ModelConfig.from_metadata(gguf.metadata)
    model = Transformer(gguf, cfg, make_ops("native", "cpu", threads))
    prompts = _tiny_prompts(cfg.vocab_size)
    bs, n_blocks = 4, 40

    def fresh() -> list:
        shapes = [(n_blocks, bs, *cfg.heads(i)) for i in range(cfg.n_layers)]  # gemma4's differ
        kv = [(np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for shape in shapes]
        return [kv[source] for source in cfg.kv_source] or kv  # gemma4's shared-KV layers

    def tables(order: list[int]) -> list[list[int]]:
        free = iter(order)
        return [[next(free) for _ in range(-(-len(p) // bs))] for p in prompts]

    def digest(rows: list[list[np.ndarray]]) -> str:
        # every position but the last (which predicts past the prompt) of every prompt, in order
        data = b"".join(np.concatenate(r)[:-1].tobytes() for r in rows)
        return hashlib.sha256(data).hexdigest()

    out = {}
    rows = [
        _tiny_step(model, fresh(), [(p, t, 0, len(p))], bs)
        for p, t in zip(prompts, tables(list(range(n_blocks))), strict=True)
    ]
    out["alone"] = digest(rows)
    scattered = tables(np.random.default_rng(1).permutation(n_blocks).tolist())
    order = [2, 0, 1]
    got = _tiny_step(model, fresh(), [(prompts[i], scattered[i], 0, len(prompts[i])) for i in order], bs)
    out["batch"] = digest([[got[order.index(i)]] for i in range(len(prompts))])
    kv, rows = fresh(), [[] for _ in prompts]
    for start in range(0, max(map(len, prompts)), 5):
        live = [i for i, p in enumerate(prompts) if start < len(p)]
        parts = [(prompts[i], scattered[i], start, min(start + 5, len(prompts[i]))) for i in live]
        for i, r in zip(live, _tiny_step(model, kv, parts, bs), strict=True):
            rows[i].append(r)
    out["chunked"] = digest(rows)
    return out


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("golden_tiny")
    specs = {s.name: s for s in ARCH_SPECS}
    return {
        name: write_gpt_oss(
            d / f"{name}.gguf", seed=11, exact=True, experts=QT.MXFP4 if "mxfp4" in name else QT.F32
        )
        if name.startswith("gpt-oss")
        else write_gemma4(d / f"{name}.gguf", seed=11, exact=True, variant=name.partition("-")[2] or "dense")
        if name.startswith("gemma4")
        else write_arch_model(d / f"{name}.gguf", specs[name], seed=11, exact=True)
        for name in TINY_GOLDEN
    }


@pytest.mark.parametrize("target", golden_targets())
@pytest.mark.parametrize("name", list(TINY_GOLDEN))
def test_tiny_moe_and_sliding_window_models_hash_to_the_committed_golden(
    tiny_models, name: str, target: str, monkeypatch
) -> None:
    monkeypatch.setenv("STRATA_KERNELS_TARGET", target)
    digests = _tiny_digests(tiny_models[name], threads=2 if target != "avx2" else 3)
    assert digests == dict.fromkeys(("alone", "batch", "chunked"), TINY_GOLDEN[name]), digests


def test_tiny_golden_would_catch_a_changed_window(tiny_models, monkeypatch) -> None:
    """The sliding window reaches the hash: the same file with the window widened hashes differently."""
    gguf = GGUFFile(tiny_models["gemma2"])
    cfg = ModelConfig.from_metadata(gguf.metadata)
    assert cfg.window(0) == 8 and cfg.window(1) == 0
    monkeypatch.setattr(ModelConfig, "window", lambda self, layer: 0)
    assert _tiny_digests(tiny_models["gemma2"], threads=2)["alone"] != TINY_GOLDEN["gemma2"]
