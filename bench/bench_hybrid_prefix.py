"""A decision read on a hybrid (`qwen35`) model after a long shared prefix: served from the prefix
cache's state snapshot, against the same read computed cold (the target: at most 1/3 of it); with
`--speed`, prefill (`--prompt` tokens, default 512, last logits) and decode against llama.cpp on the same
file instead.

    python bench/bench_hybrid_prefix.py [--shape small|2b] [--prefix 1000] [--question 20] [--rounds 3]
    LLAMA_CPP_LIB_PATH=$(bash bench/build_llama_cpp_avx2.sh) STRATA_KERNELS_TARGET=avx2 \
        python bench/bench_hybrid_prefix.py --speed [--types q8_0|q4_k_m] [--prompt 512|2048] [--cpu-time]

A generated Qwen3.5-shaped file (random weights, Q8_0 matmuls): `small` (hidden 1024, 8 layers,
written in seconds) or `2b` (Qwen3.5-2B's shapes: hidden 2048, 24 layers, 16 DeltaNet heads of
128; a 2.2 GB file). The engine on 2 threads. Each round draws a new prefix: cold is a read of
prefix + question with nothing of it cached; warm is prefix + another question right after, which
starts from the deepest state snapshot the cold read left in the prefix. Reported: each side's
median seconds, the cached tokens and warm / cold. `--speed` measures both engines as
bench_engine.py does (2 threads, the sides taking turns `--rounds` times, the best of each kept);
`--cpu-time` measures each side's CPU seconds on one thread instead (a loaded host's queue left out);
with `--strata-only` Strata alone (run it with two checkouts' PYTHONPATH in turn for an A/B, or under
`perf record` for a profile), `--layers N` on the shape's first N layers. `--builds A.so B.so`: two
builds of the kernels (copied aside as bench/paired_builds.py says) taking turns prefill by prefill in
one engine (`--threads`, default 1), CPU seconds, the medians and B's speed-up over A.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import host_line, import_llama_cpp, keep_best, write_results
from bench_engine import _prompt_ids, bench_llama_cpp, bench_strata
from gguf import GGMLQuantizationType as QT

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams, Step
from strata_engine.testing.tiny_hybrid_models import HybridSpec, write_qwen35
from strata_engine.testing.tiny_models import VOCAB_SIZE

SHAPES = {
    "small": HybridSpec(n_layers=8, interval=4, hidden=1024, ffn=3072, n_heads=8, n_kv_heads=2, head_dim=128,
                        rope_dim=32, sections=(6, 5, 5, 0), d_state=128, n_k_heads=8, n_v_heads=8, ctx=4096),
    "2b": HybridSpec(n_layers=24, interval=4, hidden=2048, ffn=6144, n_heads=8, n_kv_heads=2, head_dim=256,
                     rope_dim=64, sections=(11, 11, 10, 0), d_state=128, n_k_heads=16, n_v_heads=16, ctx=4096),
}  # fmt: skip


def _read(engine: LLMEngine, ids: list[int]) -> tuple[float, int]:
    """One decision read (one token, its top-5 logprobs): seconds and the prompt tokens cached."""
    request = Request(tuple(ids), SamplingParams(max_tokens=1, temperature=0.0), LogprobParams(top_n=5))
    t0 = time.perf_counter()
    steps = [e for e in engine.generate(request) if isinstance(e, Step)]
    return time.perf_counter() - t0, steps[0].num_cached_tokens


TYPES = {"q8_0": (QT.Q8_0,), "q4_k_m": (QT.Q4_K, QT.Q4_K, QT.Q6_K)}  # the matmuls' types, in turn


def speed(path: Path, rounds: int, prompt: int = 512) -> dict:
    """Prefill and decode tokens/s of both engines on the file, and Strata's ratios."""
    best: dict[str, dict] = {}
    for _ in range(rounds):
        for side, bench in (("llama.cpp", bench_llama_cpp), ("strata", bench_strata)):
            out = bench(2, 1, str(path), prompt_tokens=prompt, decode_tokens=64, all_logits=False)
            out = {k: v for k, v in out.items() if k in ("prefill_last", "decode")}
            if side in best:
                keep_best(best[side], out)
            else:
                best[side] = out
    ratios = {k: best["strata"][k] / best["llama.cpp"][k] for k in ("prefill_last", "decode")}
    return {"sides": best, "ratios": ratios}


