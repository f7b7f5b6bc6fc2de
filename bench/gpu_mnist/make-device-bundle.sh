#!/usr/bin/env bash
# make-device-bundle.sh: run HERE (the CI-like machine), before a device run. The lent GPU
# machine's image has CUDA 13, CMake, ninja and PyTorch but not this project's Debian
# dependencies (Boost, fmt, nlohmann-json, GoogleTest, OpenBLAS, Open MPI), and nothing can be
# installed there. So: build the GPU binaries here (CUDA on, MPI off: no Open MPI tree to
# relocate), strip them, and pack them with the non-system, non-CUDA libraries they load into
# .devbundle/bundle.tar.xz (kept out of git through .git/info/exclude). cuDNN, NCCL and cuBLAS
# are NOT packed (hundreds of MB): run-on-device.sh finds the device's own (/usr/local/cuda or
# PyTorch's nvidia-* wheels).
#   bench/gpu_mnist/make-device-bundle.sh          # then: run tool, carry [".devbundle",
#                                                  #   "data/fashion"], command
#                                                  #   bench/gpu_mnist/run-on-device.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build-devbundle}
jobs=${JOBS:-2}
targets=(mnist_cnn kernels_test kernels_cuda_test nccl_allreduce_test gpu_train_test
  gpu_watchdog_test gpu_sampler_nvml_test)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPURUN_ENABLE_CUDA=ON \
  -DGPURUN_ENABLE_MPI=OFF "-DCMAKE_CUDA_ARCHITECTURES=80;90" -DGPURUN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

stage=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "make-device-bundle: $t was not built" >&2; exit 1; }
  cp "$f" "$stage/bin/"
  strip --strip-debug "$stage/bin/$t"
done
# Libraries the binaries load that a CUDA image will not have. System libraries (glibc,
# libstdc++, libgcc) are newer there; the big CUDA libraries come from the device.
skip='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64|libcuda|libcublas|libcublasLt|libcudnn.*|libnccl)\.so'
for t in "${targets[@]}"; do
  ldd "$stage/bin/$t" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  base=$(basename "$lib")
  if ! [[ $base =~ $skip ]]; then cp -L "$lib" "$stage/lib/$base"; fi
done
cp "$root/bench/gpu_mnist/run.sh" "$root/bench/gpu_mnist/torch_gpu_mnist.py" "$stage/"
git -C "$root" rev-parse HEAD > "$stage/COMMIT"
mkdir -p "$root/.devbundle"
exclude=$(git -C "$root" rev-parse --path-format=absolute --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devbundle/' "$exclude" 2>/dev/null || echo '/.devbundle/' >> "$exclude"
tar -C "$stage" -cJf "$root/.devbundle/bundle.tar.xz" .
ls -la "$root/.devbundle/bundle.tar.xz"
echo "libraries packed: $(ls "$stage/lib" | tr '\n' ' ')"
echo "next: run tool with carry [\".devbundle\", \"data/fashion\"] and command bench/gpu_mnist/run-on-device.sh"
