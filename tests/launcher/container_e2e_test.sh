#!/usr/bin/env bash
# gpurun --container for real (not --dry-run): each rank's wrapper starts the runtime's command.
# podman and apptainer cannot run here (no GPU; podman's crun cannot set rlimits in this VM), so
# stand-ins take their place on PATH and say so: they check the command line gpurun built, then
# run the program after the image with ONLY the variables passed by --env (env -i) from the
# folder given by --workdir/--pwd. What is checked: every rank's variables and heartbeat reach
# the program, the working folder, the image, and a failing rank's status.
set -euo pipefail
gpurun=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/work"
for rt in podman apptainer; do
  cat > "$tmp/bin/$rt" <<'SHIM'
#!/usr/bin/env bash
# Stand-in for a container runtime (tests/launcher/container_e2e_test.sh).
set -euo pipefail
rt=$(basename "$0")
case "$rt $1 ${2:-}" in "podman run "*|"apptainer exec "*) shift ;; *) echo "$rt: unexpected: $*" >&2; exit 98 ;; esac
envs=() wd=
while (($#)); do
  case $1 in
    --env=*) e=${1#--env=}
      # apptainer reads --env as CSV: a quoted field ("" for ") is one KEY=VALUE, commas and all.
      if [[ $rt == apptainer && $e == \"*\" ]]; then e=${e:1:${#e}-2}; e=${e//\"\"/\"}
      elif [[ $rt == apptainer && $e == *[,\"]* ]]; then echo "$rt: --env $e is cut at a comma or refused" >&2; exit 96; fi
      envs+=("$e") ;;
    --workdir=* | --pwd=*) wd=${1#*=} ;;
    --rm | --network=host | --ipc=host | --nv | --volume=* | --bind=* | --device=*) ;;
    -*) echo "$rt: unexpected option $1" >&2; exit 98 ;;
    *) break ;;
  esac
  shift
done
[[ $1 == localhost/gpurun:test ]] || { echo "$rt: unexpected image $1" >&2; exit 97; }
shift
cd "$wd"
exec env -i PATH="$PATH" "${envs[@]}" "$@"
SHIM
  chmod +x "$tmp/bin/$rt"
done
export PATH="$tmp/bin:$PATH"
cd "$tmp/work"
prog='echo "rank=$RANK/$WORLD_SIZE local=$LOCAL_RANK master=$MASTER_ADDR:$MASTER_PORT hb=${GPURUN_HEARTBEAT:+set} home=${HOME:-unset} pwd=$(pwd) tf=$TF_CONFIG"'
for rt in podman apptainer auto; do
  out=$("$gpurun" -q --scheduler local --launcher local -n 2 --container localhost/gpurun:test \
    --container-runtime $rt -- sh -c "$prog" 2>&1) || { echo "FAIL($rt): gpurun failed:"; echo "$out"; exit 1; }
  for r in 0 1; do
    # TF_CONFIG, with its commas and quotes, reaches the program whole.
    grep -q "rank=$r/2 local=$r master=127.0.0.1:[0-9]* hb=set home=unset pwd=$tmp/work tf={\"cluster\":{\"worker\":\[\"127.0.0.1:[0-9]*\",\"127.0.0.1:[0-9]*\"\]},\"task\":{\"type\":\"worker\",\"index\":$r}}$" <<<"$out" ||
      { echo "FAIL($rt): rank $r's line missing:"; echo "$out"; exit 1; }
  done
  echo "ok: $rt"
done
# A rank failing inside the container fails the job.
rc=0
"$gpurun" -q --scheduler local --launcher local -n 2 --container localhost/gpurun:test \
  --container-runtime podman -- sh -c 'exit $((RANK + 3))' >/dev/null 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: a rank exiting 3/4 in the container left gpurun at 0"; exit 1; }
echo "ok: failing rank -> $rc"
