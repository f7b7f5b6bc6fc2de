#!/usr/bin/env python3
"""contract_test.py: every rank's TF_CONFIG and JAX variables agree with its RANK, WORLD_SIZE,
MASTER_ADDR and the plan's hosts; --contract chooses which are set (issue 32, item 4).

  tests/launcher/contract_test.py GPURUN DATA_DIR

TensorFlow and JAX cannot be installed on the machines that run this test, so the variables are
checked against their documented formats, with parsers written here from those documents:
  - TF_CONFIG: tensorflow.org/guide/distributed_training ("Setting up the TF_CONFIG environment
    variable") and tf.distribute.cluster_resolver.TFConfigClusterResolver: a JSON object with
    "cluster" (job name -> list of "host:port") and "task" ({"type": job name, "index": int}).
  - JAX: jax/_src/distributed.py (State.initialize reads JAX_COORDINATOR_ADDRESS and
    JAX_LOCAL_DEVICE_IDS; JAX reads no variable for num_processes or process_id, so a rank passes
    WORLD_SIZE and RANK: launcher/src/plan/rank_env.cc cites the lines).
Part 1 reads `gpurun --dry-run` of scheduler fixtures (several nodes); part 2 runs real ranks on
this host, through gpurun's own fork and through mpirun, and reads the environment they got.
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

gpurun, data = sys.argv[1], pathlib.Path(sys.argv[2])
failures = []


def fail(where, why):
    failures.append(f"{where}: {why}")


def split_address(addr):
    """'host:port' or '[v6]:port' as TensorFlow's gRPC server and JAX's coordinator take it."""
    m = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", addr)
    if not m:
        raise ValueError(f"'{addr}' is not host:port")
    host, port = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"'{addr}': port out of range")
    return host, int(port)


def parse_tf_config(text):
    """TF_CONFIG as TensorFlow documents it; returns (cluster, task type, task index)."""
    j = json.loads(text)
    if not isinstance(j, dict) or not set(j) <= {"cluster", "task", "rpc_layer", "environment"}:
        raise ValueError(f"not a TF_CONFIG object: keys {sorted(j) if isinstance(j, dict) else j}")
    cluster, task = j.get("cluster"), j.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError("no \"cluster\" object")
    for job, addrs in cluster.items():
        if not isinstance(addrs, list) or not addrs or not all(isinstance(a, str) for a in addrs):
            raise ValueError(f"cluster[{job!r}] is not a list of \"host:port\"")
        for a in addrs:
            split_address(a)
    if not isinstance(task, dict) or set(task) != {"type", "index"}:
        raise ValueError("\"task\" is not {\"type\": ..., \"index\": ...}")
    kind, index = task["type"], task["index"]
    if kind not in cluster or not isinstance(index, int) or isinstance(index, bool):
        raise ValueError(f"task {task} names no job of the cluster, or its index is no integer")
    if not 0 <= index < len(cluster[kind]):
        raise ValueError(f"task index {index} outside the {len(cluster[kind])} {kind}s")
    return cluster, kind, index


def check_rank(where, env, plan, contracts):
    """One rank's variables against the plan: hosts[i] and local_ranks[i] are rank i's node and
    local rank, master the rendezvous (MASTER_ADDR, MASTER_PORT)."""
    hosts, local_ranks, master = plan["hosts"], plan["local_ranks"], plan["master"]
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    if world != len(hosts) or not 0 <= rank < world:
        fail(where, f"RANK={rank} WORLD_SIZE={world} for a plan of {len(hosts)} ranks")
    for name, want in (("MASTER_ADDR", "torch"), ("TF_CONFIG", "tf"),
                       ("JAX_COORDINATOR_ADDRESS", "jax")):
        if (name in env) != (want in contracts):
            fail(where, f"{name} {'set' if name in env else 'missing'} with --contract {contracts}")
    master_addr, master_port = master
    if "torch" in contracts and (env["MASTER_ADDR"], int(env["MASTER_PORT"])) != master:
        fail(where, f"MASTER_ADDR:MASTER_PORT {env['MASTER_ADDR']}:{env['MASTER_PORT']}, want {master}")
    # What jax.distributed.initialize(num_processes=WORLD_SIZE, process_id=RANK) then checks:
    # the coordinator is host:port (it binds [::]:port on process 0), 0 <= process_id < count.
    if "jax" in contracts and split_address(env["JAX_COORDINATOR_ADDRESS"]) != master:
        fail(where, f"JAX_COORDINATOR_ADDRESS={env['JAX_COORDINATOR_ADDRESS']}, want {master}")
    if "jax" in contracts:
        n_gpus = len([g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g])
        want_ids = ",".join(str(i) for i in range(n_gpus)) or None
        if env.get("JAX_LOCAL_DEVICE_IDS") != want_ids:
            fail(where, f"JAX_LOCAL_DEVICE_IDS={env.get('JAX_LOCAL_DEVICE_IDS')}, "
                        f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')}")
    if "tf" not in contracts:
        return None
    try:
        cluster, kind, index = parse_tf_config(env["TF_CONFIG"])
    except (ValueError, json.JSONDecodeError) as e:
        fail(where, f"TF_CONFIG does not parse: {e}: {env['TF_CONFIG']}")
        return None
    workers = cluster.get("worker", [])
    if set(cluster) != {"worker"} or kind != "worker" or index != rank or len(workers) != world:
        fail(where, f"TF_CONFIG {env['TF_CONFIG']} is not one worker per rank with index RANK")
        return None
    one_node = len(set(hosts)) == 1
    for i, addr in enumerate(workers):
        host, port = split_address(addr)
        want = (master_addr if one_node else hosts[i], master_port + 1 + local_ranks[i])
        if (host, port) != want:
            fail(where, f"worker {i} is {addr}, want {want[0]}:{want[1]} (rank {i}'s host, "
                        "MASTER_PORT + 1 + its local rank)")
    if len(set(workers)) != len(workers) or f"{master_addr}:{master_port}" in workers:
        fail(where, f"TF_CONFIG's workers share a port, or take MASTER_PORT: {workers}")
    return workers


def dry_run_ranks(env_file, args):
    """Every rank's variables as `gpurun --dry-run` prints them, by rank."""
    out = subprocess.run([gpurun, "--dry-run", "--env-file", str(env_file), *args, "--", "true"],
                         capture_output=True, text=True, check=True).stdout
    ranks, cur = {}, None
    for line in out.splitlines():
        if m := re.match(r"# rank (\d+) on ", line):
            cur = ranks.setdefault(int(m.group(1)), {})
        elif cur is not None and (m := re.match(r"([A-Z_][A-Z0-9_]*)=(.*)", line)):
            cur[m.group(1)] = m.group(2)
    return ranks


