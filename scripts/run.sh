#!/usr/bin/env bash
# Installs whatever is missing, builds, and runs the main job: a batched rollout of MuJoCo's
# humanoid on the CPU with thousands of environments, printing env-steps/s.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
.venv/bin/python examples/humanoid_rollout.py "$@"
