#!/usr/bin/env bash
# Installs whatever is missing, builds, and runs the whole test suite: C++ through ctest,
# Python through pytest, then the CUDA backend on the CPU (scripts/test_cuda_emulation.sh) and
# the C++ tests under ThreadSanitizer (scripts/test_tsan.sh). Exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# The CUDA backend must compile and link with its warnings as errors. On a machine without a
# GPU nothing runs its device code, so there it is compiled fast (nvcc --Ofast-compile=max:
# minutes where the optimised device code takes about an hour on 2 cores); the emulation below
# runs the backend's sources. PHX_CUDA_FAST_COMPILE=OFF scripts/test.sh builds the optimised
# device code and checks its GPU resource budgets (cmake/gpu_budgets.txt).
if [[ -z ${PHX_CUDA_FAST_COMPILE:-} ]]; then
  PHX_CUDA_FAST_COMPILE=ON
  nvidia-smi -L >/dev/null 2>&1 && PHX_CUDA_FAST_COMPILE=OFF
fi
export PHX_CUDA_FAST_COMPILE
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "${PHX_JOBS:-$(nproc)}"
.venv/bin/python -m pytest -q tests/python
scripts/test_cuda_emulation.sh
scripts/test_tsan.sh
