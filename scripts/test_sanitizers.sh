#!/usr/bin/env bash
# The C++ tests and a representative part of the Python tests under AddressSanitizer and
# UndefinedBehaviorSanitizer (build/sanitize, -O1), every report fatal. Needs what
# scripts/setup.sh installs. Takes about 40 minutes on 2 cores, so CI does not run it:
#
#     scripts/test_sanitizers.sh            # build and run everything
#     scripts/test_sanitizers.sh -R Lcp     # only the ctest tests matching a regex
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dir="${PHX_SANITIZE_BUILD:-$root/build/sanitize}"
jobs="${PHX_JOBS:-$(nproc)}"

echo "[sanitizers] building with -fsanitize=address,undefined into $dir"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DPHX_CUDA=OFF -DPHX_SANITIZE="address,undefined" -DPHX_PYTHON=ON -DPHX_BENCH=OFF \
  -DPython_EXECUTABLE="$root/.venv/bin/python" >/dev/null
cmake --build "$dir" -j "$jobs"

# every report stops the test with a stack; Python's own allocations are not ours to report
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1"
ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@"

pkg="$dir/python/phalanx"
mkdir -p "$pkg"
ln -sf "$root"/bindings/phalanx/*.py "$pkg/"
cp "$dir"/_phalanx*.so "$pkg/"
# the sanitizers' runtimes go first into Python, libstdc++ with them (see
# scripts/test_cuda_emulation.sh); leaks off, as Python's allocations would be reported
preload="$(c++ -print-file-name=libasan.so) $(c++ -print-file-name=libubsan.so)"
preload="$preload $(c++ -print-file-name=libstdc++.so)"
ASAN_OPTIONS="abort_on_error=1:detect_leaks=0" LD_PRELOAD="$preload" PYTHONPATH="$dir/python" \
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/test_api.py \
  tests/python/test_simulator.py tests/python/test_gradients.py tests/python/test_mesh_physics.py \
  tests/python/test_pack.py tests/python/test_threads.py \
  "tests/python/test_long_runs.py::test_a_nan_in_one_environment_changes_no_other"
echo "[sanitizers] clean"
