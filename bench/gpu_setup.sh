#!/usr/bin/env bash
# Prepares a bare GPU host (a copy of this repository's working tree, packages from the registry
# only, no model hub) for `python bench/gpu_check.py`, and says what failed.
#
#     bash bench/gpu_setup.sh [VENV]        # default VENV: .venv-gpu in the repository root
#
# Installs torch (whose Linux wheels from PyPI carry CUDA and pull the matching triton), the four
# packages from this tree (editable, so gpu_check runs this tree's code), and checks that a C
# compiler is there: the CPU engine that every GPU row is compared with runs the native kernels.
set -u
cd "$(dirname "$0")/.."
venv="${1:-.venv-gpu}"
failed=()

step() {  # step NAME COMMAND...: run it, log to $venv.log, remember a failure
    local name="$1"; shift
    if "$@" >>"$venv.log" 2>&1; then echo "setup: $name ok"; else echo "setup: $name FAILED (see $venv.log)"; failed+=("$name"); fi
}

: >"$venv.log"
python=$(command -v python3.11 || command -v python3)
step "python venv ($python)" "$python" -m venv "$venv"
pip="$venv/bin/pip"
step "pip upgrade" "$pip" install -q --upgrade pip
step "torch 2.13.0 (CUDA wheel) and triton" "$pip" install -q torch==2.13.0
step "strata packages from this tree" "$pip" install -q -e packages/strata-engine -e packages/strata-server \
    -e packages/strata-client -e packages/strata-decide
step "a C compiler for the CPU engine" sh -c 'command -v "${CC:-cc}" || command -v gcc'
step "CUDA visible to torch" "$venv/bin/python" -c "import torch, triton; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
if [ ${#failed[@]} -gt 0 ]; then
    echo "setup: ${#failed[@]} step(s) failed: ${failed[*]}"
    exit 1
fi
echo "setup: done; run $venv/bin/python bench/gpu_check.py"
