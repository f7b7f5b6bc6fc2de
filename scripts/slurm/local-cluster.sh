#!/usr/bin/env bash
# local-cluster.sh: a two-node Slurm cluster on this one machine, for tests and for trying gpurun.
#
#   scripts/slurm/local-cluster.sh start     munged + slurmctld + slurmd node1 + slurmd node2; waits
#                                            until sinfo shows both nodes idle
#   scripts/slurm/local-cluster.sh stop      cancels jobs, stops every daemon it started, checks none is left
#   scripts/slurm/local-cluster.sh status    daemons, sinfo, squeue
#   scripts/slurm/local-cluster.sh env       prints the export line for the client commands
#
# Then:  export SLURM_CONF=/tmp/gpurun-slurm/etc/slurm.conf   (start prints it)
#        sbatch -N2 --ntasks-per-node=2 job.sh
#
# Uses Debian's slurm-wlm (22.05) and munge; needs root (slurmd must be root). No systemd needed.
# Everything it writes (config, munge key and socket, spool, state, logs, pid files) lives under one
# directory, GPURUN_SLURM_DIR (default /tmp/gpurun-slurm); `stop` keeps it for post-mortems, `start`
# rewrites the configuration. The only thing written outside it: "127.0.0.1 node1 node2" in /etc/hosts
# (the node names must resolve), added once.
#
# The cluster: partition "debug" with node1 and node2, both NodeHostname=localhost on their own port,
# CPUs=4 and two fake GPUs each (gres.conf File=/dev/tty[0-1] and /dev/tty[2-3]), so Slurm sets
# CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS and SLURM_GPUS_ON_NODE as on a real GPU cluster.
#
# Environment:
#   GPURUN_SLURM_DIR        state directory (default /tmp/gpurun-slurm)
#   GPURUN_SLURM_PORT       slurmctld port (default 14817); the nodes use PORT+4 and PORT+5.
#                           Below 15000: gpurun derives MASTER_PORT from 15000-31999, and a
#                           gpurun run beside the cluster's start could hold a port it needs
#   GPURUN_SLURM_TIMEOUT    seconds start/stop wait for each step (default 60)
#   GPURUN_SLURM_CPUS       CPUs each fake node claims (default 4)
set -euo pipefail

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; }

dir=${GPURUN_SLURM_DIR:-/tmp/gpurun-slurm}
port=${GPURUN_SLURM_PORT:-14817}
timeout=${GPURUN_SLURM_TIMEOUT:-60}
cpus=${GPURUN_SLURM_CPUS:-4}
nodes=(node1 node2)

conf=$dir/etc/slurm.conf
msock=$dir/munge/munge.socket
logdir=$dir/log
rundir=$dir/run

die() { echo "local-cluster: error: $*" >&2; exit 1; }
say() { echo "local-cluster: $*"; }

