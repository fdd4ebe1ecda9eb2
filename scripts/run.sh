#!/usr/bin/env bash
# Installs whatever is missing, builds, and runs the main job: MuJoCo's humanoid standing by
# MPPI under random pushes (examples/humanoid_mppi.py), printing the planner's throughput.
# Arguments go to the example (e.g. --seconds 5 --samples 64).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
.venv/bin/python examples/humanoid_mppi.py "$@"
