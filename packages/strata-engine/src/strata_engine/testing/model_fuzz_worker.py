"""Fuzz worker: loads mutated copies of one GGUF, one case per stdin line, one answer line each.

Run by test_model_fuzz in a subprocess, so that a crash (a signal, an abort) fails the test
with the case that caused it instead of taking pytest down. Input lines: `<seed>`; output
lines: `<seed> ok`, `<seed> refused <message>` (a ModelLoadError) or `<seed> error <what>`.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from strata_engine.api import LogprobParams, ModelLoadError, Request, SamplingParams
from strata_engine.engine import LLMEngine
from strata_engine.testing.gguf_mutations import header_fields, mutate


def run_case(path: Path) -> str:
    """Load the file and, if it loads, generate one token with the highest id in the prompt."""
    try:
        engine = LLMEngine(path, ctx_size=64, kv_cache_mb=1, num_threads=1, parallel=1)
    except ModelLoadError as exc:
        lines = str(exc).splitlines()
        return (
            f"refused {lines[0] if lines else ''}" if len(lines) == 1 else f"error multi-line message {exc!r}"
        )
    request = Request(
        (1, 2, engine.vocab_size - 1), SamplingParams(max_tokens=1, temperature=0.0), LogprobParams(top_n=2)
    )
    engine.generate(request)
    return "ok"


def main() -> None:
    base, scratch = Path(sys.argv[1]), Path(sys.argv[2])
    data = base.read_bytes()
    fields = header_fields(base)
    for line in sys.stdin:
        seed = int(line)
        mutated, _ = mutate(data, fields, seed)
        scratch.write_bytes(mutated)
        try:
            answer = run_case(scratch)
        except BaseException as exc:
            answer = f"error {type(exc).__name__}: {exc} | {traceback.format_exc(limit=-3)!r}"
        print(f"{seed} {answer}", flush=True)


if __name__ == "__main__":
    main()