def plan_of(env_file, args):
    """The plan's hosts, local ranks and rendezvous, from `gpurun info --json` (not the dry run)."""
    info = json.loads(subprocess.run([gpurun, "info", "--json", "--env-file", str(env_file), *args],
                                     capture_output=True, text=True, check=True).stdout)
    return {"hosts": [r["host"] for r in info["ranks"]],
            "local_ranks": [r["local_rank"] for r in info["ranks"]],
            "master": (info["master_addr"], info["master_port"])}


def check_dry_runs():
    cases = [("slurm_batch.env", []), ("slurm_batch.env", ["-n", "4", "--nproc-per-node", "2"]),
             ("summit.env", ["--nproc-per-node", "6"]), ("gpuq.env", []),
             ("slurm_batch.env", ["--master-addr", "node01-ib"])]
    for contracts in ("torch,tf,jax", "torch", "tf", "jax", "jax,tf"):
        for env_file, args in cases:
            args = [*args, "--contract", contracts]
            where = f"dry run {env_file} {' '.join(args)}"
            plan = plan_of(data / env_file, args)
            ranks = dry_run_ranks(data / env_file, args)
            if sorted(ranks) != list(range(len(plan["hosts"]))):
                fail(where, f"ranks {sorted(ranks)} for a plan of {len(plan['hosts'])}")
                continue
            seen = {tuple(check_rank(f"{where}, rank {r}", env, plan, contracts.split(",")) or ())
                    for r, env in ranks.items()}
            if len(seen) != 1:
                fail(where, "the ranks' TF_CONFIG clusters differ")
    print("ok: dry runs of 5 plans x 5 --contract values")


def check_bad_values():
    for value, want in (("pytorch", "unknown contract 'pytorch'"), ("torch,", "an empty name"),
                        ("tf,tf", "'tf' twice")):
        r = subprocess.run([gpurun, "--dry-run", "--scheduler", "local", "-n", "1", "--contract",
                            value, "--", "true"], capture_output=True, text=True)
        if r.returncode == 0 or f"--contract '{value}'" not in r.stderr or want not in r.stderr \
                or "torch, tf and jax" not in r.stderr:
            fail(f"--contract {value}", f"exit {r.returncode}, said: {r.stderr.strip()}")
    print("ok: bad --contract values are refused, naming the flag and the accepted values")


def check_real_ranks():
    """Real ranks on this host: what gpurun's wrappers really gave them (fork and mpirun)."""
    dump = "import json, os; json.dump(dict(os.environ), open(os.environ['OUT'] + '/' + os.environ['RANK'], 'w'))"
    clean = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "MASTER_ADDR")
             and not k.startswith("JAX_")}
    for engine in ("local", "mpirun"):
        for contracts in ("torch,tf,jax", "torch"):
            with tempfile.TemporaryDirectory() as out:
                where = f"gpurun --launcher {engine} -n 3 --contract {contracts}"
                r = subprocess.run([gpurun, "-q", "--scheduler", "local", "--launcher", engine,
                                    "-n", "3", "--gpus-per-rank", "0", "--contract", contracts,
                                    "--", sys.executable, "-c", dump],
                                   env={**clean, "OUT": out}, capture_output=True, text=True,
                                   timeout=120)
                envs = {int(f.name): json.loads(f.read_text()) for f in pathlib.Path(out).iterdir()}
                if r.returncode != 0 or sorted(envs) != [0, 1, 2]:
                    fail(where, f"exit {r.returncode}, ranks {sorted(envs)}: {r.stderr.strip()}")
                    continue
                # One machine: MASTER_ADDR 127.0.0.1, and every worker there. The port is derived
                # from gpurun's pid: the ranks' own MASTER_PORT, checked equal across ranks.
                ports = {env["MASTER_PORT"] for env in envs.values()}
                if len(ports) != 1:
                    fail(where, f"the ranks disagree on MASTER_PORT: {ports}")
                    continue
                plan = {"hosts": ["127.0.0.1"] * 3, "local_ranks": [0, 1, 2],
                        "master": ("127.0.0.1", int(ports.pop()))}
                for rank, env in envs.items():
                    check_rank(f"{where}, rank {rank}", env, plan, contracts.split(","))
    print("ok: real ranks got TF_CONFIG and JAX_COORDINATOR_ADDRESS, or none with --contract torch "
          "(fork and mpirun)")


check_dry_runs()
check_bad_values()
check_real_ranks()
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
