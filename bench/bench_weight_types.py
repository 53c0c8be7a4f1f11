"""Every weight type against llama.cpp: memory and speed on a Qwen3-1.7B-shaped file of each type.

For each type (every projection of that type, the tied embedding Q6_K; testing/qwen3_shaped.py
writes the file, cached under STRATA_HOME/bench and removed after its run unless --keep),
bench_kquants.py runs in its own process: its sanity check (every weight held packed, top-1
agreeing with llama.cpp where llama.cpp's leads clearly), then Strata's default kernels and
llama.cpp on 2 threads each, taking turns: prefill (last logits), decode at batch 1, peak RSS.
One table to stdout and docs-ready Markdown; each type's full record in
bench/results/weight_types/TYPE.json and the table in bench/results/weight_types.json.

Columns: the file's bits a weight (its projections), decode and prefill as Strata / llama.cpp,
each side's decode as a share of the host's measured read bandwidth (the file's own bytes a
token: memory_bandwidth.py), and each side's peak RSS with the target "Strata <= llama.cpp +
150 MB".

    python bench/bench_weight_types.py [--types q4_0,iq2_xxs,...] [--layers 28] [--prompt 512]
                                       [--decode 64] [--rounds 1] [--keep]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _common import host_line, write_results
from gguf import GGML_QUANT_SIZES

from strata_engine.testing.qwen3_shaped import BASE_TYPE, FTYPES, model_path

RESULTS = Path(__file__).parent / "results"
HERE = Path(__file__).parent
RSS_ALLOWANCE_MB = 150  # Python and the server, over llama.cpp's in-process peak (issue target)


def bits_a_weight(mix: str) -> float:
    block, size = GGML_QUANT_SIZES[BASE_TYPE[mix]]
    return 8 * size / block


def run_type(mix: str, args: argparse.Namespace) -> dict | None:
    """bench_kquants.py for one type, in its own process; its JSON record (None if it failed)."""
    out = RESULTS / "weight_types" / f"{mix}.json"
    cmd = [sys.executable, str(HERE / "bench_kquants.py"), "--mix", mix, "--layers", str(args.layers),
           "--sides", "strata,llama.cpp", "--rounds", str(args.rounds), "--repeat", "1",
           "--prompt", str(args.prompt), "--decode", str(args.decode), "--json", str(out)]  # fmt: skip
    done = subprocess.run(cmd, check=False)
    if not args.keep:
        model_path(None, args.layers, mix).unlink(missing_ok=True)
    if not out.exists():
        return None
    record = json.loads(out.read_text())
    record["exit_code"] = done.returncode
    return record


def row(mix: str, record: dict | None) -> dict:
    if record is None:
        return {"type": mix, "failed": True}
    res, ratio = record["results"], record["ratios_strata_over_llama_cpp"]["strata"]
    band = record["decode_bandwidth"]
    rss = {side: res.get(side, {}).get("peak_rss_mb") for side in ("strata", "llama.cpp")}
    return {
        "type": BASE_TYPE[mix].name,
        "bits": bits_a_weight(mix),
        "sanity_ok": record["sanity"]["ok"],
        "held": record["sanity"].get("strata_weights"),
        "decode_ratio": ratio.get("decode"),
        "prefill_ratio": ratio.get("prefill_last"),
        "decode_share": {side: band.get(side, {}).get("share") for side in ("strata", "llama.cpp")},
        "peak_rss_mb": rss,
        "llama_cpp_buffers": record.get("llama_cpp_buffers"),
        "rss_within": bool(rss["strata"] and rss["llama.cpp"])
        and rss["strata"] <= rss["llama.cpp"] + RSS_ALLOWANCE_MB,
    }


def markdown(rows: list[dict]) -> str:
    def pct(x: float | None) -> str:
        return f"{x:.0%}" if x is not None else "-"

    def num(x: float | None) -> str:
        return f"{x:.2f}x" if x is not None else "-"

    lines = [
        "| type | bits a weight | decode | prefill 512 | decode, share of read bandwidth (Strata / llama.cpp) "
        "| peak RSS MB (Strata / llama.cpp) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("failed"):
            lines.append(f"| {r['type']} | failed | | | | |")
            continue
        share, rss = r["decode_share"], r["peak_rss_mb"]
        lines.append(
            f"| {r['type']}{' *' if r['llama_cpp_buffers'] == 'plain' else ''} | {r['bits']:.2f} | {num(r['decode_ratio'])} | {num(r['prefill_ratio'])} "
            f"| {pct(share['strata'])} / {pct(share['llama.cpp'])} "
            f"| {rss['strata'] or 0:.0f} / {rss['llama.cpp'] or 0:.0f} |"
        )
    if any(r.get("llama_cpp_buffers") == "plain" for r in rows):
        lines.append("\n\\* llama.cpp with its plain CPU buffers (its repacked ones crash on this host)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default=",".join(m for m in FTYPES if m not in ("q4_k_m", "q5_k_m")))
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep each generated file")
    ap.add_argument("--json", default=str(RESULTS / "weight_types.json"))
    args = ap.parse_args()
    print(host_line())
    rows = []
    for mix in args.types.split(","):
        rows.append(row(mix, run_type(mix, args)))
        print(markdown(rows[-1:]).splitlines()[2], flush=True)  # the type's row
    print(markdown(rows))
    write_results(args.json, {"host": host_line(), "layers": args.layers, "prompt": args.prompt,
                              "decode": args.decode, "rounds": args.rounds, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
