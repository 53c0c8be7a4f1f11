"""What hashing the model file costs at server start, and what the remembered digest saves.

For a GGUF (default: the default model), times `strata_engine.provenance.model_sha256` twice
in a fresh STRATA_HOME: the first call reads and hashes the whole file (1 MiB chunks), the
second reads the digest remembered under STRATA_HOME/hashes (keyed by path, size and mtime).
Also reports CPU seconds, which a busy shared host stretches less than wall time, and the
hash rate, from which a larger model's first start follows (a 4 GB file at the same rate).

    python bench/bench_model_hash.py [--model PATH] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def timed(fn: Callable[[Path], str], path: Path) -> tuple[str, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(path)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="a .gguf path, or 'default'")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from strata_engine.model_store import resolve_model

    path = Path(resolve_model(args.model))
    size = path.stat().st_size
    print(f"{path.name}: {size / 1e6:.1f} MB")
    for run in range(args.repeat):
        with tempfile.TemporaryDirectory() as home:
            os.environ["STRATA_HOME"] = home
            from strata_engine.provenance import model_sha256

            digest, wall, cpu = timed(model_sha256, path)
            _, cached_wall, _ = timed(model_sha256, path)
        print(
            f"run {run + 1}: first start {wall:.3f} s wall / {cpu:.3f} s CPU "
            f"({size / 1e6 / cpu:.0f} MB/s of CPU); remembered {cached_wall * 1000:.2f} ms; "
            f"sha256 {digest[:16]}..."
        )


if __name__ == "__main__":
    main()
