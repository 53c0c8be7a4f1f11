#!/usr/bin/env bash
# Builds, where pip works, the wheels an offline GPU host needs besides its own torch and triton:
# Strata's four packages from this tree and every dependency they pull, for the GPU host's
# Python version and platform (not this machine's). Carry the folder over; then, there:
#
#     bash tools/gpu_wheelhouse.sh [DIR] [PYTHON_VERSION]    # here; default DIR wheelhouse, 3.12
#     bash tools/gpu_setup.sh --wheelhouse DIR                # on the GPU host, offline
#
# torch, triton and the nvidia-* CUDA libraries are left out on purpose: a GPU host's image ships
# the builds that match its driver, and gpu_setup.sh uses those. hatchling (the packages' build
# backend) is included, so the tree's packages install editable there without a network.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-wheelhouse}"
version="${2:-3.12}"
mkdir -p "$dir"
python=$(command -v python3.11 || command -v python3)
platforms=()
for n in 17 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform linux_x86_64)

echo "wheelhouse: building the four packages from this tree"
"$python" -m pip wheel -q --no-deps -w "$dir" packages/strata-engine packages/strata-server \
    packages/strata-client packages/strata-decide
echo "wheelhouse: their dependencies for CPython $version on x86-64 Linux (no torch, triton, nvidia-*)"
requirements=$("$python" - "$dir" <<'EOF'
import sys, zipfile, pathlib, re
names = {"strata-engine", "strata-server", "strata-client", "strata-decide"}
skip = re.compile(r"^(torch|triton|nvidia-)", re.I)
found = set()
for wheel in pathlib.Path(sys.argv[1]).glob("strata_*.whl"):
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if line.startswith("Requires-Dist:") and "extra ==" not in line or "extra == \"gateway\"" in line:
                requirement = line.split(":", 1)[1].split(";")[0].strip()
                name = re.split(r"[<>=!~\[ (]", requirement, maxsplit=1)[0]
                if requirement and name.lower() not in names and not skip.match(name):
                    found.add(requirement)
print("\n".join(sorted(found)))
EOF
)
# shellcheck disable=SC2086
"$python" -m pip download -q --only-binary=:all: --python-version "$version" --implementation cp \
    "${platforms[@]}" -d "$dir" hatchling editables $requirements
count=$(find "$dir" -name '*.whl' | wc -l)
echo "wheelhouse: $count wheels in $dir ($(du -sh "$dir" | cut -f1)); carry it to the GPU host"
