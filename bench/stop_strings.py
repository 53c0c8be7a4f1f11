"""What a request's stop strings cost another request, engine in-process on the default model.

One request decodes with `--stops` stop strings of `--length` random characters each (they
never match); once it has `--lead` tokens of text (a search of the stop strings' prefixes
grows with that text), a second request asks for 2 tokens. Its latency (added to
finished) is timed with the first request's stop list and without it, alternating rounds;
the figure is the ratio of the medians (target: at most 1.10; the minima are printed too, the
steadier figure on a busy machine). Also printed: the one-off cost of setting up the stop
strings when the long request is admitted, and the engine-thread time a generated token's
stop-string matching takes (its text pushed through the request's `TextStream`).

    python bench/stop_strings.py [--threads 2] [--rounds 7] [--stops 2000] [--length 1000] [--lead 64]

On a shared machine the figures are noisy; compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from strata_engine import LLMEngine, Request, SamplingParams, Step
from strata_engine.model_store import resolve_model
from strata_engine.text.stream import TextStream

LETTERS = "abcdefghijklmnopqrstuvwxyz ,.ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def chat(engine: LLMEngine, text: str) -> tuple[int, ...]:
    return tuple(engine.render_chat([{"role": "user", "content": text}]))


def victim_latency(engine: LLMEngine, stops: tuple[str, ...], lead: int) -> tuple[float, float]:
    """Seconds from adding the 2-token request to its last token, the stop-string request
    running: (wall clock, this process's CPU time, which a busy machine disturbs less)."""
    long_request = Request(
        chat(engine, "Write a long story about a lighthouse keeper."),
        SamplingParams(max_tokens=lead + 50, temperature=0.0, ignore_eos=True, stop=stops),
    )
    long_stream = engine.add(long_request)
    for _ in range(lead):  # past its prefill: decoding, a token per step
        engine.step()
    short = engine.add(
        Request(
            chat(engine, "Name a colour."), SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
        )
    )
    t0, c0 = time.perf_counter(), time.process_time()
    done = False
    while not done:
        engine.step()
        done = any(isinstance(e, Step) and e.finish_reason for e in short.take())
    elapsed = time.perf_counter() - t0, time.process_time() - c0
    long_stream.abort()
    while engine.has_work():
        engine.step()
    return elapsed


def push_seconds(engine: LLMEngine, stops: tuple[str, ...], n: int = 300) -> float:
    """Median seconds per token to push `n` tokens of a generated text through a `TextStream`."""
    ids = engine.tokenizer.encode(" ".join(["The lighthouse keeper climbed the stairs at dusk."] * 40))[:n]
    stream = TextStream(engine.tokenizer, stops)
    times = []
    for token in ids:
        t0 = time.perf_counter()
        stream.push(token)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--stops", type=int, default=2000)
    ap.add_argument("--length", type=int, default=1000)
    ap.add_argument("--lead", type=int, default=64, help="tokens the long request has before the short one")
    args = ap.parse_args()
    rng = random.Random(0)
    stops = tuple("".join(rng.choice(LETTERS) for _ in range(args.length)) for _ in range(args.stops))
    engine = LLMEngine(resolve_model("default"), num_threads=args.threads)
    victim_latency(engine, (), 2)  # warm-up
    times: dict[str, list[tuple[float, float]]] = {"none": [], "stops": []}
    for _ in range(args.rounds):
        times["none"].append(victim_latency(engine, (), args.lead))
        times["stops"].append(victim_latency(engine, stops, args.lead))
    t0 = time.perf_counter()
    TextStream(engine.tokenizer, stops)
    setup = time.perf_counter() - t0
    per_token = {name: push_seconds(engine, s) for name, s in (("none", ()), ("stops", stops))}
    none = statistics.median(t for t, _ in times["none"])
    many = statistics.median(t for t, _ in times["stops"])
    cpu_none = statistics.median(c for _, c in times["none"])
    cpu_many = statistics.median(c for _, c in times["stops"])
    print(
        f"# {engine.kernels}, {args.threads} threads, {args.rounds} rounds (medians), lead {args.lead} tokens"
    )
    print(f"2-token request beside a request with no stop strings:        {none * 1000:8.1f} ms")
    print(
        f"2-token request beside {args.stops} stop strings of {args.length} characters: {many * 1000:8.1f} ms"
    )
    minima = min(times["stops"])[0] / min(times["none"])[0]
    print(f"ratio of medians: {many / none:.3f} (target <= 1.10); of minima: {minima:.3f}")
    print(
        f"CPU time of the 2-token request's steps: {cpu_none * 1000:.1f} vs {cpu_many * 1000:.1f} ms", end=""
    )
    print(f" (ratio {cpu_many / cpu_none:.3f})")
    print(
        f"stop-string setup at admission: {setup * 1000:.1f} ms; matching per generated token (median): ",
        end="",
    )
    print(
        f"{per_token['stops'] * 1e6:.1f} us with the stop strings, {per_token['none'] * 1e6:.1f} us without"
    )


if __name__ == "__main__":
    main()
