#!/usr/bin/env bash
# Installs dependencies, configures, builds and runs every test with CTest.
#   ./scripts/test.sh            everything (CI runs this through .ci/run)
#   BUILD_DIR=build-x ./scripts/test.sh -R hostlist   extra args go to ctest
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}

./scripts/install-deps.sh
if [[ -x scripts/fetch-data.sh ]]; then ./scripts/fetch-data.sh; fi

gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPURUN_WERROR=ON
fi
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure --timeout 900 "$@"
