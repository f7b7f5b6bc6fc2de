#!/usr/bin/env bash
# rerun_on_wireup_crash.sh TEST [ARGS...]: runs one Slurm end-to-end test, and runs it once more
# when it exits 75: slurm_test_lib.sh's fail() exits 75 instead of 1 when the job's output shows
# Open MPI's TCP wireup crash and nothing else went wrong before it. On the local cluster both
# "nodes" are this machine, so ranks on different nodes connect over TCP on 127.0.0.1, and Open
# MPI 4.1's TCP BTL now and then refuses its own non-blocking connect ("failed to TCP connect to
# a peer ... Operation now in progress") and a rank dies of a jump to address 0 during wireup,
# before gpurun or the program can do anything (seen in about 1 of 4 full runs, each time in a
# different test; once, at daed17b, the rank died before Open MPI could print its warning).
# wireup_crash() in slurm_test_lib.sh says what it takes for this crash, and
# wireup_crash_test.sh checks it. A second 75 is a failure: the test never passes without one
# clean run, so a crash of the program's own at start, which would come back, still fails.
set -uo pipefail
"$@"
rc=$?
if ((rc == 75)); then
  echo "rerun_on_wireup_crash: $(basename "$1") hit Open MPI's TCP wireup crash:" \
    "running it once more"
  "$@"
  rc=$?
  ((rc == 75)) && rc=1
fi
exit $rc
