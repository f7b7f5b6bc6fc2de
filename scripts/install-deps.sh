#!/usr/bin/env bash
# Installs gpurun's build, test and run dependencies from Debian's packages (Debian 12).
# Idempotent: packages already present are skipped without touching apt.
#   scripts/install-deps.sh           build + tests (Open MPI, Slurm, munge, data)
#   scripts/install-deps.sh --bench   also the benchmark peers (python3-torch, gnuplot)
#   scripts/install-deps.sh --containers  also podman (launcher_container_podman, else skipped)
set -euo pipefail

core=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libboost-program-options-dev libboost-dev libboost-context-dev libfmt-dev nlohmann-json3-dev
  ccache
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev libdnnl-dev libblis-dev zlib1g-dev libsqlite3-dev sqlite3
  libhwloc-dev
  slurm-wlm munge
  elfutils
  dataset-fashion-mnist
  gnuplot-nox
  chromium python3-prometheus-client
  jupyterhub node-configurable-http-proxy python3-pamela python3-notebook python3-ipykernel
  python3-websocket
  nodejs npm
  procps psmisc util-linux iproute2 passwd tmux
  python3 python3-venv
  help2man man-db groff-base lmod bash-completion file
  clang libclang-rt-14-dev
)
bench=(python3-torch python3-numpy hyperfine)
containers=(podman)

want=("${core[@]}")
for arg in "$@"; do
  case "$arg" in
    --bench) want+=("${bench[@]}") ;;
    --containers) want+=("${containers[@]}") ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (expected --bench, --containers or --help)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# nodejs/npm may come from outside Debian on some machines; a working npm is enough.
if command -v npm >/dev/null 2>&1; then
  filtered=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# slurm-wlm's postinst tries to start daemons; in containers without systemd that must not fail.
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/gpurun-apt.log 2>&1 || {
  tail -n 40 /tmp/gpurun-apt.log >&2
  echo "install-deps: apt-get install failed (full log: /tmp/gpurun-apt.log)" >&2
  exit 1
}
# Debian's jupyterhub enables and starts jupyterhub.service (root, PAM logins, every interface,
# a configuration file that does not exist). Tests start their own hub on free localhost ports;
# a machine that installs it for them gets no hub of its own (launcher/queue/README.md, "Jupyter
# for a lab or club", says how to run one).
if [[ " ${missing[*]} " == *" jupyterhub "* && -d /run/systemd/system ]]; then
  $sudo systemctl disable --now jupyterhub.service >/dev/null 2>&1 || true
  echo "install-deps: jupyterhub.service disabled and stopped (Debian's package starts it)"
fi
echo "install-deps: done"