def cpu_time(path: Path, rounds: int, prompt: int = 512, decode: int = 32, strata_only: bool = False) -> dict:
    """Prefill and decode in CPU seconds (time.process_time) of each engine on one thread, the
    best of `rounds`: on a host shared with other work, where wall time measures the queue as
    much as the engine, a process's own CPU time still measures its work. `strata_only`: Strata
    alone (two checkouts in turn, or under a profiler), no ratios."""
    engine = LLMEngine(path, num_threads=1, parallel=1)
    ids = _prompt_ids(engine.vocab_size, prompt)
    llm = None
    if not strata_only:
        llm = import_llama_cpp().Llama(
            str(path), n_ctx=max(1024, prompt + 8), n_threads=1, n_threads_batch=1, n_batch=512, verbose=False
        )

    def strata(r: int) -> tuple[float, float]:
        out = engine.add(
            Request(((ids[0] + r + 1) % engine.vocab_size, *ids[1:]), SamplingParams(max_tokens=1))
        )
        start = time.process_time()
        while not out.drained:
            engine.step()
            out.take()
        prefill = time.process_time() - start
        short = ((ids[0] + r + 201) % engine.vocab_size, *ids[1:16])
        out = engine.add(
            Request(short, SamplingParams(max_tokens=decode + 1, temperature=0, ignore_eos=True))
        )
        stamps: list[float] = []
        while not out.drained:
            engine.step()
            stamps.extend(time.process_time() for e in out.take() if isinstance(e, Step))
        return prefill, (stamps[-1] - stamps[0]) / (len(stamps) - 1)

    def llama(r: int) -> tuple[float, float]:
        assert llm is not None
        p = [ids[0] + r + 1, *ids[1:]]
        llm.reset()
        start = time.process_time()
        llm.eval(p)
        prefill = time.process_time() - start
        llm.reset()
        llm.eval(p[:16])
        tok, start = ids[20], time.process_time()
        for _ in range(decode):
            llm.eval([tok])
            tok = int(llm.scores[llm.n_tokens - 1].argmax())
        return prefill, (time.process_time() - start) / decode

    best: dict[str, tuple[float, float]] = {}
    for r in range(rounds):
        for side, run in (("llama.cpp", llama), ("strata", strata))[strata_only:]:
            pre, dec = run(r)
            old = best.get(side, (pre, dec))
            best[side] = (min(old[0], pre), min(old[1], dec))
    sides = {s: {"prefill_cpu_s": p, "decode_cpu_ms": d * 1e3} for s, (p, d) in best.items()}
    if strata_only:
        return {"threads": 1, "sides": sides}
    ratios = {
        "prefill": best["llama.cpp"][0] / best["strata"][0],
        "decode": best["llama.cpp"][1] / best["strata"][1],
    }
    return {"threads": 1, "sides": sides, "ratios": ratios}


