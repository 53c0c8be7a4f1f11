"""Engine speed on the default model, against llama.cpp (llama-cpp-python) in the same run.

Prints load time, prefill tokens/s (512 tokens: last-position logits, and every position's
logits), decode tokens/s (batch 1, 128 tokens) and peak memory, for Strata and llama.cpp,
and the ratios. Each side runs in its own subprocess so memory figures are its own. The
header names the host's CPU, its vector flags and the kernel target; `--targets all` runs
Strata once per vector target this CPU can run (e.g. avx512 and avx2 on an AVX-512 host);
`--kernels native,native-fp32,native-q8` also runs the fp32 and the opt-in 8-bit-activation kernels.

    python bench/bench_engine.py [--threads 2] [--repeat 3] [--targets best|all|avx2,...]
                                 [--kernels native|native-fp32|native-q8|native,native-fp32] [--prompt 512]
                                 [--json PATH]

After the table: the weights a decode step reads and each side's decode as a share of the
host's measured read bandwidth (memory_bandwidth.py).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from _common import host_line, keep_best, peak_rss_bytes, run_side, write_results

PROMPT_TOKENS = 512
DECODE_TOKENS = 128


def _prompt_ids(vocab_size: int, n: int = PROMPT_TOKENS) -> list[int]:
    # A deterministic, varied prompt: ordinary token ids, no control tokens.
    return [100 + (i * 7919) % (vocab_size - 200) for i in range(n)]


def bench_strata(
    threads: int,
    repeat: int,
    path: str | None = None,
    prompt_tokens: int = PROMPT_TOKENS,
    decode_tokens: int = DECODE_TOKENS,
    all_logits: bool = True,
    kernels: str = "native",
) -> dict:
    """Strata's figures; `path` (default: the default model), the prompt and decode lengths,
    `all_logits` (the echo-scoring prefill) and `kernels` let other benchmarks reuse the same
    measurement."""
    from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams, Step
    from strata_engine.model_store import resolve_model

    path = path or str(resolve_model("default"))
    t0 = time.perf_counter()
    engine = LLMEngine(path, num_threads=threads, parallel=1, kernels=kernels)
    load = time.perf_counter() - t0
    ids = tuple(_prompt_ids(engine.vocab_size, prompt_tokens))

    def timed(request: Request) -> tuple[float, list[float]]:
        stamps: list[float] = []
        start = time.perf_counter()
        out = engine.add(request)
        while not out.drained:
            engine.step()
            stamps.extend(time.perf_counter() for ev in out.take() if isinstance(ev, Step))
        return start, stamps

    best = {"prefill_last": 0.0, "prefill_all": 0.0, "decode": 0.0}
    for r in range(repeat):
        # distinct first token each round so the prefix cache cannot help
        p = ((ids[0] + r + 1) % engine.vocab_size, *ids[1:])  # (a tiny vocabulary wraps)
        start, stamps = timed(Request(p, SamplingParams(max_tokens=1, temperature=0)))
        best["prefill_last"] = max(best["prefill_last"], prompt_tokens / (stamps[0] - start))
        if all_logits:
            p = ((ids[0] + r + 101) % engine.vocab_size, *ids[1:])
            start = time.perf_counter()
            engine.generate(
                Request(p, SamplingParams(max_tokens=0), LogprobParams(top_n=0, prompt_logprobs=True))
            )
            best["prefill_all"] = max(best["prefill_all"], prompt_tokens / (time.perf_counter() - start))
        short = ((ids[0] + r + 201) % engine.vocab_size, *ids[1:16])
        _, stamps = timed(
            Request(
                short,
                SamplingParams(max_tokens=decode_tokens, temperature=0, ignore_eos=True),
                LogprobParams(top_n=1),
            )
        )
        best["decode"] = max(best["decode"], (len(stamps) - 1) / (stamps[-1] - stamps[0]))
    rss = peak_rss_bytes() / 2**20
    if not all_logits:
        del best["prefill_all"]
    return {"load_s": load, **best, "peak_rss_mb": rss, "kernels": engine.kernels}


def bench_llama_cpp(
    threads: int,
    repeat: int,
    path: str | None = None,
    prompt_tokens: int = PROMPT_TOKENS,
    decode_tokens: int = DECODE_TOKENS,
    all_logits: bool = True,
) -> dict:
    """llama.cpp's figures, measured as `bench_strata` measures Strata's (same arguments)."""
    from _common import import_llama_cpp

    llama_cpp = import_llama_cpp()

    from strata_engine.model_store import resolve_model

    path = path or str(resolve_model("default"))
    n_ctx = max(1024, prompt_tokens, 16 + decode_tokens)
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_threads=threads, n_batch=512, verbose=False)
    load = time.perf_counter() - t0
    llm_all = (
        llama_cpp.Llama(path, n_ctx=n_ctx, n_threads=threads, n_batch=512, logits_all=True, verbose=False)
        if all_logits
        else None
    )
    ids = _prompt_ids(llm.n_vocab(), prompt_tokens)
    best = {"prefill_last": 0.0, "prefill_all": 0.0, "decode": 0.0}
    for r in range(repeat):
        p = [ids[0] + r + 1, *ids[1:]]
        llm.reset()
        start = time.perf_counter()
        llm.eval(p)
        best["prefill_last"] = max(best["prefill_last"], prompt_tokens / (time.perf_counter() - start))
        if llm_all is not None:
            llm_all.reset()
            start = time.perf_counter()
            llm_all.eval(p)
            best["prefill_all"] = max(best["prefill_all"], prompt_tokens / (time.perf_counter() - start))
        llm.reset()
        llm.eval(p[:16])
        start = time.perf_counter()
        tok = ids[20]
        for _ in range(decode_tokens):
            llm.eval([tok])
            tok = int(llm.scores[llm.n_tokens - 1].argmax())
        best["decode"] = max(best["decode"], decode_tokens / (time.perf_counter() - start))
    if llm_all is None:
        del best["prefill_all"]
    return {"load_s": load, **best, "peak_rss_mb": peak_rss_bytes() / 2**20}


def decode_against_bandwidth(path: str, threads: int, results: dict[str, dict]) -> dict:
    """Each side's batch-1 decode as the rate it reads weights (the GGUF's bytes a token x tokens/s)
    and as a share of this host's measured read bandwidth (memory_bandwidth.py, same run); prints
    one line per side and returns the figures for the JSON."""
    from memory_bandwidth import decode_weight_bytes, read_gbps

    per_token = decode_weight_bytes(path)
    host = read_gbps(threads)
    print(
        f"decode reads {per_token / 1e6:.0f} MB of weights a token; host read bandwidth {host:.1f} GB/s ({threads} threads)"
    )
    out: dict = {"weight_bytes_per_token": per_token, "host_read_gbps": host}
    for side, figures in results.items():
        if figures.get("decode"):
            rate = per_token * figures["decode"] / 1e9
            out[side] = {"gbps": rate, "share": rate / host}
            print(f"  {side:>18}: {rate:5.1f} GB/s of weights = {rate / host:4.0%} of the host's bandwidth")
    return out


def _targets(choice: str) -> list[str | None]:
    from strata_engine.kernels.native import runnable_targets

    if choice == "best":
        return [None]
    if choice == "all":
        return [t for t in runnable_targets() if t != "portable"]
    return choice.split(",")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="measurements per side and round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds in which the sides take turns")
    ap.add_argument(
        "--targets", default="best", help="best, all, or a comma list (avx512,avx2,neon,portable)"
    )
    ap.add_argument("--kernels", default="native", help="native, native-fp32, native-q8, ... (comma list)")
    ap.add_argument("--prompt", type=int, default=PROMPT_TOKENS, help="prefill length (tokens)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--side", choices=["strata", "llama.cpp"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:  # one side, in its own process: its figures as JSON on the last line
        lengths = {"prompt_tokens": args.prompt, "all_logits": args.prompt <= PROMPT_TOKENS}
        if args.side == "strata":
            figures = bench_strata(args.threads, args.repeat, kernels=args.kernels, **lengths)
        else:
            figures = bench_llama_cpp(args.threads, args.repeat, **lengths)
        print(json.dumps(figures))
        return
    print(host_line())
    results: dict[str, dict[str, float]] = {}
    runs: list[tuple[str, str | None, str]] = [
        ("strata", t, k) for t in _targets(args.targets) for k in args.kernels.split(",")
    ] + [("llama.cpp", None, "")]
    # The sides take turns, round after round, and each keeps its best figures: on a shared,
    # noisy machine no side gets all the quiet moments.
    for _ in range(args.rounds):
        for side, target, kernels in runs:
            env = {**os.environ, **({"STRATA_KERNELS_TARGET": target} if target else {})}
            side_args = ["--side", side, "--threads", str(args.threads), "--repeat", str(args.repeat),
                         "--prompt", str(args.prompt)]  # fmt: skip
            out = run_side(side, __file__, [*side_args, *(["--kernels", kernels] if kernels else [])], env)
            if out is not None:
                keep_best(results.setdefault(out.pop("kernels", side), out), out)
    columns = list(results)
    rows = [
        ("load to ready (s)", "load_s"),
        (f"prefill {args.prompt}, last logits (tok/s)", "prefill_last"),
        (f"prefill {args.prompt}, all logits (tok/s)", "prefill_all"),
        ("decode bs=1, 128 tok (tok/s)", "decode"),
        ("peak RSS (MB)", "peak_rss_mb"),
    ]
    strata_cols = [c for c in columns if c != "llama.cpp"]
    header = "".join(f"{c:>18}" for c in columns) + "".join(
        f"{'ratio ' + c.removeprefix('native-'):>18}" for c in strata_cols
    )
    print(f"{'metric':36}{header}")
    for label, key in rows:
        if any(key not in results[c] for c in columns):
            continue  # every position's logits: measured at the default prompt length only
        ll = results.get("llama.cpp", {}).get(key)
        cells = "".join(f"{results[c][key]:18.2f}" for c in columns)
        ratios = "".join(f"{results[c][key] / ll:18.2f}" if ll else f"{'-':>18}" for c in strata_cols)
        print(f"{label:36}{cells}{ratios}")
    from strata_engine.model_store import resolve_model

    bandwidth = decode_against_bandwidth(str(resolve_model("default")), args.threads, results)
    if args.json:
        record = {"host": host_line(), "threads": args.threads, "prompt_tokens": args.prompt,
                  "results": results, "decode_bandwidth": bandwidth}  # fmt: skip
        write_results(args.json, record)


if __name__ == "__main__":
    main()
