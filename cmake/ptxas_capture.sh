#!/bin/sh
# CUDA compiler launcher: runs the compile (through ccache when it is passed first) and keeps
# nvcc's `-Xptxas=-v` lines beside the object as <object>.ptxas, for cmake/ptxas_report.cmake.
# Everything else nvcc prints (errors, warnings) still goes to stderr.
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out="$a"
  prev="$a"
done
[ -z "$out" ] && exec "$@"
"$@" 2> "$out.log"
rc=$?
grep -Ev '^ptxas info|bytes stack frame' "$out.log" >&2
grep -E '^ptxas info|bytes stack frame' "$out.log" > "$out.ptxas"
rm -f "$out.log"
exit $rc