# pid_alive FILE: the pid in FILE names a running process (a zombie does not count: where PID 1
# is no init, a killed daemon may stay unreaped).
pid_alive() {
  local f=$1 p st
  [[ -s $f ]] || return 1
  p=$(<"$f")
  [[ $p =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null || return 1
  st=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null || true)
  [[ $st != Z && $st != X ]]
}
all_alive() {
  local f
  for f in "$dir/munge/munged.pid" "$rundir/slurmctld.pid" "$rundir/slurmd-node1.pid" "$rundir/slurmd-node2.pid"; do
    pid_alive "$f" || return 1
  done
}

# wait_for SECONDS WHAT LOG CMD...: polls CMD every 0.5 s; on timeout names WHAT and LOG and fails.
wait_for() {
  local secs=$1 what=$2 log=$3; shift 3
  local deadline=$((SECONDS + secs))
  while ! "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "local-cluster: error: timed out after ${secs}s waiting for $what" >&2
      if [[ -n $log && -f $log ]]; then
        echo "local-cluster: last lines of $log:" >&2
        tail -n 20 "$log" >&2
      fi
      echo "local-cluster: logs are in $logdir" >&2
      return 1
    fi
    sleep 0.5
  done
}

client() { SLURM_CONF=$conf "$@"; }

munge_ok() { munge -S "$msock" -n </dev/null | unmunge -S "$msock" >/dev/null; }
ctld_up() { client scontrol ping | grep -q 'is UP'; }
nodes_idle() {
  local out n
  out=$(client sinfo -h -N -o '%N %t')
  for n in "${nodes[@]}"; do
    grep -Eq "^$n idle\$" <<<"$out" || return 1
  done
}

write_config() {
  mkdir -p "$dir/etc" "$dir/spool/ctld" "$logdir" "$rundir"
  for n in "${nodes[@]}"; do mkdir -p "$dir/spool/$n" "$dir/tmp/$n"; done
  local host
  host=$(hostname -s 2>/dev/null || hostname)
  cat >"$conf" <<EOF
# Written by scripts/slurm/local-cluster.sh; rewritten on every start.
ClusterName=gpurun
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$msock
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$rundir/slurmctld.pid
SlurmdPidFile=$rundir/slurmd-%n.pid
SlurmctldLogFile=$logdir/slurmctld.log
SlurmdLogFile=$logdir/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$dir/tmp/%n
PlugStackConfig=$dir/etc/plugstack.conf
# Two "nodes" on one host: slurmd may claim what the config says, not what it probes.
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# No slurmdbd here, so no sacct; finished jobs stay visible to scontrol/squeue for MinJobAge seconds,
# and each finished job gets a line in the completion log.
JobCompType=jobcomp/filetxt
JobCompLoc=$logdir/jobcomp.txt
MinJobAge=3600
ReturnToService=2
# Open MPI programs started by plain srun get PMIx (the usual setting on GPU clusters).
MpiDefault=pmix
# Harness-only Open MPI settings for two "nodes" on one host (see task-prolog.sh).
TaskProlog=$dir/etc/task-prolog.sh
SchedulerType=sched/backfill
KillWait=10
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
GresTypes=gpu
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((port + 4)) CPUs=$cpus Gres=gpu:2 State=UNKNOWN
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((port + 5)) CPUs=$cpus Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$dir/etc/gres.conf" <<EOF
# Fake GPUs: any device file works; Slurm only hands out their indices.
NodeName=node1 Name=gpu File=/dev/tty[0-1]
NodeName=node2 Name=gpu File=/dev/tty[2-3]
EOF
  : >"$dir/etc/plugstack.conf"
  # Lines "export K=V" printed by a TaskProlog enter every task's environment (batch script included).
  # node1 and node2 are one host: Open MPI's shared-memory transport (vader) crashes between ranks of
  # different "nodes", and the TCP transport must stay on loopback. Real clusters need neither.
  # A value the user set already wins.
  cat >"$dir/etc/task-prolog.sh" <<'EOF2'
#!/bin/sh
# Written by scripts/slurm/local-cluster.sh: Open MPI settings for fake nodes sharing one host.
[ -n "${OMPI_MCA_btl:-}" ] || echo "export OMPI_MCA_btl=self,tcp"
[ -n "${OMPI_MCA_btl_tcp_if_include:-}" ] || echo "export OMPI_MCA_btl_tcp_if_include=127.0.0.0/8"
[ -n "${OMPI_MCA_oob_tcp_if_include:-}" ] || echo "export OMPI_MCA_oob_tcp_if_include=127.0.0.0/8"
EOF2
  # Each fake node its own TMPDIR, as real nodes have their own /tmp: Open MPI keys its session
  # directory (and the hwloc topology file its daemons write there) by host name and job, which
  # are the same on both fake nodes. (srun hands the batch script's TMPDIR, node1's, to every task.)
  cat >>"$dir/etc/task-prolog.sh" <<EOF2
case \${TMPDIR:-/tmp} in
  /tmp | /tmp/ | "$dir/tmp/"*) [ -d "$dir/tmp/\$SLURMD_NODENAME" ] && echo "export TMPDIR=$dir/tmp/\$SLURMD_NODENAME" ;;
esac
exit 0
EOF2
  chmod 755 "$dir/etc/task-prolog.sh"
}

