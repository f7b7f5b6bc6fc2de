#!/usr/bin/env bash
# End to end under podman (issue 15, item 4): `gpurun -n 2 --container IMAGE` trains mnist_cnn
# (MPI data parallel, 2 ranks, CPU) with each rank in its own rootful podman container joined to
# the host's mpirun (host network and IPC, OMPI_*/PMIX_* passed in). No registry is reachable, so
# the image is made here: a root filesystem holding mnist_cnn, its libraries (ldd) and Open MPI's
# and PMIx's plugin folders, taken from this machine, then `podman import`.
# Skips (77) and says why: no podman (scripts/install-deps.sh --containers installs it), not root,
# or podman cannot start a container at all here (the OCI runtime fails before the program).
#   container_podman_mnist_test.sh GPURUN MNIST_CNN DATA_DIR
set -euo pipefail
gpurun=$1 mnist=$2 data=$3
skip() { echo "SKIP: $*"; exit 77; }
command -v podman >/dev/null || skip "podman is not installed (scripts/install-deps.sh --containers)"
[[ $(id -u) == 0 ]] || skip "rootful podman is needed (host network and IPC for MPI); run as root"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-podman.XXXXXX")
image=localhost/gpurun-e2e:$$
cleanup() { podman rmi -f "$image" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
root=$work/rootfs

# put PATH...: copies each file (following links) to the same path under $root.
put() {
  local f
  for f; do
    [[ -e $f ]] || continue
    mkdir -p "$root$(dirname "$f")"
    cp -aL "$f" "$root$f"
  done
}
libs_of() { ldd "$@" 2>/dev/null | grep -o '/[^ ]*' | sort -u; }
# Can podman start a container here at all (a one-program image, seconds)? If not, the OCI
# runtime's error is the machine's: a skip that quotes it.
mkdir -p "$work/probe"
for f in /bin/true $(libs_of /bin/true); do
  mkdir -p "$work/probe$(dirname "$f")"; cp -L "$f" "$work/probe$f"
done
tar -C "$work/probe" -cf "$work/probe.tar" .
podman import -q "$work/probe.tar" "$image" >/dev/null
out=$(podman run --rm --network=host --ipc=host "$image" /bin/true 2>&1) ||
  skip "podman cannot start a container here: $out"
podman rmi -f "$image" >/dev/null

mkdir -p "$root"/{usr/bin,tmp,dev/shm,proc,sys,etc}
chmod 1777 "$root/tmp"
cp -L "$mnist" "$root/usr/bin/mnist_cnn"
plugins=(/usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /etc/openmpi
  /usr/share/openmpi /usr/share/pmix /usr/lib/x86_64-linux-gnu/hwloc)
for d in "${plugins[@]}"; do [[ -e $d ]] && { mkdir -p "$root$(dirname "$d")"; cp -aL "$d" "$root$d"; }; done
mapfile -t sos < <(find "${plugins[@]}" -name '*.so*' -type f 2>/dev/null)
mapfile -t needed < <(libs_of "$mnist" "${sos[@]}")
put "${needed[@]}"
echo "root:x:0:0:root:/root:/bin/sh" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"
tar -C "$root" -cf "$work/rootfs.tar" .
podman import -q "$work/rootfs.tar" "$image" >/dev/null
echo "image $image: $(du -sh "$work/rootfs.tar" | cut -f1) from this machine's files"

if ! out=$(podman run --rm --network=host --ipc=host "$image" /usr/bin/mnist_cnn --version 2>&1); then
  echo "FAIL: mnist_cnn --version in the image:"; echo "$out"; exit 1
fi

# The data and the report live under the working folder, which gpurun mounts in each container.
mkdir "$work/run" && cp -r "$data" "$work/run/mnist" && cd "$work/run"
"$gpurun" -n 2 --container "$image" --container-runtime podman -- \
  mnist_cnn --device cpu --data mnist --epochs 1 --threads 1 --report r.json
world=$(python3 -c 'import json; print(json.load(open("r.json"))["world_size"])')
[[ $world == 2 ]] || { echo "FAIL: world_size $world, want 2 (ranks did not join one MPI world)"; exit 1; }
echo "ok: 2 ranks trained in podman containers, one MPI world"
