#!/usr/bin/env bash
# run_fuzz.sh: builds fuzz_allocation.cc with clang's libFuzzer (and AddressSanitizer, UBSan) from
# the allocation readers' sources alone, and runs it for a bounded time on a seed corpus made from
# the launcher's fixtures (CTest: gpurun_fuzz_allocation, issue 26).
#
#   tests/launcher/fuzz/run_fuzz.sh SOURCE_DIR WORK_DIR [SECONDS]
#
# The build is cheap: seven sources, compiled again only when one changed. Exit 77 (skipped) when
# clang++ or libFuzzer (Debian's clang and libclang-rt-14-dev, scripts/install-deps.sh) is
# missing; 1 with the crashing input saved in WORK_DIR when the fuzzer finds something.
set -euo pipefail
src=$(cd "$1" && pwd); work=$2; secs=${3:-25}
mkdir -p "$work"; work=$(cd "$work" && pwd); export W=$work
cxx=$(command -v clang++-14 || command -v clang++ || true)
[[ -n $cxx ]] || { echo "run_fuzz: SKIP: no clang++ (apt-get install clang)"; exit 77; }
srcs=("$src/tests/launcher/fuzz/fuzz_allocation.cc")
for f in alloc/hostlist alloc/env_util alloc/detect alloc/detect_batch alloc/detect_slurm plan/plan; do
  srcs+=("$src/launcher/src/$f.cc")
done
srcs+=("$src/common/src/terminal.cc")
bin=$work/fuzz_allocation
if [[ ! -x $bin ]] || [[ -n $(find "${srcs[@]}" "$src/launcher/include" "$src/launcher/src/alloc/env_util.h" -newer "$bin" -print -quit) ]]; then
  echo "run_fuzz: building $bin with $cxx"
  flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
    -I"$src/launcher/include" -I"$src/launcher/src" -I"$src/common/include")
  cc=("$cxx"); command -v ccache >/dev/null && cc=(ccache "$cxx")  # one source a call: cacheable
  objs=()
  for f in "${srcs[@]}"; do objs+=("$work/$(basename "$f" .cc).o"); done
  printf '%s\n' "${srcs[@]}" | xargs -P 2 -I{} sh -c '"$@" -c "$0" -o "$W/$(basename "$0" .cc).o"' {} \
    "${cc[@]}" "${flags[@]}" 2>"$work/build.log" || { cat "$work/build.log"; exit 1; }
  if ! "$cxx" "${flags[@]}" "${objs[@]}" -lfmt -o "$bin.tmp" 2>>"$work/build.log"; then
    if grep -q 'clang_rt.fuzzer' "$work/build.log"; then
      echo "run_fuzz: SKIP: clang has no libFuzzer (apt-get install libclang-rt-14-dev)"; exit 77
    fi
    cat "$work/build.log"; exit 1
  fi
  mv "$bin.tmp" "$bin"
fi

# Seeds: each reader's fixtures, behind the byte that picks it.
corpus=$work/corpus; rm -rf "$corpus"; mkdir -p "$corpus"
data=$src/tests/launcher/data
n=0
seed() { printf "\\x$(printf %02x "$1")" >"$corpus/seed-$n"; cat >>"$corpus/seed-$n"; n=$((n + 1)); }
while IFS=$'\t' read -r expr _; do [[ -n $expr && $expr != \#* ]] && seed 0 <<<"$expr"; done <"$data/hostlist_vectors.tsv"
for t in '2(x3),1' '3(x2),2,11(x4)' '13(x10)' 1; do printf %s "$t" | seed 1; done
for e in "$data"/*.env; do seed 2 <"$e"; done
seed 3 <"$data/pbspro.nodefile"; seed 3 <"$data/torque.nodefile"
seed 4 <"$data/lsf.djob_hostfile"
printf 'h1 4 h2 4' | seed 5; printf 'batch1 1 a01n01 6 a01n02 6' | seed 5
printf 'node[01-03]\n3,2(x2)' | seed 6

echo "run_fuzz: $n seeds, ${secs} s"
cd "$work"  # crash-*, leak-*, timeout-* land here
ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 \
  -max_len=4096 -print_final_stats=1 "$corpus" 2>"$work/fuzz.log" || {
  tail -n 40 "$work/fuzz.log"; echo "run_fuzz: FAIL: a finding, its input saved in $work"; exit 1; }
grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$work/fuzz.log" || true
echo "run_fuzz: ok, no finding in ${secs} s"