ensure_hosts() {
  local n missing=()
  for n in "${nodes[@]}"; do
    grep -Eq "^[^#]*[[:space:]]$n([[:space:]]|\$)" /etc/hosts || missing+=("$n")
  done
  ((${#missing[@]} == 0)) && return 0
  if ! echo "127.0.0.1 ${missing[*]}  # gpurun local Slurm cluster" >>/etc/hosts; then
    die "cannot add '${missing[*]}' to /etc/hosts (node names must resolve)"
  fi
}

start_munge() {
  mkdir -p "$dir/munge"
  chmod 755 "$dir" "$dir/munge"
  if [[ ! -s $dir/munge/munge.key ]]; then
    mungekey -c -k "$dir/munge/munge.key" >/dev/null 2>&1 ||
      dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$dir/munge/munge.key"
  fi
  if pid_alive "$dir/munge/munged.pid" && munge_ok; then return 0; fi
  rm -f "$msock" "$msock.lock"
  munged --force -S "$msock" --key-file="$dir/munge/munge.key" --log-file="$logdir/munged.log" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
    >>"$logdir/munged.log" 2>&1 || die "munged failed to start (log: $logdir/munged.log)"
  wait_for "$timeout" "munge to answer on $msock (munge -n | unmunge)" "$logdir/munged.log" munge_ok
}

start_ctld() {
  if pid_alive "$rundir/slurmctld.pid"; then return 0; fi
  slurmctld -f "$conf" >>"$logdir/slurmctld.start.log" 2>&1 ||
    die "slurmctld failed to start (logs: $logdir/slurmctld.log, $logdir/slurmctld.start.log)"
  wait_for "$timeout" "slurmctld to answer 'scontrol ping'" "$logdir/slurmctld.log" ctld_up
}

start_slurmd() {
  local n=$1
  if pid_alive "$rundir/slurmd-$n.pid"; then return 0; fi
  slurmd -f "$conf" -N "$n" >>"$logdir/slurmd-$n.start.log" 2>&1 ||
    die "slurmd $n failed to start (logs: $logdir/slurmd-$n.log, $logdir/slurmd-$n.start.log)"
}

cmd_start() {
  [[ $(id -u) -eq 0 ]] || die "must run as root (slurmd needs root)"
  local b
  for b in munged mungekey munge unmunge slurmctld slurmd sinfo scontrol; do
    command -v "$b" >/dev/null || die "'$b' not found: install slurm-wlm and munge (scripts/install-deps.sh)"
  done
  if all_alive && ctld_up && nodes_idle 2>/dev/null; then
    say "already running ($dir)"
    echo "export SLURM_CONF=$conf"
    return 0
  fi
  # Rewrite the configuration only when no daemon of ours reads it.
  if ! pid_alive "$rundir/slurmctld.pid" && ! pid_alive "$rundir/slurmd-node1.pid" &&
    ! pid_alive "$rundir/slurmd-node2.pid"; then
    write_config
  fi
  mkdir -p "$logdir" "$rundir"
  ensure_hosts
  start_munge
  start_ctld
  local n
  for n in "${nodes[@]}"; do start_slurmd "$n"; done
  # Nodes left DOWN/DRAIN by an earlier run come back with ReturnToService=2; resume them if not.
  local deadline=$((SECONDS + timeout))
  until nodes_idle; do
    if ((SECONDS >= deadline)); then
      echo "local-cluster: error: timed out after ${timeout}s waiting for sinfo to show node1 and node2 idle" >&2
      client sinfo -N -l >&2 || true
      for n in "${nodes[@]}"; do
        echo "local-cluster: last lines of $logdir/slurmd-$n.log:" >&2
        tail -n 10 "$logdir/slurmd-$n.log" >&2 2>/dev/null || true
      done
      echo "local-cluster: logs are in $logdir (slurmctld.log, slurmd-node1.log, slurmd-node2.log)" >&2
      return 1
    fi
    if client sinfo -h -N -o '%t' | grep -Eq '^(down|drain|drng|drained)'; then
      client scontrol update nodename=node1,node2 state=resume >/dev/null 2>&1 || true
    fi
    sleep 0.5
  done
  say "up: node1 node2 idle, 2 fake GPUs each ($dir)"
  echo "export SLURM_CONF=$conf"
}

# Our Slurm daemons: the pids in our pid files, plus any process whose command line names our config.
slurm_pids() {
  local f
  for f in "$rundir"/slurmctld.pid "$rundir"/slurmd-*.pid; do
    if pid_alive "$f"; then cat "$f"; fi
  done
  pgrep -f -- "$conf" || true
}
munge_pids() {
  if pid_alive "$dir/munge/munged.pid"; then cat "$dir/munge/munged.pid"; fi
  pgrep -f -- "$msock" || true
}
our_pids() { { slurm_pids; munge_pids; } | sort -u; }

# Job step daemons of our nodes: slurmstepd processes whose working spool lies under our directory.
our_stepds() {
  local p l
  for p in $(pgrep -x slurmstepd || true); do
    if tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -qx "SLURM_CONF=$conf"; then
      echo "$p"
      continue
    fi
    for l in /proc/"$p"/fd/*; do
      if [[ $(readlink "$l" 2>/dev/null) == "$dir/"* ]]; then echo "$p"; break; fi
    done
  done
}

cmd_stop() {
  if [[ ! -d $dir ]]; then say "not running (no $dir)"; return 0; fi
  if pid_alive "$rundir/slurmctld.pid" && ctld_up; then
    local jobs
    jobs=$(client squeue -h -o %i 2>/dev/null || true)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      client scancel $jobs 2>/dev/null || true
      wait_for "$timeout" "cancelled jobs ($jobs) to leave squeue" "$logdir/slurmctld.log" \
        bash -c "[[ -z \$(SLURM_CONF='$conf' squeue -h -t R,CG,PD -o %i) ]]" || true
    fi
    client scontrol shutdown >/dev/null 2>&1 || true
  fi
  local f pids deadline=$((SECONDS + timeout))
  for f in "$rundir"/slurmctld.pid "$rundir"/slurmd-*.pid; do
    if pid_alive "$f"; then kill -TERM "$(<"$f")" 2>/dev/null || true; fi
  done
  # munged goes last: the Slurm daemons need it to shut down cleanly.
  while [[ -n $(slurm_pids) ]]; do
    if ((SECONDS >= deadline)); then
      echo "local-cluster: warning: Slurm daemons still up after ${timeout}s: $(slurm_pids | tr '\n' ' ')" >&2
      break
    fi
    sleep 0.5
  done
  if [[ -S $msock ]]; then munged -s -S "$msock" >/dev/null 2>&1 || true; fi
  deadline=$((SECONDS + 10))
  while [[ -n $(our_pids; our_stepds) ]] && ((SECONDS < deadline)); do sleep 0.5; done
  pids=$( (our_pids; our_stepds) | sort -u | tr '\n' ' ')
  if [[ -n ${pids// /} ]]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 1
  fi
  pids=$( (our_pids; our_stepds) | sort -u | tr '\n' ' ')
  if [[ -n ${pids// /} ]]; then
    die "processes still running after stop: $pids (ps -fp ${pids// /,})"
  fi
  rm -f "$rundir"/*.pid "$dir/munge/munged.pid"
  say "stopped (state and logs kept in $dir)"
}

cmd_status() {
  local f name rc=0
  for f in "$dir/munge/munged.pid" "$rundir/slurmctld.pid" "$rundir/slurmd-node1.pid" "$rundir/slurmd-node2.pid"; do
    name=$(basename "$f" .pid)
    if pid_alive "$f"; then echo "$name: running (pid $(<"$f"))"; else echo "$name: not running"; rc=3; fi
  done
  if pid_alive "$rundir/slurmctld.pid"; then
    client sinfo -N -o '%N %P %t %c %G' || rc=3
    client squeue || true
  fi
  echo "export SLURM_CONF=$conf"
  return $rc
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  -h | --help | help) usage ;;
  *) usage >&2; echo "local-cluster: error: expected start, stop, status or env, got '${1:-}'" >&2; exit 2 ;;
esac
