#!/usr/bin/env bash
# The CUDA backend on the CPU, under AddressSanitizer: builds the library and the Python
# extension with PHX_CUDA_EMULATION (the backend's own sources, cuda/*.cu, compiled as C++
# against the emulated runtime and CUB of cuda/emulation) into build/cuda-emulation, and runs
# the tests that take device="cuda" against the CPU backend. scripts/test.sh runs it after the
# main suite; it needs what scripts/setup.sh installs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dir="${PHX_EMULATION_BUILD:-$root/build/cuda-emulation}"  # the build directory
jobs="${PHX_JOBS:-$(nproc)}"

echo "[cuda-emulation] building the CUDA backend for the CPU, with AddressSanitizer"
# -O1, as AddressSanitizer advises: its checks at half the compile time of -O3
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DPHX_CUDA=OFF -DPHX_CUDA_EMULATION=ON -DPHX_SANITIZE=address -DPHX_PYTHON=ON -DPHX_BENCH=OFF \
  -DPython_EXECUTABLE="$root/.venv/bin/python" >/dev/null
cmake --build "$dir" -j "$jobs" --target _phalanx test_batch test_cuda_emulation

# the package's Python sources beside this build's extension
pkg="$dir/python/phalanx"
mkdir -p "$pkg"
ln -sf "$root"/bindings/phalanx/*.py "$pkg/"
cp "$dir"/_phalanx*.so "$pkg/"

# Python's own allocations are not ours to report: leaks off, everything else on. The
# sanitizer's runtime goes first into Python, and libstdc++ with it, so that its interception
# of C++ exceptions finds the library (else the first exception thrown aborts).
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
preload="$(c++ -print-file-name=libasan.so) $(c++ -print-file-name=libstdc++.so)"
run() { LD_PRELOAD="$preload" PYTHONPATH="$dir/python" "$@"; }

run .venv/bin/python -c "import phalanx, sys; sys.exit(0 if phalanx.cuda_emulated() and \
phalanx.cuda_available() else 'the emulated CUDA device is not visible')"
"$dir/tests/cpp/test_cuda_emulation"
"$dir/tests/cpp/test_batch" --gtest_filter='*Cuda*'
run .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/test_cuda.py \
  tests/python/test_bench_gpu.py \
  "tests/python/test_api.py::test_cuda_raises_without_gpu_and_matches_cpu_with_one" \
  "tests/python/test_api.py::test_cuda_available_and_emulated_are_bools"
