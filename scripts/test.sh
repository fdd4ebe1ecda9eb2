#!/usr/bin/env bash
# Installs whatever is missing, builds, and runs the whole test suite: C++ through ctest,
# Python through pytest, then the CUDA backend on the CPU (scripts/test_cuda_emulation.sh) and
# the C++ tests under ThreadSanitizer (scripts/test_tsan.sh). Exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "${PHX_JOBS:-$(nproc)}"
.venv/bin/python -m pytest -q tests/python
scripts/test_cuda_emulation.sh
scripts/test_tsan.sh
