#!/usr/bin/env bash
# chroot-check.sh: tries the device bundle, before any GPU minute is spent, in a root filesystem
# that has none of this project's dependencies, the way the device machine lacks them: a Debian 12
# minbase (no Boost, fmt, OpenBLAS, SQLite, Open MPI, PMIx, hwloc, libevent; no xz). Only what a
# device call would send goes in (tracked + untracked-not-ignored files, plus .devbundle and
# data/fashion), with this machine's /usr/local/cuda mounted read-only in its place,
# and scripts/device-check.sh runs there as on the device. No GPU here: expect exit 77, every GPU
# step "no GPU" and every CPU step ok (the relocated mpirun, gpurun, gpuq, kernels_test,
# cuda_probe's 77, the GPU test programs' 77, the two-rank loss comparison on the CPU).
#
#   debootstrap --variant=minbase bookworm /tmp/devroot http://deb.debian.org/debian   # once
#   scripts/device-bundle.sh && scripts/device/chroot-check.sh /tmp/devroot [device-check args]
# Needs root (chroot, mounts in a private mount namespace that vanish with it). python3 is added
# to the root with apt if missing (the device has python3), after checking that the project's
# libraries are absent. The results land in /tmp/devroot/out (summary.md, logs.tar.gz, ...).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { sed -n '2,16p' "$0"; exit 2; }
rootfs=$(realpath "$1"); shift
fail() { echo "chroot-check.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (chroot and mounts)"
[ -x "$rootfs/bin/bash" ] && [ -d "$rootfs/usr/lib/x86_64-linux-gnu" ] ||
  fail "$rootfs is not a root filesystem: debootstrap --variant=minbase bookworm $rootfs"
[ -f "$repo/.devbundle/bundle.tar.xz" ] || fail "no bundle: run scripts/device-bundle.sh first"

# The check means something only if the root really lacks what the bundle must bring.
present=$(cd "$rootfs/usr/lib/x86_64-linux-gnu" && ls libboost_program_options.so* libfmt.so* \
  libopenblas.so* libmpi.so* libopen-pal.so* libpmix.so* libhwloc.so* libevent_core* \
  libgfortran.so* 2>/dev/null || true)
[ -z "$present" ] || fail "$rootfs already has $present: use a fresh minbase root"
[ ! -e "$rootfs/usr/bin/mpirun" ] || fail "$rootfs has an mpirun: use a fresh minbase root"
if ! chroot "$rootfs" python3 -c 'import json, tarfile, lzma' 2>/dev/null; then
  echo "chroot-check: adding python3 to $rootfs (the device has one)"
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  chroot "$rootfs" apt-get install -y -qq --no-install-recommends python3 >/dev/null
fi
grep -q localhost "$rootfs/etc/hosts" 2>/dev/null || cp /etc/hosts "$rootfs/etc/hosts"

# What a device call sends, in a fresh copy.
dest=$rootfs/work/repo
rm -rf "$dest" "$rootfs/out"
mkdir -p "$dest" "$rootfs/out" "$rootfs/usr/local"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
  xargs -0 cp --parents -t "$dest" 2>/dev/null || true)
(cd "$repo" && cp -r --parents .devbundle data/fashion "$dest/")
du -sh --apparent-size "$dest"

cuda=$(readlink -f /usr/local/cuda)
mkdir -p "$rootfs$cuda"
ln -sfn "$cuda" "$rootfs/usr/local/cuda"
# A private mount namespace: the binds disappear with it, whatever happens.
unshare -m --propagation private bash -s "$rootfs" "$cuda" "$@" <<'EOF'
set -e
rootfs=$1 cuda=$2; shift 2
mount -t proc proc "$rootfs/proc"
mount --rbind /sys "$rootfs/sys"
mount --rbind /dev "$rootfs/dev"
mount -t tmpfs tmpfs "$rootfs/tmp"
mount --bind "$cuda" "$rootfs$cuda" && mount -o remount,ro,bind "$rootfs$cuda"
set +e
chroot "$rootfs" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin OUT=/out \
  /bin/bash -c 'cd /work/repo && time scripts/device-check.sh "$@"' device-check "$@"
echo "chroot-check: device-check exited $?; results in $rootfs/out"
EOF
