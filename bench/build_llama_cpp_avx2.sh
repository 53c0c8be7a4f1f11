#!/usr/bin/env bash
# llama.cpp built for AVX2 only (no AVX-512), from the sdist of the llama-cpp-python the benchmarks
# run, so that an AVX-512 host compares Strata's AVX2 kernels with llama.cpp's AVX2 kernels, as an
# AVX2-only host would. Built once (a few minutes) into the cache; prints the library folder:
#
#   LLAMA_CPP_LIB_PATH=$(bash bench/build_llama_cpp_avx2.sh) python bench/bench_engine.py --targets avx2
#
# Needs cmake and a C++ compiler; llama-cpp-python loads the libraries from LLAMA_CPP_LIB_PATH.
set -euo pipefail
version=$(python -c "import llama_cpp; print(llama_cpp.__version__)")
home=$(python -c "from strata_engine.paths import strata_home; print(strata_home())")
out="$home/bench/llama-cpp-$version-avx2"
if [ ! -e "$out/bin/libllama.so" ]; then
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$src" >&2
    tar xzf "$src"/llama_cpp_python-*.tar.gz -C "$src"
    cmake -S "$src"/llama_cpp_python-*/vendor/llama.cpp -B "$out" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
        -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF >&2
    cmake --build "$out" --target llama -j "$(nproc)" >&2
fi
echo "$out/bin"
