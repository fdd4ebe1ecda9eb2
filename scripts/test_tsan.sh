#!/usr/bin/env bash
# The C++ tests under ThreadSanitizer, OpenMP's parallel loops over environments included
# (build/tsan, -O1), every report fatal. GCC's libgomp is not instrumented, so its barriers
# and fork-joins look like races to TSan: the build uses clang with LLVM's OpenMP runtime
# (libomp) and its Archer tool (libarcher, loaded through OMPT), which tells TSan about
# OpenMP's synchronisation. Needs what scripts/setup.sh installs (clang, libomp-dev).
#
# Threads start only in the batched API's parallel loops (host/cpu_backend.h and
# host/pack_kernels.h), so the tests built and run here are those of the executables that go
# through it (host/api.h); the others are single-threaded and TSan would have nothing to
# check in them. scripts/test.sh (and so CI) runs it last:
#
#     scripts/test_tsan.sh              # build and run the tests of the batched API
#     scripts/test_tsan.sh -R Batch     # only those matching a regex
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dir="${PHX_TSAN_BUILD:-$root/build/tsan}"
jobs="${PHX_JOBS:-$(nproc)}"
archer="$(clang++ -print-file-name=libarcher.so)"
if [ ! -f "$archer" ]; then
  archer="$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | sort -V | tail -1)"
fi
if [ ! -f "$archer" ]; then
  echo "[tsan] libarcher.so not found: install libomp-dev (scripts/setup.sh)" >&2
  exit 1
fi

echo "[tsan] building with clang -fsanitize=thread into $dir"
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DPHX_CUDA=OFF -DPHX_SANITIZE=thread \
  -DPHX_PYTHON=OFF -DPHX_BENCH=OFF -DPython_EXECUTABLE="$root/.venv/bin/python" >/dev/null
threaded=(test_batch test_contact test_jacobian test_pack test_tape)
cmake --build "$dir" -j "$jobs" --target "${threaded[@]}"

# two threads at least, whatever the machine, so that the parallel loops run in parallel
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export OMP_TOOL_LIBRARIES="$archer"
# libomp itself is not instrumented: Archer asks TSan to skip what it does inside
export TSAN_OPTIONS="halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1"
labels="^($(IFS='|'; echo "${threaded[*]}"))\$"
ctest --test-dir "$dir" --output-on-failure -j 1 -L "$labels" "$@"
echo "[tsan] clean"
