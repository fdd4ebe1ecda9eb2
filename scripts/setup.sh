#!/usr/bin/env bash
# Installs whatever is missing and builds Phalanx. Idempotent: a second run only rebuilds
# what changed. Used by scripts/run.sh and scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# Debian packages: compilers and libraries (see README, "Dependencies"); clang and its
# runtimes' libFuzzer for scripts/fuzz.sh; three.js for phalanx.viewer's pages, and chromium
# with its driver for the tests that open them
apt_packages=(build-essential cmake ccache libeigen3-dev libpugixml-dev libgtest-dev
  libbenchmark-dev pybind11-dev libomp-dev python3-venv python3-dev libmujoco-samples
  libassimp-dev libqhull-dev clang libclang-rt-14-dev libjs-three chromium chromium-driver)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

# Python environment at the repository root
if [[ ! -x .venv/bin/python ]]; then
  echo "[setup] creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.requirements.stamp
if [[ ! -f $stamp ]] || ! cmp -s scripts/requirements.txt "$stamp"; then
  echo "[setup] installing Python packages"
  .venv/bin/python -m pip install -q --upgrade pip
  # torch pulls several GiB of wheels; a dropped connection resumes, and the whole install is
  # retried (already downloaded wheels come from pip's cache) before giving up.
  pip_opts=(-q --retries 10 --timeout 120 --resume-retries 30)
  for attempt in 1 2 3; do
    .venv/bin/python -m pip install "${pip_opts[@]}" -r scripts/requirements.txt && break
    ((attempt < 3)) || { echo "[setup] pip install failed 3 times" >&2; exit 1; }
    echo "[setup] pip install failed (attempt $attempt), retrying in 30 s" >&2
    sleep 30
  done
  cp scripts/requirements.txt "$stamp"
fi

# C++ library, tests, benchmarks and the Python package, in one build tree (build/): pip's
# build (scikit-build-core) configures it with the tests and benchmarks on, so each source
# compiles once, and installs the extension from it into .venv. The CUDA backend is built
# whenever nvcc exists, its device code optimised unless PHX_CUDA_FAST_COMPILE=ON (as
# scripts/test.sh sets it).
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
jobs="${PHX_JOBS:-$(nproc)}"
echo "[setup] building Phalanx and installing its Python package (build/)"
CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
  .venv/bin/python -m pip install -q --no-build-isolation -Cbuild-dir=build \
  -Ccmake.define.PHX_TESTS=ON -Ccmake.define.PHX_BENCH=ON -Cbuild.tool-args=-j"$jobs" \
  -Ccmake.define.PHX_CUDA_FAST_COMPILE="${PHX_CUDA_FAST_COMPILE:-OFF}" .
