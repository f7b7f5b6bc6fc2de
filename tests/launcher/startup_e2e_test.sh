#!/usr/bin/env bash
# startup_e2e_test.sh: clear start-up errors (CTest launcher_e2e_startup).
#
#   tests/launcher/startup_e2e_test.sh GPURUN BEAT
#
# A program that is missing or not executable is refused before any engine starts, in one line
# naming it and the node (exit 127 / 126, as a shell; a name PATH lacks that is a file in the
# working folder gets a hint how to run that file). One that passes that check but cannot be
# executed in the ranks (a script whose interpreter is missing) is reported by gpurun in one line
# per job, without the engine's banners or traces, through mpirun and through gpurun's own fork.
# A rank whose wrapper cannot place it (no GPU at its planned position) is named, with status 2.
set -euo pipefail
gpurun=$1
work=$(mktemp -d /tmp/gpurun-startup.XXXXXX)
trap 'rm -rf "$work"' EXIT
host=$(hostname)
fail() { echo "FAIL: $*" >&2; sed 's/^/  log: /' "$work/log" >&2; exit 1; }

expect() {  # expect RC REGEX ARGS...: exit RC and stderr exactly one line, matching REGEX
  local want_rc=$1 want=$2 rc=0
  shift 2
  timeout 60 "$gpurun" "$@" 2>"$work/log" >/dev/null || rc=$?
  [[ $rc == "$want_rc" ]] || fail "'$*': exit $rc, want $want_rc"
  [[ $(wc -l <"$work/log") == 1 ]] && grep -Eqx -- "$want" "$work/log" ||
    fail "'$*' did not say just: $want"
  echo "ok: $* -> $rc: $(cat "$work/log")"
}

touch "$work/plain"
expect 127 "gpurun: cannot run '/nonexistent/prog' on $host: No such file or directory" \
  --scheduler local -n 2 -- /nonexistent/prog
expect 127 "gpurun: cannot run 'no-such-program-xyz' on $host: not found on PATH" \
  --scheduler local --launcher local -n 2 -- no-such-program-xyz
# A name that is not on PATH but in the working folder: not "No such file or directory", which
# said the file was missing; how to run it instead.
printf 'print(1)\n' >"$work/s1.py"
cd "$work"
expect 127 "gpurun: cannot run 's1.py' on $host: not found on PATH \(s1.py is in the working folder: run python3 s1.py\)" \
  --scheduler local -n 2 -- s1.py
chmod +x s1.py
expect 127 "gpurun: cannot run 's1.py' on $host: not found on PATH \(s1.py is in the working folder: run \./s1.py or python3 s1.py\)" \
  --scheduler local -n 2 -- s1.py
cd - >/dev/null
expect 126 "gpurun: cannot run '$work/plain' on $host: Permission denied" \
  --scheduler local -n 2 -- "$work/plain"

printf '#!/nonexistent/interpreter\n' >"$work/broken"
chmod +x "$work/broken"
for engine in mpirun local; do
  # -q: gpurun's status lines off, its failure line on.
  expect 127 "gpurun: rank [01] on $host cannot run '$work/broken': No such file or directory; stopped [01] other ranks?" \
    --scheduler local --launcher $engine -n 2 -q -- "$work/broken"
done

# A wrapper that cannot place its rank reports it to gpurun once connected: gpurun names that
# rank with the wrapper's message and exits with its status, 2. Here mpirun's -x gives every rank
# one GPU where gpurun planned two, so rank 1 has no GPU at position 1. (Before, the wrapper
# failed before connecting; mpirun killed rank 0, which gpurun named, with status 143.) Rank 0
# may not have connected yet when rank 1's report comes (under load): "stopped 0 other ranks".
CUDA_VISIBLE_DEVICES=0,1 expect 2 \
  "gpurun: rank 1 on $host cannot start: rank 1 needs GPU position 1 on $host, but CUDA_VISIBLE_DEVICES there lists only 1 GPU where gpurun planned 2: .*; stopped [01] other ranks?" \
  --scheduler local --launcher mpirun -n 2 -q --launcher-args '-x CUDA_VISIBLE_DEVICES=7' -- true
