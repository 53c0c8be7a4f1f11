#!/usr/bin/env bash
# Prepares a GPU host (a copy of this repository's working tree) for `python tools/gpu_check.py`,
# online or offline, and says what it used and what failed.
#
#     bash tools/gpu_setup.sh [VENV]                         # online: packages from the registry
#     bash tools/gpu_setup.sh --wheelhouse DIR [VENV]        # offline: DIR from tools/gpu_wheelhouse.sh
#
# VENV defaults to .venv-gpu in the repository root. When a Python on the host already has a
# torch and a triton that see the GPU (CUDA images ship them), the venv is made from that Python
# with its site packages visible and neither is installed: the host's builds match its driver.
# Otherwise torch is installed (its Linux wheels carry CUDA and pull the matching triton), which
# needs the registry or a wheelhouse that holds torch. Triton's launcher compiles a small C
# module against Python.h on first use, so the headers are checked, and a C compiler, which the
# CPU engine that every GPU row is compared with needs too. Strata needs Python >= 3.11.
set -u
cd "$(dirname "$0")/.."
wheelhouse=""
if [ "${1:-}" = "--wheelhouse" ]; then
    wheelhouse="$(cd "${2:?--wheelhouse needs a folder}" && pwd)"
    shift 2
fi
venv="${1:-.venv-gpu}"
failed=()

step() {  # step NAME COMMAND...: run it, log to $venv.log, remember a failure
    local name="$1"; shift
    if "$@" >>"$venv.log" 2>&1; then echo "setup: $name ok"; else echo "setup: $name FAILED (see $venv.log)"; failed+=("$name"); fi
}

: >"$venv.log"
sees_gpu='import sys, torch, triton; assert torch.cuda.is_available(); print(torch.__version__, torch.version.cuda, triton.__version__)'
new_enough='import sys; assert sys.version_info >= (3, 11), sys.version'
python="" host_torch=""
for candidate in python3 python3.13 python3.12 python3.11; do
    path=$(command -v "$candidate") || continue
    "$path" -c "$new_enough" 2>/dev/null || continue
    if found=$("$path" -c "$sees_gpu" 2>/dev/null); then python="$path" host_torch="$found"; break; fi
    [ -n "$python" ] || python="$path"
done
if [ -z "$python" ]; then
    echo "setup: no Python >= 3.11 on this host (found: $(python3 --version 2>&1)); install one first"
    exit 1
fi
echo "setup: Python $("$python" -c 'import platform; print(platform.python_version())') at $python"
step "Python headers (Python.h, for Triton's launcher)" "$python" -c \
    'import os, sysconfig; h = os.path.join(sysconfig.get_paths()["include"], "Python.h"); assert os.path.exists(h), h + " missing: install python3-dev (or the matching pythonX.Y-dev)"'
step "a C compiler for the CPU engine and Triton's launcher" sh -c 'command -v "${CC:-cc}" || command -v gcc'

if [ -n "$host_torch" ]; then
    set -- $host_torch
    echo "setup: using the host's torch $1 (CUDA $2) and triton $3, which see the GPU; neither is installed"
    step "python venv (the host's site packages visible)" "$python" -m venv --system-site-packages "$venv"
else
    step "python venv" "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q)
if [ -n "$wheelhouse" ]; then
    pip+=(--no-index --find-links "$wheelhouse")
    echo "setup: offline, from the wheelhouse $wheelhouse"
else
    step "pip upgrade" "$venv/bin/python" -m pip install -q --upgrade pip
fi
if [ -z "$host_torch" ]; then
    step "torch 2.13.0 (CUDA wheel) and triton" "${pip[@]}" torch==2.13.0
fi
step "strata packages from this tree" "${pip[@]}" -e packages/strata-engine -e packages/strata-server \
    -e packages/strata-client -e packages/strata-decide
step "CUDA visible to torch" "$venv/bin/python" -c "$sees_gpu"
if [ ${#failed[@]} -gt 0 ]; then
    echo "setup: ${#failed[@]} step(s) failed: ${failed[*]}"
    exit 1
fi
echo "setup: done; run $venv/bin/python tools/gpu_check.py"
