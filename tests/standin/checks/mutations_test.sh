#!/usr/bin/env bash
# mutations_test.sh: shows that the stand-in tests catch real bugs. Each mutation below is a deliberate
# bug applied to a scratch copy of the sources; the copy is built against the CUDA stand-in and the
# named test must then FAIL. A mutation that no longer applies (its text is gone) or that does not
# compile is an error of this script, never a pass.
#   mutations_test.sh SOURCE_DIR SCRATCH_DIR DATA_DIR GPURUN [NAME...]   (default: every mutation)
# GPURUN: the gpurun the stand-in build is configured with (its checks are not run here).
# The copy sits at SCRATCH_DIR/src with its build in SCRATCH_DIR/src/build-standin, the same
# relative layout as SOURCE_DIR/build-standin, so with ccache (scripts/test.sh sets it up) only
# the mutated file is compiled again.
set -euo pipefail
src=$(cd "$1" && pwd) scratch=$2 data=$(cd "$3" && pwd) gpurun=$4
shift 4
mpirun_=(mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2)

# name|file|text to find (exactly once)|replacement|target|test command (run in the build dir)
mutations=(
  "syncthreads|kernels/cuda/bias_act.cu|  part[threadIdx.x] = s;\n  __syncthreads();|  part[threadIdx.x] = s;|kernels_cuda_test|tests/kernels/cuda/kernels_cuda_test --gtest_filter=CudaOps.BiasActMatchesCpu"
  "transpose|kernels/cuda/dense.cu|CUBLAS_OP_T, CUBLAS_OP_N, d.out, d.batch|CUBLAS_OP_N, CUBLAS_OP_N, d.out, d.batch|kernels_cuda_test|tests/kernels/cuda/kernels_cuda_test --gtest_filter=CudaOps.DenseMatchesCpu"
  "bound|kernels/cuda/sgd.cu|i < n;|i <= n;|kernels_cuda_test|tests/kernels/cuda/kernels_cuda_test --gtest_filter=CudaOps.SgdMatchesCpu"
  "join|runtime/src/cuda/cuda_backend.cc|    GPURUN_CUDA_CHECK(cudaStreamWaitEvent(s, ev_ar_.get(), 0));\n||mnist_cnn|env GPURUN_STANDIN_DEVICES=2 ${mpirun_[*]} examples/mnist_cnn/mnist_cnn --device cuda --data $data --epochs 1 --max-steps 3"
  "ncclsum|runtime/src/cuda/nccl_comm.cc|ncclFloat32, ncclSum, comm_|ncclFloat32, ncclMax, comm_|nccl_allreduce_test|env GPURUN_STANDIN_DEVICES=2 ${mpirun_[*]} tests/runtime/cuda/nccl_allreduce_test"
)

fail() { echo "mutations: FAIL: $*" >&2; exit 1; }

# A copy of the sources (tracked files and new ones not ignored), without builds or data.
rm -rf "$scratch/src"
mkdir -p "$scratch/src"
(cd "$src" && git ls-files -z --cached --others --exclude-standard) |
  (cd "$src" && tar -c --null -T - -f -) | tar -x -C "$scratch/src"
build=$scratch/src/build-standin
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$scratch/src" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGPURUN_WERROR=ON -DGPURUN_CUDA_STANDIN=ON -DGPURUN_BUILD_BENCH=OFF \
  "-DGPURUN_STANDIN_GPURUN=$gpurun" "${launcher[@]}" >/dev/null

# mutate FILE FIND REPLACE: the replacement of FIND, which must occur exactly once.
mutate() {
  python3 - "$scratch/src/$1" "$2" "$3" <<'PY'
import sys
path, find, repl = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3].replace("\\n", "\n")
text = open(path).read()
n = text.count(find)
if n != 1:
    sys.exit(f"{path}: the mutation's text occurs {n} times, not once")
open(path, "w").write(text.replace(find, repl))
PY
}

want=("$@")
caught=0
for m in "${mutations[@]}"; do
  IFS='|' read -r name file find repl target cmd <<<"$m"
  if ((${#want[@]})) && [[ " ${want[*]} " != *" $name "* ]]; then continue; fi
  mutate "$file" "$find" "$repl" || fail "$name: the mutation no longer applies"
  cmake --build "$build" --target "$target" >"$scratch/$name.build.log" 2>&1 ||
    { tail -20 "$scratch/$name.build.log"; fail "$name: the mutant does not compile"; }
  rc=0
  (cd "$build" && timeout 300 $cmd) >"$scratch/$name.test.log" 2>&1 || rc=$?
  cp "$src/$file" "$scratch/src/$file"  # undo
  if ((rc == 0)); then
    tail -20 "$scratch/$name.test.log"
    fail "$name ($file): the mutant passed '$cmd'"
  fi
  ((rc != 124)) || fail "$name: the test hung on the mutant (timeout) instead of failing"
  echo "caught $name ($file): $(grep -m1 -E 'Failure|FAILED|stand-in:|error' "$scratch/$name.test.log" | cut -c1-160)"
  caught=$((caught + 1))
done
((caught > 0)) || fail "no mutation ran"
echo "PASS: $caught mutation(s), each made a stand-in test fail"
