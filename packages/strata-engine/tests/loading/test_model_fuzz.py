"""Mutated model files: every one is a clean `ModelLoadError` or a model that loads and runs.

Two small GGUFs (written with gguf.GGUFWriter: a llama with a tied head, a qwen2 with biases
and an output head, between them every weight type the engine reads) are mutated by seed (header numbers set to edge
values or nudged, random header bytes, cuts, random tensor bytes; see gguf_mutations) and
loaded in worker subprocesses, so that a crash (a signal from a read past a buffer) fails the
test with the case that caused it instead of ending the test run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from strata_engine.testing.gguf_mutations import header_fields, mutate
from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

N_CASES = 400
WORKERS = 2


def run_worker(base: Path, scratch: Path, seeds: list[int], out: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "strata_engine.testing.model_fuzz_worker", str(base), str(scratch)]
    with open(out, "wb") as sink:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=sink, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None
    proc.stdin.write("".join(f"{s}\n" for s in seeds).encode())
    proc.stdin.close()
    return proc


def test_every_mutated_file_is_refused_cleanly_or_loads(tmp_path: Path) -> None:
    bases = [write_tiny_model(tmp_path / f"base{w}.gguf", TINY_SPECS[w]) for w in range(WORKERS)]
    seeds = [list(range(w, N_CASES, WORKERS)) for w in range(WORKERS)]  # worker w mutates base w
    outs = [tmp_path / f"answers{w}.txt" for w in range(WORKERS)]
    procs = [run_worker(bases[w], tmp_path / f"case{w}.gguf", seeds[w], outs[w]) for w in range(WORKERS)]
    for proc in procs:
        proc.wait(timeout=600)
    answers: dict[int, str] = {}

    def what(seed: int) -> str:
        base = bases[seed % WORKERS]
        return f"{base.name}: {mutate(base.read_bytes(), header_fields(base), seed)[1]}"

    for w, out in enumerate(outs):
        for line in out.read_text(errors="replace").splitlines():
            seed, answer = line.split(" ", 1)
            answers[int(seed)] = answer
        missing = [s for s in seeds[w] if s not in answers]
        if missing:  # the worker died on the first of them
            raise AssertionError(
                f"worker exited {procs[w].returncode} on seed {missing[0]} ({what(missing[0])})"
            )
    bad = {s: a for s, a in answers.items() if not (a == "ok" or a.startswith("refused "))}
    shown = {s: f"{what(s)}: {a[:300]}" for s, a in list(bad.items())[:5]}
    assert not bad, f"{len(bad)} of {N_CASES} cases escaped as other errors, e.g. {shown}"
    outcomes = [a.split(" ", 1)[0] for a in answers.values()]
    # the mutations reach both sides: most are refused, the tensor-data ones still load
    assert outcomes.count("refused") > N_CASES // 2 and outcomes.count("ok") >= N_CASES // 10
