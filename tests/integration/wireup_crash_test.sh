#!/usr/bin/env bash
# wireup_crash_test.sh: which job outputs slurm_test_lib.sh's wireup_crash() takes for Open MPI's
# TCP wireup crash on the one-host cluster (a rerun), and which it leaves failures (CTest:
# slurm_wireup_crash; no cluster needed). The outputs are those CI printed, cut to what matters.
set -euo pipefail
source "$(dirname "$0")/slurm_test_lib.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-wireup.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=0
# check NAME WANT: wireup_crash on stdin's text must give WANT (yes or no).
check() {
  out=$work/$1.out
  cat > "$out"
  local got=no
  if wireup_crash; then got=yes; fi
  if [[ $got == "$2" ]]; then
    echo "ok: $1 ($got)"
  else
    echo "FAIL: $1: got $got, want $2"
    failed=1
  fi
}
head='gpurun: 4 ranks on 2 nodes via srun'
jump0='1: [vm:12564] *** Process received signal ***
1: [vm:12564] Signal: Segmentation fault (11)
1: [vm:12564] Signal code: Address not mapped (1)
1: [vm:12564] Failing at address: (nil)
1: [vm:12564] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f4cd9c5a050]
1: [vm:12564] *** End of error message ***'
killed='gpurun: rank 1 on node1 was killed by signal 11 (SIGSEGV) after 0.7 s;'
killed+=' stopped 3 other ranks'
warning='2: WARNING: Open MPI failed to TCP connect to a peer MPI process.  This
2: should not happen.
2:   Error:      Operation now in progress (115)'
# The CI run at daed17b: the jump to 0 before Open MPI could warn.
check jump_to_0 yes <<< "$head
$jump0
$killed"
# The CI runs of d6b76ce's note: the warning, then the crash.
check warning_then_crash yes <<< "$head
$warning
$jump0
$killed"
# A null dereference inside a function: Open MPI's handler unwinds to its caller.
check null_dereference no <<< "$head
$jump0
1: [vm:12564] [ 1] build/examples/mnist_cnn/mnist_cnn(+0x5b2f0)[0x55d0c0a5b2f0]
$killed"
# The same jump to 0 after ten seconds: not the wireup.
check late_jump_to_0 no <<< "$head
$jump0
${killed/after 0.7 s/after 42.3 s}"
# A crash at another address.
check other_address no <<< "$head
${jump0/(nil)/0x10}
$killed"
# The warning without a crash (the job failed otherwise).
check warning_alone no <<< "$head
$warning
gpurun: rank 2 on node2 exited with code 1 after 3.1 s"
check clean no <<< "$head
0: epoch 1/3 loss 0.41"
exit $failed
