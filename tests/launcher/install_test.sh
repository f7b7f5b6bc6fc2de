#!/usr/bin/env bash
# `cmake --install` places gpurun, gpuq and the libraries with a CMake package config that an
# outside project can find_package() and link: a launcher consumer, and examples/custom_data,
# which declares LeNet and trains it through the installed runtime.
set -euo pipefail
build=$1; here=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
for f in bin/gpurun bin/gpuq bin/mnist_cnn bin/lenet lib/cmake/gpurun/gpurunConfig.cmake \
  include/gpurun/launcher/hostlist.h include/gpurun/runtime/trainer.h include/gpurun/kernels/conv2d.h \
  share/gpurun/jupyterhub_config.py; do
  [[ -e $tmp/prefix/$f ]] || { echo "FAIL: $f not installed"; find "$tmp/prefix" | head -50; exit 1; }
done
# gpuq_spawner under a prefix other than /usr: lib/python3.X/dist-packages, X of the hub's python3.
spawner=$(find "$tmp/prefix/lib" -path '*/python3.*/dist-packages/gpuq_spawner.py')
[[ -n $spawner ]] || { echo "FAIL: gpuq_spawner.py not in PREFIX/lib/python3.X/dist-packages"; exit 1; }
# The runtime's public surface is these headers; the layers, buffers, sampler, checkpoint file
# and exchanges stay in runtime/src, and examples/custom_data below builds from these alone.
rt_headers=$(cd "$tmp/prefix/include/gpurun/runtime" && ls | tr '\n' ' ')
[[ $rt_headers == "backend.h dataset.h environment.h idx.h model_spec.h process_group.h report.h stop_signal.h trainer.h " ]] ||
  { echo "FAIL: installed runtime headers: $rt_headers"; exit 1; }
"$tmp/prefix/bin/gpurun" hostlist expand 'n[1-2]' | tr '\n' ' ' | grep -qx 'n1 n2 ' || { echo "FAIL: installed gpurun"; exit 1; }
cmake -S "$here/install_consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/cfg.log" 2>&1 ||
  { cat "$tmp/cfg.log"; echo "FAIL: find_package(gpurun)"; exit 1; }
cmake --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; echo "FAIL: consumer build"; exit 1; }
out=$("$tmp/consumer/consumer")
[[ $out == "16 node[01-16]" ]] || { echo "FAIL: consumer printed '$out'"; exit 1; }
# examples/custom_data as its own project, against the installed runtime, as runtime/README.md
# tells a user to build it: it trains LeNet on its in-memory squares and learns them.
cmake -S "$here/../../examples/custom_data" -B "$tmp/custom" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  >"$tmp/cfg.log" 2>&1 || { cat "$tmp/cfg.log"; echo "FAIL: examples/custom_data: find_package"; exit 1; }
cmake --build "$tmp/custom" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; echo "FAIL: custom_data build"; exit 1; }
rt=$("$tmp/custom/custom_data" --epochs 2 | tail -n 1) || { echo "FAIL: custom_data: $rt"; exit 1; }
[[ $rt =~ ^lenet\ 431080\ parameters,\ test\ accuracy\ (1|0\.9[0-9]*)$ ]] ||
  { echo "FAIL: custom_data printed '$rt' (want LeNet's 431080 parameters, accuracy >= 0.9)"; exit 1; }
# --device cuda trains where a GPU can, and is otherwise one clear error with status 1.
if ! cuda=$("$tmp/custom/custom_data" --device cuda --epochs 1 2>&1); then
  [[ $cuda == "custom_data"*"error: "*[Cc][Uu][Dd][Aa]* && $(wc -l <<<"$cuda") == 1 ]] ||
    { echo "FAIL: --device cuda without a usable device said: $cuda"; exit 1; }
fi
"$tmp/prefix/bin/mnist_cnn" --help >/dev/null || { echo "FAIL: installed mnist_cnn --help"; exit 1; }
"$tmp/prefix/bin/lenet" --help >/dev/null || { echo "FAIL: installed lenet --help"; exit 1; }
echo "ok: installed gpurun, gpuq, mnist_cnn, lenet, and find_package(gpurun) consumers of the launcher and the runtime work ($out; $rt)"
