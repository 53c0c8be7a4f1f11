"""Structured output's cost on the default model, engine in-process.

- aggregate decode tokens/s at 1 and 8 concurrent streams, free text vs a JSON schema
  (each stream: a distinct chat prompt, `--tokens` tokens; the schema needs more tokens than
  that, so constrained streams run as long as free ones);
- the matcher alone: llguidance's mask + advance per token, replayed over the constrained
  tokens (microseconds per token, and its share of the constrained run's wall time), and
  the one-off costs: building the vocabulary for llguidance and compiling/checking the
  schema.

    python bench/bench_structured.py [--threads 2] [--tokens 32] [--rounds 2]

On a shared machine the figures are noisy; compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from strata_engine import LLMEngine, Request, SamplingParams, Step
from strata_engine.model_store import resolve_model
from strata_engine.structured import json_schema_spec

TOPICS = ["ocean tides", "volcanoes", "jazz", "compilers", "bees", "glaciers", "chess", "bread"]
SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string", "maxLength": 30},
        "facts": {"type": "array", "items": {"type": "string", "maxLength": 80}, "minItems": 40},
    },
    "required": ["topic", "facts"],
    "additionalProperties": False,
}


def prompt(engine: LLMEngine, i: int) -> tuple[int, ...]:
    messages = [
        {"role": "user", "content": f"List facts about {TOPICS[i % len(TOPICS)]} as JSON (variant {i})."}
    ]
    return tuple(engine.render_chat(messages))


def run_streams(
    engine: LLMEngine, n: int, tokens: int, structured: bool
) -> tuple[float, float, list[list[int]]]:
    """n streams at once; (aggregate decode tokens/s, wall seconds, each stream's generated ids)."""
    spec = json_schema_spec(SCHEMA) if structured else None
    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=not structured, structured=spec)
    start = time.perf_counter()
    outs = [engine.add(Request(prompt(engine, i), params)) for i in range(n)]
    ids: list[list[int]] = [[] for _ in range(n)]
    first: list[float] = []
    last = 0.0
    while not all(out.drained for out in outs):
        engine.step()
        now = time.perf_counter()
        for i, out in enumerate(outs):
            for ev in out.take():
                if isinstance(ev, Step):
                    if not ids[i]:
                        first.append(now)
                    ids[i].append(ev.token_id)
                    last = now
    decode_tokens = sum(len(t) - 1 for t in ids)
    return decode_tokens / (last - min(first)), last - start, ids


def matcher_costs(engine: LLMEngine, streams: list[list[int]]) -> list[float]:
    """Seconds of one mask + advance per token, replayed over generated ids (a new matcher
    per stream, as each request gets)."""
    spec = json_schema_spec(SCHEMA)
    costs = []
    for ids in streams:
        guide = engine.guides.new(spec)
        for token in ids:
            t0 = time.perf_counter()
            guide.mask()
            guide.advance(token)
            costs.append(time.perf_counter() - t0)
    return costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    engine = LLMEngine(resolve_model("default"), num_threads=args.threads, parallel=8)

    t0 = time.perf_counter()
    engine.guides.vocab  # noqa: B018 - the one-off build, timed
    vocab_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.guides.check(json_schema_spec(SCHEMA))
    compile_ms = (time.perf_counter() - t0) * 1e3
    print(
        f"vocabulary for llguidance: {vocab_s:.3f} s once per model; schema compile+check: {compile_ms:.1f} ms"
    )

    run_streams(engine, 2, 4, structured=True)  # warm-up (kernels, caches)
    print(f"\n{'streams':>8} {'free tok/s':>11} {'schema tok/s':>13} {'ratio':>6} {'matcher share':>14}")
    costs: list[float] = []
    for n in (1, 8):
        free, guided, share = 0.0, 0.0, 0.0
        for _ in range(args.rounds):  # interleaved, best of each: other load only ever slows a run
            free = max(free, run_streams(engine, n, args.tokens, structured=False)[0])
            rate, wall, ids = run_streams(engine, n, args.tokens, structured=True)
            if rate > guided:
                spent = matcher_costs(engine, ids)
                guided, share = rate, sum(spent) / wall
        costs += spent
        print(f"{n:>8} {free:>11.1f} {guided:>13.1f} {guided / free:>6.2f} {share:>13.2%}")
    print(
        f"\nmatcher per token (mask + advance): median {statistics.median(costs) * 1e6:.0f} us, "
        f"p99 {sorted(costs)[int(0.99 * (len(costs) - 1))] * 1e6:.0f} us"
    )
    print("matcher share: its replayed time over the constrained run's wall time")
    print("(noisy on a shared machine: best of --rounds interleaved runs; the tok/s columns swing")
    print(" with other load, the matcher figures do not)")


if __name__ == "__main__":
    main()
