"""What every benchmark shares: the host line, the llama.cpp line, the percentile rule, each side
measured in a fresh interpreter and the best of several runs kept, two runs timed in turns, and the
results writer.

Each script in bench/ runs from its own folder (`python bench/NAME.py`), which puts bench/ on
`sys.path`, so `from _common import ...` finds this file.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """The q-quantile as the value at rank floor(n q) of the sorted values (no interpolation:
    a latency that was measured, never one between two)."""
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


def llama_cpp_line() -> str:
    """Which llama.cpp the ratios are against: its version and the vector extensions its library
    was built for (an AVX2-only build, bench/build_llama_cpp_avx2.sh, is chosen with
    LLAMA_CPP_LIB_PATH, which the sides' subprocesses inherit)."""
    try:
        import llama_cpp
    except ImportError:
        return "llama.cpp: not installed"
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    built = [item.split("=")[0].strip() for item in info.split("|") if item.strip().endswith("= 1")]
    vector = [f for f in built if f.startswith(("AVX", "NEON", "SVE", "FMA", "F16C"))]
    where = os.environ.get("LLAMA_CPP_LIB_PATH", "its wheel")
    return f"llama.cpp: llama-cpp-python {llama_cpp.__version__} from {where}, built for {' '.join(vector) or '-'}"


def host_line() -> str:
    """Two lines: the CPU model and the vector flags that decide the kernel target, then the
    llama.cpp build the ratios are against (llama_cpp_line)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="ignore") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ["avx512f", "avx2", "fma", "f16c", "asimd", "neon"]
    host = f"host: {model}, {os.cpu_count()} cpus, flags: {' '.join(f for f in wanted if f in flags) or '-'}"
    return f"{host}\n{llama_cpp_line()}"


PLAIN_BUFFERS_ENV = "STRATA_LLAMA_CPP_PLAIN_BUFFERS"


def import_llama_cpp():  # type: ignore[no-untyped-def]
    """llama_cpp, with its plain CPU buffers when PLAIN_BUFFERS_ENV is "1": on a Sapphire
    Rapids host llama.cpp 0.3.36's "extra" buffers (AMX tiles, repacked Q4_0 / Q4_1 / Q8_0 /
    IQ4_NL layouts) segfault in llama.cpp alone; the sides that crash are rerun this way, and
    their records say so (`llama_cpp_buffers`)."""
    import llama_cpp

    if os.environ.get(PLAIN_BUFFERS_ENV) == "1":
        low, default = llama_cpp.llama_cpp, llama_cpp.llama_cpp.llama_model_default_params

        def params():  # type: ignore[no-untyped-def]
            p = default()
            p.use_extra_bufts = False
            return p

        low.llama_model_default_params = params
    return llama_cpp


def run_side(label: str, script: str, args: list[str], env: dict[str, str] | None = None) -> dict | None:
    """Run `script args` in a fresh interpreter, so that its memory figures are its own; the JSON
    object on the last line it prints, or None (and a line saying why) when it failed."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        print(f"{label}: not measured ({(proc.stderr.strip().splitlines() or ['failed'])[-1]})")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peak_rss_bytes(pid: int | str = "self") -> int:
    """A process's peak resident set since it started its program (VmHWM), in bytes. Not
    `ru_maxrss`: Linux carries that across fork and exec, so a side started from a parent holding
    300 MB would report at least 300 MB whatever it used itself."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc status")


def keep_best(best: dict, out: dict) -> None:
    """Fold one run's figures into `best`: the lowest load time and memory, the highest rates
    (on a shared, noisy machine the best of several runs is the least disturbed one)."""
    for key, value in out.items():
        best[key] = min(best[key], value) if key in ("load_s", "peak_rss_mb") else max(best[key], value)


def write_results(path: str | Path, record: dict[str, Any]) -> Path:
    """Write a run's record as indented JSON (the folder made if need be) and say where: the
    files in bench/results/ that figures.py turns into the docs' tables and charts."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")
    return out


def in_turns(
    run: Callable[[int], Any],
    repeat: int,
    clock: Callable[[], float] = time.perf_counter,
    alternate: bool = False,
) -> tuple[list[float], list[float], bool]:
    """Times of run(0) and run(1) taken in turns (alternate: each first every other round, so that
    neither always runs on the other's warm caches), and whether their results are the same bits:
    a speed change must not change a bit."""
    import numpy as np  # only the kernel benches time arrays

    times: tuple[list[float], list[float]] = ([], [])
    outs = [np.zeros(0), np.zeros(0)]
    for n in range(repeat):
        for i in (1, 0) if alternate and n % 2 else (0, 1):
            start = clock()
            outs[i] = run(i)
            times[i].append(clock() - start)
    same = outs[0].shape == outs[1].shape and np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))
    return times[0], times[1], same
