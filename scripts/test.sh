#!/usr/bin/env bash
# Installs dependencies, configures, builds and runs every test with CTest, in three parts:
#   main     build/: the normal build (CUDA compiled by nvcc where it is installed); every test,
#            the GPU ones exit 77 (skipped) without a device
#   standin  build-standin/ (-DGPURUN_CUDA_STANDIN=ON): the GPU path compiled as C++ against the
#            CPU stand-in of CUDA, cuBLAS, cuDNN and NCCL (tests/standin): every GPU test, none
#            skipped, in three block orders; the GPU path under gpurun; mutation checks
#   asan     build-asan/: the stand-in's unit tests once more under AddressSanitizer and UBSan
# With ccache (scripts/install-deps.sh installs it) the builds share what they compile alike, and
# so do runs in other clones on the same machine: the cache is the user's (~/.cache/gpurun-ccache,
# or CCACHE_DIR), not the clone's, so a fresh clone compiles only what changed. A hit is the same
# object the compiler would make (ccache hashes the preprocessed source, compiler and flags).
#   ./scripts/test.sh                                   everything (CI runs this through .ci/run)
#   BUILD_DIR=build-x ./scripts/test.sh -R hostlist     extra args go to the main part's ctest
#   GPURUN_TEST_PARTS=standin ./scripts/test.sh         only some parts (comma-separated)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
parts=${GPURUN_TEST_PARTS:-main,standin,asan}

./scripts/install-deps.sh
if [[ -x scripts/fetch-data.sh ]]; then ./scripts/fetch-data.sh; fi

gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
launcher=()
if command -v ccache >/dev/null 2>&1; then
  # Paths below the checkout are hashed relative to it, so the build folders, the mutation
  # checks' copy and other clones hit each other's objects.
  export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-$root}/.cache}/gpurun-ccache}
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=true
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# configure DIR ARGS...: once per build folder.
configure() {
  local dir=$1
  shift
  [[ -f $dir/CMakeCache.txt ]] && return 0
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPURUN_WERROR=ON \
    "${launcher[@]}" "$@"
}
part() { [[ ,$parts, == *,$1,* ]]; }
say_time() { echo "test.sh: $1 took $((SECONDS - $2)) s"; }

# The stand-in and ASan builds (compile only) go in the background at the lowest priority while
# the main tests run: many of those wait (on Slurm, on timeouts), and nice 19 leaves the tests
# every cycle they ask for. A failing part does not stop the others; the script fails at the end.
standin_args=(-DGPURUN_CUDA_STANDIN=ON -DGPURUN_BUILD_BENCH=OFF
  "-DGPURUN_STANDIN_GPURUN=$root/$build/launcher/gpurun")
asan_targets=(kernels_cuda_test cuda_backend_test cuda_first_run_test cuda_watchdog_test
  nccl_allreduce_test cuda_collectives_test standin_rules_test)
build_gpu_parts() {
  if part standin; then
    configure build-standin "${standin_args[@]}"
    cmake --build build-standin -j "$(nproc)"
  fi
  if part asan; then
    # Only the GPU path is instrumented (GPURUN_SANITIZE): the rest is the stand-in's objects.
    configure build-asan "${standin_args[@]}" -DGPURUN_SANITIZE=address,undefined
    cmake --build build-asan -j "$(nproc)" --target "${asan_targets[@]}"
  fi
}
failed=()

gpu_build_pid=
if part main; then
  t=$SECONDS
  configure "$build"
  cmake --build "$build" -j "$(nproc)"
  if part standin || part asan; then
    mkdir -p build-standin
    (
      renice -n 19 -p "$BASHPID" >/dev/null || true
      build_gpu_parts  # errexit holds here: not part of an && list
    ) >build-standin/gpu-parts-build.log 2>&1 &
    gpu_build_pid=$!
  fi
  (cd "$build" && ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@") || failed+=(main)
  say_time "the main build and its tests" "$t"
fi

t=$SECONDS
if [[ -n $gpu_build_pid ]]; then
  wait "$gpu_build_pid" || { tail -n 60 build-standin/gpu-parts-build.log; exit 1; }
else
  build_gpu_parts
fi
say_time "the rest of the stand-in and ASan builds" "$t"

if part standin; then
  t=$SECONDS
  (cd build-standin && ctest --output-on-failure --timeout 900 -j "$(nproc)") || failed+=(standin)
  say_time "the stand-in tests" "$t"
fi

if part asan; then
  t=$SECONDS
  # The unit tests only: the programs' runs are the stand-in part's. The stand-in and Open MPI
  # keep some memory to the end on purpose: leaks are not the point. The two 100-step loss
  # comparisons with the CPU (numerics, 150 of the instrumented backend test's 200 s) are left to
  # the stand-in part; the backend's steps still run here, in its checkpoint test.
  (cd build-asan && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 GTEST_FILTER='-*First100LossesFollowTheCpu' \
    ctest --output-on-failure --timeout 900 -j "$(nproc)" -L standin -R "_forward$" -E "e2e") \
    || failed+=(asan)
  say_time "the stand-in unit tests under ASan and UBSan" "$t"
fi

if ((${#failed[@]})); then
  echo "test.sh: tests failed in: ${failed[*]}" >&2
  exit 1
fi
echo "test.sh: every part passed ($parts)"
