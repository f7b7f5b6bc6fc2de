#!/usr/bin/env bash
# function-size.sh [BUILD_DIR]: lists every function over 80 lines in the project's C++ and CUDA
# sources, tests and benchmarks included, with clang-tidy's readability-function-size over the
# build's compile_commands.json (configured with CUDA, so the .cu files are in it). Exit 1 when
# there is one. About 7 to 10 minutes on 2 cores.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
[[ -f $build/compile_commands.json ]] || { echo "function-size.sh: no $build/compile_commands.json (configure first)" >&2; exit 2; }
tidy=$(command -v clang-tidy || command -v clang-tidy-14) ||
  { echo "function-size.sh: clang-tidy not found (apt-get install clang-tidy)" >&2; exit 2; }
python3 - "$build/compile_commands.json" >"$build/function-size-sources.txt" <<'PY'
import json, sys
seen = set()
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if f in seen or "/build" in f:
        continue
    seen.add(f)
    print(f)
PY
found=$(xargs -a "$build/function-size-sources.txt" -P "$(nproc)" -I{} "$tidy" -p "$build" --quiet \
  --checks='-*,readability-function-size' \
  --config='{CheckOptions: [{key: readability-function-size.LineThreshold, value: 80}]}' {} \
  2>/dev/null | grep "warning: function" || true)
n=$(wc -l <"$build/function-size-sources.txt")
if [[ -n $found ]]; then
  echo "$found"
  echo "function-size.sh: $(wc -l <<<"$found") function(s) over 80 lines in $n sources"
  exit 1
fi
echo "function-size.sh: no function over 80 lines in $n sources"
