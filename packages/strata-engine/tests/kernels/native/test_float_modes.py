"""Flush-to-zero set by other code in the process does not change the engine's bits.

torch.set_flush_denormal(True) (MXCSR FTZ + DAZ on x86, FPCR.FZ on AArch64) reads denormal
inputs as zero. The model below makes that visible: its embeddings are denormal and its first
norm weight is huge, so the first RMS norm turns them into ordinary values, or into zeros when
denormals are flushed. Each run is a fresh process: the modes are per thread and an OpenMP
worker keeps the modes of the thread that started it. The engine must give the same
log-probabilities with and without the flag, and hand the caller's flag back after each step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

SPEC = next(s for s in TINY_SPECS if s.name == "qwen2-untied")
PROMPT = "The quick brown fox jumps over the lazy dog; " * 4  # over 128 tokens: norms use 2 threads

RUN = r"""
import hashlib, json, sys
import numpy as np
import torch

flush = sys.argv[2] == "1"
if flush and not torch.set_flush_denormal(True):
    print(json.dumps({"unsupported": True}))
    sys.exit(0)

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams

def flushed():  # an independent witness: numpy on this thread reads a denormal as zero
    return bool((np.array([1e-39], np.float32) * np.float32(2.0))[0] == 0)

engine = LLMEngine(sys.argv[1], num_threads=2, kernels="native", prefix_cache=False)
emb = engine.model.embedding
ids = np.array(engine.tokenizer.encode(sys.argv[3]), dtype=np.int64)
x = engine.ops.embed(emb, ids)
norm_w = engine.model.layers[0].attn_norm
# outside a step, on 2 threads (this also starts the OpenMP workers with this thread's modes)
outside = engine.ops.rmsnorm(x, norm_w, engine.config.rms_eps)
rows = []
run = engine.runner.run
def recording_run(work):
    refs, lps = run(work)
    def rec():
        for ref, lp in zip(refs, lps):
            if ref.scores_prompt:
                rows.append(lp.tobytes())
            yield lp
    return refs, rec()
engine.runner.run = recording_run
request = Request(tuple(ids.tolist()), SamplingParams(max_tokens=1, temperature=0.0),
                  LogprobParams(top_n=1, prompt_logprobs=True))
list(engine.generate_batch([request]))
print(json.dumps({
    "digest": hashlib.sha256(b"".join(rows)).hexdigest(),
    "rows": len(rows),
    "tokens": len(ids),
    "flushed_before": flush,
    "flushed_after": flushed(),
    "denormal_input": bool(np.all(np.abs(x) < np.finfo(np.float32).tiny)),
    "norm_outside_zero": bool(np.all(outside == 0)),
}))
"""


def _run(model: Path, flush: bool) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(model), str(int(flush)), PROMPT],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def denormal_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ftz") / "denormal.gguf"
    # embeddings of order 1e-39 (fp32 denormals, stored as F32); the first norm weight 1e34
    return write_tiny_model(
        path,
        SPEC,
        overrides={"token_embd.weight": QT.F32},
        scales={"token_embd.weight": 1e-39 / 0.15, "blk.0.attn_norm.weight": 1e34},
    )


def test_flush_to_zero_from_other_code_leaves_the_bits_alone(denormal_model) -> None:
    plain = _run(denormal_model, flush=False)
    flush = _run(denormal_model, flush=True)
    if flush.get("unsupported"):
        pytest.skip("torch cannot set flush-to-zero on this CPU")
    assert plain["denormal_input"] and plain["rows"] == plain["tokens"] - 1 > 128
    # the controls: the flag bites kernels called outside a step, and not without it
    assert not plain["norm_outside_zero"]
    assert flush["norm_outside_zero"]
    # the engine's step gives the same bits, and the caller's flag is still set after it
    assert flush["digest"] == plain["digest"]
    assert flush["flushed_after"] and not plain["flushed_after"]
