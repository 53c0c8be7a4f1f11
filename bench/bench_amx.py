"""Prefill on AMX tiles against the same kernels on vpdpbusd (and llama.cpp), per weight type.

The integer-limb kernels take the integer sums of calls of 16 rows or more on AMX tiles where the
CPU has AMX-INT8 (native/amx.h); STRATA_AMX=0 keeps them on AVX-512 VNNI. The outputs' bits are the
same either way, so this measures speed only: for each --mix (a Qwen3-1.7B-shaped file written by
testing/qwen3_shaped.py, cached under STRATA_HOME/bench), bench_kquants.py's Strata side runs in
its own process with STRATA_AMX=0 and =1 (and with --llama, llama.cpp's, on its plain CPU buffers:
the wheel's AMX buffers crash on some hosts), taking turns for --rounds; each keeps its best.
Prefill tok/s (last logits) and decode tok/s, the AMX / VNNI ratio and, with --llama, Strata with
AMX / llama.cpp. Table to stdout, JSON to bench/results/amx.json.

    python bench/bench_amx.py [--mixes q4_k_m,q6_k,q8_0,iq3_s] [--layers 4] [--prompt 512]
                              [--decode 16] [--rounds 2] [--llama]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import bench_kquants
from _common import PLAIN_BUFFERS_ENV, host_line, keep_best, run_side, write_results

from strata_engine.kernels.native import in_use, load
from strata_engine.testing.qwen3_shaped import model_path, write_model

RESULTS = Path(__file__).parent / "results"
SIDES = {"vnni": {"STRATA_AMX": "0"}, "amx": {"STRATA_AMX": "1"}}  # Strata, env over the host's


def side(label: str, path: Path, args: argparse.Namespace) -> dict | None:
    """One measurement of one side, in its own process."""
    common = ["--model", str(path), "--threads", str(args.threads), "--repeat", str(args.repeat),
              "--prompt", str(args.prompt), "--decode", str(args.decode)]  # fmt: skip
    if label == "llama.cpp":
        env = {**os.environ, PLAIN_BUFFERS_ENV: "1"}
        return run_side(label, bench_kquants.__file__, ["--side", "llama.cpp", *common], env)
    return run_side(
        label, bench_kquants.__file__, ["--side", "strata", *common], {**os.environ, **SIDES[label]}
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mixes", default="q4_k_m,q6_k,q8_0,iq3_s", help="the files' type mixtures (comma list)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512, help="prefill length (tokens)")
    ap.add_argument("--decode", type=int, default=16, help="decode length at batch 1 (tokens)")
    ap.add_argument("--repeat", type=int, default=2, help="measurements per side and round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds in which the sides take turns")
    ap.add_argument("--llama", action="store_true", help="llama.cpp too")
    ap.add_argument("--out", help="where the GGUFs are (written there if missing)")
    ap.add_argument("--json", default=str(RESULTS / "amx.json"))
    args = ap.parse_args()
    labels = [*SIDES, *(["llama.cpp"] if args.llama else [])]
    print(host_line())
    lib, target = load()
    print(f"kernels: {in_use(lib, target)} (the amx side; the vnni side runs with STRATA_AMX=0)")
    print(f"load before: {os.getloadavg()[0]:.1f}")
    record: dict[str, dict] = {}
    for mix in args.mixes.split(","):
        path = model_path(args.out, args.layers, mix)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            write_model(path, args.layers, mix=mix)
            print(f"wrote {path} in {time.perf_counter() - t0:.0f}s")
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            for label in labels:
                out = side(label, path, args)
                if out is not None:
                    out.pop("kernels", None)
                    keep_best(best.setdefault(label, out), out)
        row = {label: {k: best[label][k] for k in ("prefill_last", "decode")} for label in best}
        amx, vnni, llama = (best.get(k, {}).get("prefill_last") for k in ("amx", "vnni", "llama.cpp"))
        row["prefill_amx_over_vnni"] = amx / vnni if amx and vnni else None
        row["prefill_amx_over_llama_cpp"] = amx / llama if amx and llama else None
        record[mix] = row
        cells = "  ".join(f"{label} {best[label]['prefill_last']:7.1f}" for label in best)
        ratio = "  ".join(
            f"{name} {value:.2f}x" for name, value in row.items() if name.startswith("prefill_") and value
        )
        print(f"{mix:8} prefill {args.prompt} (tok/s): {cells}   {ratio}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")
    meta = {
        "kernels": in_use(lib, target),
        "layers": args.layers,
        "prompt": args.prompt,
        "threads": args.threads,
    }
    write_results(args.json, {**meta, "results": record})


if __name__ == "__main__":
    main()
