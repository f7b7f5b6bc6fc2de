// env_table.h: every environment variable gpurun reads, by its literal name, and every one it
// sets in a rank, in one place (the README's tables list the same names).
//
// gpurun reads the process environment once, at the edge (sys::process_env() in system.cc, or
// --env-file), into an Env map; everything below works on that map, so detection and planning
// are pure functions of it. tests/launcher/env_table_test.py checks that every variable name the
// launcher's sources spell is in one of these tables, that the README names every one, and that
// nothing below the edge calls getenv or touches environ.
#pragma once

namespace gpurun::launcher {

struct EnvVar {
  const char* name;
  const char* use;
};

// Read by gpurun (the supervisor) or by `gpurun _rank` (the wrapper, on each rank's node).
inline constexpr EnvVar kEnvRead[] = {
    // Slurm: the job, its nodes, tasks, GPUs, CPUs and end time; inside a step, the step's own.
    {"SLURM_JOB_ID", "Slurm job (also SLURM_JOBID)"},
    {"SLURM_JOBID", "Slurm job, older spelling"},
    {"SLURM_STEP_ID", "inside an srun step (also SLURM_STEPID)"},
    {"SLURM_STEPID", "inside an srun step, older spelling"},
    {"SLURM_JOB_NODELIST", "the job's nodes (also SLURM_NODELIST)"},
    {"SLURM_NODELIST", "the job's nodes, older spelling"},
    {"SLURM_STEP_NODELIST", "the step's nodes"},
    {"SLURM_TASKS_PER_NODE", "task slots per node"},
    {"SLURM_STEP_TASKS_PER_NODE", "the step's tasks per node"},
    {"SLURM_JOB_NUM_NODES", "node count, checked (also SLURM_NNODES)"},
    {"SLURM_NNODES", "node count, older spelling"},
    {"SLURM_STEP_NUM_NODES", "the step's node count"},
    {"SLURM_NTASKS", "task count, checked (also SLURM_NPROCS)"},
    {"SLURM_NPROCS", "task count, older spelling"},
    {"SLURM_STEP_NUM_TASKS", "the step's task count"},
    {"SLURM_JOB_GPUS", "the job's GPU ids on this node"},
    {"SLURM_STEP_GPUS", "the step's GPU ids on this node"},
    {"SLURM_GPUS_ON_NODE", "GPU count on this node"},
    {"SLURMD_NODENAME", "Slurm's name for this node"},
    {"SLURMD_TRES_BIND", "a task's GPU binding by srun (gpu:per_task:1): its GPUs are its own"},
    {"SLURM_CPUS_PER_TASK", "CPUs per rank"},
    {"SLURM_CPUS_ON_NODE", "CPUs on this node"},
    {"SLURM_JOB_END_TIME", "when the job's time runs out (--checkpoint-before)"},
    {"SLURM_ARRAY_JOB_ID", "a job array's id: --requeue requeues <array>_<task>"},
    {"SLURM_ARRAY_TASK_ID", "this array task's index"},
    {"SLURM_PROCID", "a task's global rank (srun)"},
    {"SLURM_LOCALID", "a task's local rank (srun)"},
    {"SLURM_NODEID", "a task's node rank (srun)"},
    // PBS Pro / Torque.
    {"PBS_JOBID", "PBS job"},
    {"PBS_NODEFILE", "one line per slot"},
    {"PBS_NUM_NODES", "Torque node count, checked"},
    {"PBS_NUM_PPN", "Torque slots per node, checked"},
    {"PBS_NP", "Torque slot count, checked"},
    {"PBS_VERSION", "tells Torque from PBS Pro"},
    {"PBS_GPUFILE", "Torque's GPUs, one line per GPU"},
    {"NCPUS", "PBS Pro CPUs per chunk"},
    {"PBS_VNODENUM", "a task's rank (pbsdsh)"},
    // LSF.
    {"LSB_JOBID", "LSF job"},
    {"LSB_DJOB_HOSTFILE", "one line per slot"},
    {"LSB_MCPU_HOSTS", "host slot pairs"},
    {"LSB_HOSTS", "one word per slot, when nothing better is set"},
    {"LSB_JOBINDEX", "an array element's index (0: no array): --requeue requeues JOB[INDEX]"},
    {"LSF_BINDIR", "where blaunch and jsrun live"},
    {"JSM_NAMESPACE_RANK", "a task's rank (jsrun)"},
    {"JSM_NAMESPACE_SIZE", "jsrun's task count"},
    {"JSM_NAMESPACE_LOCAL_RANK", "a task's local rank (jsrun)"},
    {"JSM_NAMESPACE_LOCAL_SIZE", "jsrun's tasks on this node"},
    // gpuq.
    {"GPUQ_JOB_ID", "gpuq job"},
    {"GPUQ_GPUS", "the job's GPU ids"},
    {"GPUQ_ARRAY_JOB_ID", "an array task's array: --requeue requeues JOB_TASK"},
    {"GPUQ_ARRAY_TASK_ID", "an array task's index"},
    // Any scheduler, and the engines.
    {"CUDA_VISIBLE_DEVICES", "this node's visible GPUs (indices or UUIDs)"},
    {"PATH", "where srun, mpirun, blaunch and the program are found"},
    {"LD_LIBRARY_PATH", "exported with PATH to remote ranks (mpirun -x)"},
    {"GPURUN_RANK", "a rank's number when gpurun forks the wrappers itself"},
    {"GPURUN_CONTROL_RELAY",
     "0: each rank's wrapper connects to gpurun itself, not through its node's control relay"},
    {"GPURUN_NVIDIA_SMI",
     "--monitor, --preflight and a bare machine's GPU count: an nvidia-smi to run instead of "
     "NVML (tests)"},
    {"OMPI_COMM_WORLD_RANK", "a rank's number (mpirun)"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "a rank's local rank (mpirun), checked against the plan"},
    {"PMIX_RANK", "a rank's number (PMIx)"},
    {"PMI_RANK", "a rank's number (PMI)"},
    {"TMPDIR",
     "where the wrapper keeps a rank's folder (heartbeat file; default /tmp), and a single-machine "
     "mpirun its session folder; --preflight checks its free space"},
    {"OMPI_MCA_orte_tmpdir_base",
     "the user's choice, kept; else a single-machine mpirun gets a private folder under TMPDIR"},
    {"NCCL_SOCKET_IFNAME", "the user's choice, kept; else set to the interface to MASTER_ADDR"},
    {"GLOO_SOCKET_IFNAME", "the same for Gloo"},
    {"PYTHONPATH", "kept after the wrapper's sitecustomize folder (--hang-timeout)"},
    {"PYTHONUNBUFFERED", "the user's value is kept (else 1 in every rank)"},
    {"PWD", "--dry-run --env-file --container: the job's working folder (else getcwd)"},
};

// Set by gpurun in every rank's environment (rank_environment() in rank_env.cc); the contract of
// DESIGN.md's "Rank environment".
inline constexpr EnvVar kEnvSet[] = {
    {"RANK", "global rank"},
    {"WORLD_SIZE", "number of ranks"},
    {"LOCAL_RANK", "rank on this node"},
    {"LOCAL_WORLD_SIZE", "ranks on this node"},
    {"NODE_RANK", "this node's index"},
    {"GROUP_RANK", "the same, torchrun's name"},
    {"MASTER_ADDR", "rank 0's host"},
    {"MASTER_PORT", "the rendezvous port"},
    // --contract tf and jax (rank_env.cc says where TensorFlow and JAX read them).
    {"TF_CONFIG", "TensorFlow's cluster: one worker per rank, host:MASTER_PORT+1+local rank"},
    {"JAX_COORDINATOR_ADDRESS", "MASTER_ADDR:MASTER_PORT, for jax.distributed.initialize()"},
    {"JAX_LOCAL_DEVICE_IDS", "0..n-1: the rank's own GPUs, as CUDA_VISIBLE_DEVICES numbers them"},
    {"CUDA_VISIBLE_DEVICES", "this rank's GPUs only"},
    {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
    {"OMP_NUM_THREADS", "CPUs per rank"},
    {"GPURUN_SCHEDULER", "slurm, pbs, lsf, gpuq or local"},
    {"GPURUN_JOB_ID", "the scheduler's job id"},
    {"GPURUN_STDOUT_TTY", "1 when gpurun's stdout is a terminal"},
    {"GPURUN_HEARTBEAT", "the rank's heartbeat file (wrapper/rank_folder.h)"},
    {"GPURUN_RESTART_COUNT", "0 on the first attempt, k on the k-th restart"},
    {"NCCL_SOCKET_IFNAME", "the interface that routes to MASTER_ADDR, unless set"},
    {"GLOO_SOCKET_IFNAME", "the same, for Gloo"},
    {"GPURUN_PYSTACK_DIR", "with --hang-timeout: where Python ranks write tracebacks"},
    {"PYTHONPATH", "with --hang-timeout: the sitecustomize folder first"},
    {"PYTHONUNBUFFERED", "1 unless the user set it: Python's output line by line"},
    {"SLURM_HOSTFILE", "for srun's arbitrary distribution (the engine's, not a rank's)"},
    {"SLURM_PROCID", "in a gpuq job: RANK, as srun would set it (the batch shell has 0)"},
    {"SLURM_LOCALID", "in a gpuq job: LOCAL_RANK"},
    {"SLURM_NODEID", "in a gpuq job: NODE_RANK"},
    {"SLURM_NTASKS", "in a gpuq job: WORLD_SIZE"},
    {"SLURM_NPROCS", "in a gpuq job: WORLD_SIZE"},
};

}  // namespace gpurun::launcher
