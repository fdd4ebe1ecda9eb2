#!/usr/bin/env bash
# Fuzzes the model loaders with libFuzzer (tests/fuzz: URDF, MJCF, mesh files, height fields)
# under AddressSanitizer and UndefinedBehaviorSanitizer. Builds the targets with clang into
# build/fuzz (-DPHX_FUZZ=ON), seeds each from the repository's models and those installed beside
# it (examples/models, tests/models, tests/fuzz/seeds and regressions, MuJoCo's sample models,
# example-robot-data's URDFs and meshes), runs each for a fixed time, two at a time, and prints
# per target its executions, executions per second, coverage (libFuzzer's cov and ft) and
# findings. Needs what scripts/setup.sh installs (clang, libclang-rt-14-dev). Corpora and
# findings go to a directory under /tmp (or $PHX_FUZZ_WORK, to go on from an earlier run's
# corpora), kept and printed at the end; a finding's input, once
# fixed, belongs in tests/fuzz/regressions/<target>/ with a .expect (tests/fuzz/replay_main.cpp).
#
#     scripts/fuzz.sh                 # 300 s per target
#     scripts/fuzz.sh 60              # 60 s per target
#     scripts/fuzz.sh 600 urdf mesh   # only these targets
#     build/fuzz/tests/fuzz/fuzz_urdf CRASH_FILE   # replay one input (or replay_fuzz_urdf DIR)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-300}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(urdf mjcf mesh hfield)
dir="${PHX_FUZZ_BUILD:-$root/build/fuzz}"
jobs="${PHX_JOBS:-$(nproc)}"
work="${PHX_FUZZ_WORK:-$(mktemp -d /tmp/phx_fuzz.XXXXXX)}"  # PHX_FUZZ_WORK: go on from its corpora

echo "[fuzz] building the targets with clang into $dir"
python="$root/.venv/bin/python"
[[ -x $python ]] || python="$(command -v python3)"
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g -DNDEBUG" -DPHX_FUZZ=ON -DPHX_CUDA=OFF -DPHX_PYTHON=OFF \
  -DPython_EXECUTABLE="$python" >/dev/null
cmake --build "$dir" -j "$jobs" --target "${targets[@]/#/fuzz_}"

# the largest input per target; larger seeds are left out
declare -A max_len=([urdf]=16384 [mjcf]=16384 [mesh]=16384 [hfield]=4096)
robots="$(ls -d "$root"/.venv/lib/python3*/site-packages/cmeel.prefix/share/example-robot-data/robots \
  2>/dev/null | head -1 || true)"

# copies files no larger than the target's max_len into its corpus; mesh files get the first
# byte that chooses their extension (tests/fuzz/fuzz_mesh.cpp)
seed() {
  local t="$1" f
  shift
  for f in "$@"; do
    [[ -f $f && $f != *.expect ]] || continue
    (($(stat -c %s "$f") <= max_len[$t])) || continue
    if [[ $t == mesh && $f != tests/fuzz/* ]]; then
      case "${f,,}" in
        *.stl) printf '\x00' ;; *.obj) printf '\x01' ;; *.dae) printf '\x02' ;; *) continue ;;
      esac >"$work/corpus/$t/$(basename "$f").bin"
      cat "$f" >>"$work/corpus/$t/$(basename "$f").bin"
    else
      cp "$f" "$work/corpus/$t/$(basename "$f")"
    fi
  done
}
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus/$t" "$work/findings/$t"
  seed "$t" tests/fuzz/seeds/"$t"/* tests/fuzz/regressions/"$t"/*
  case $t in
    urdf) seed urdf examples/models/*.urdf ${robots:+$(find "$robots" -name '*.urdf')} ;;
    mjcf) seed mjcf examples/models/*.xml tests/models/*.xml \
      $(find /usr/share/mujoco/model -name '*.xml' 2>/dev/null) ;;
    mesh) seed mesh ${robots:+$(find "$robots" -iname '*.stl' -o -iname '*.obj' -o -iname '*.dae')} ;;
  esac
done

# assimp 5.2 leaks what its COLLADA importer built when it gives up on a file (an unresolved
# <instance_visual_scene>, say; tests/fuzz/regressions/mesh): leaks from inside it are not ours
echo "leak:libassimp.so" >"$work/lsan.supp"

# one target: libFuzzer's log in $work/<target>.log, findings in $work/findings/<target>/
run() {
  local t="$1" dict=()
  [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" LSAN_OPTIONS="suppressions=$work/lsan.supp" \
    "$dir/tests/fuzz/fuzz_$t" "$work/corpus/$t" "${dict[@]}" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$t]}" \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$work/findings/$t/" \
    >"$work/$t.log" 2>&1 || true
}
echo "[fuzz] ${seconds} s per target, $jobs at a time: ${targets[*]} (logs in $work)"
running=0
for t in "${targets[@]}"; do
  run "$t" &
  if ((++running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

printf '\n%-8s %12s %8s %8s %8s  %s\n' target executions exec/s cov ft findings
found=0
for t in "${targets[@]}"; do
  log="$work/$t.log"
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | awk '{print $2}' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  ft=$(grep -o 'ft: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  n=$(find "$work/findings/$t" -type f | wc -l)
  found=$((found + n))
  printf '%-8s %12s %8s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$n"
  find "$work/findings/$t" -type f -printf '           %p\n'
done
echo "[fuzz] corpora, logs and findings in $work"
((found == 0)) || exit 1