def builds(path: Path, libs: tuple[str, str], rounds: int, prompt: int, threads: int) -> dict:
    """Prefill CPU seconds of two kernel builds in one engine, taking turns (a noisy spell slows
    both alike); each prefill a new first token, so no prefix-cache hit."""
    from paired_builds import bind

    engine = LLMEngine(path, num_threads=threads, parallel=1, kernels="native")
    bound = [bind(lib) for lib in libs]
    ids = _prompt_ids(engine.vocab_size, prompt)
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds + 1):  # the first round warms the process, not counted
        for i in (0, 1):
            engine.ops.lib = bound[i]  # type: ignore[attr-defined]
            first = (ids[0] + 2 * r + i + 1) % engine.vocab_size
            out = engine.add(Request((first, *ids[1:]), SamplingParams(max_tokens=1)))
            start = time.process_time()
            while not out.drained:
                engine.step()
                out.take()
            if r:
                times[i].append(time.process_time() - start)
    a, b = statistics.median(times[0]), statistics.median(times[1])
    return {"threads": threads, "a_cpu_s": times[0], "b_cpu_s": times[1], "b_speedup": a / b}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=SHAPES, default="small")
    ap.add_argument("--prefix", type=int, default=1000)
    ap.add_argument("--question", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--types", choices=TYPES, default="q8_0")
    ap.add_argument("--speed", action="store_true", help="prefill and decode against llama.cpp")
    ap.add_argument("--prompt", type=int, default=512, help="--speed: the prefill's tokens")
    ap.add_argument(
        "--file", help="write the generated file here once and reuse it (the 2b file takes minutes)"
    )
    ap.add_argument("--cpu-time", action="store_true", help="--speed as CPU seconds, one thread each")
    ap.add_argument("--strata-only", action="store_true", help="--cpu-time: Strata alone (A/B, profiling)")
    ap.add_argument("--layers", type=int, help="the shape's first LAYERS layers (a multiple of its interval)")
    ap.add_argument("--builds", nargs=2, metavar="SO", help="--speed: two kernel builds in turns (A/B)")
    ap.add_argument("--threads", type=int, default=1, help="--builds: the engine's threads")
    ap.add_argument("--out", default="bench/results/hybrid_prefix.json")
    args = ap.parse_args()
    print(host_line())
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.file or Path(tmp) / "hybrid.gguf")
        spec = SHAPES[args.shape]
        if args.layers:
            spec = dataclasses.replace(spec, n_layers=args.layers)
        if not path.exists():  # (a kept --file is the same file: the same shape, seed and types)
            write_qwen35(path, spec, seed=1, types=TYPES[args.types])
        if args.speed:
            record = {
                "shape": args.shape,
                "layers": spec.n_layers,
                "types": args.types,
                "prompt": args.prompt,
            }
            if args.builds:
                record |= builds(
                    path, (args.builds[0], args.builds[1]), args.rounds, args.prompt, args.threads
                )
                print(
                    f"{args.shape} {args.types} prefill {args.prompt}: B / A speed {record['b_speedup']:.2f}"
                )
                write_results(args.out.replace(".json", "_builds.json"), record)
                return
            if args.cpu_time and args.strata_only:
                record |= cpu_time(path, args.rounds, args.prompt, strata_only=True)
                print(f"{args.shape} {args.types}, {spec.n_layers} layers: Strata alone {record['sides']}")
                write_results(args.out.replace(".json", "_strata.json"), record)
                return
            if args.cpu_time:
                record |= cpu_time(path, args.rounds, args.prompt)
                ratios, suffix = (record["ratios"]["prefill"], record["ratios"]["decode"]), "_cpu.json"
            else:
                record |= speed(path, args.rounds, args.prompt)
                ratios, suffix = (record["ratios"]["prefill_last"], record["ratios"]["decode"]), "_speed.json"
            print(
                f"{args.shape} {args.types}: Strata / llama.cpp: prefill {args.prompt} {ratios[0]:.2f}x, "
                f"decode {ratios[1]:.2f}x; {record['sides']}"
            )
            write_results(args.out.replace(".json", suffix), record)
            return
        engine = LLMEngine(path, num_threads=2, kv_cache_mb=256)
        _read(engine, rng.integers(7, VOCAB_SIZE - 3, size=64).tolist())  # warm the process
        cold, warm, cached = [], [], []
        for _ in range(args.rounds):
            prefix = rng.integers(7, VOCAB_SIZE - 3, size=args.prefix).tolist()
            questions = rng.integers(7, VOCAB_SIZE - 3, size=(2, args.question)).tolist()
            seconds, hit = _read(engine, prefix + questions[0])
            assert hit == 0, "the cold read found its prefix cached"
            cold.append(seconds)
            seconds, hit = _read(engine, prefix + questions[1])
            warm.append(seconds)
            cached.append(hit)
    record = {
        "shape": args.shape,
        "prefix": args.prefix,
        "question": args.question,
        "cold_s": statistics.median(cold),
        "warm_s": statistics.median(warm),
        "cached_tokens": cached,
        "warm_over_cold": statistics.median(w / c for w, c in zip(warm, cold, strict=True)),
    }
    print(
        f"{args.shape}: prefix {args.prefix} + question {args.question}: cold {record['cold_s']:.2f} s, "
        f"from the snapshot {record['warm_s']:.2f} s ({cached[0]} tokens cached): "
        f"{record['warm_over_cold']:.3f} of a cold read (target <= 0.333)"
    )
    write_results(args.out, record)


if __name__ == "__main__":
    main()
