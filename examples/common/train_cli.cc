// train_cli.cc: the examples' shared command line (train_cli.h). This file is the programs' edge:
// it reads the environment (runtime_env_from_process), the arguments and the data, and hands
// configs down to the runtime.
#include "train_cli.h"

#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <exception>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "gpurun/kernels/cpu_kernels.h"
#include "gpurun/kernels/threads.h"
#include "gpurun/runtime/backend.h"
#include "gpurun/runtime/dataset.h"
#include "gpurun/runtime/environment.h"
#include "gpurun/runtime/process_group.h"
#include "gpurun/runtime/report.h"
#include "gpurun/runtime/stop_signal.h"
#include "gpurun/runtime/trainer.h"
#include "gpurun_version.h"

namespace po = boost::program_options;
namespace rt = gpurun::runtime;

namespace gpurun::examples {
namespace {

struct Options {
  std::string data = "data/mnist";
  std::string device = "auto";
  std::string lr_scaling = "linear";
  std::string exchange = "auto";
  std::string split_balance = "measured";
  std::string grad_compression = "none";
  double bucket_mb = 0;
  std::string cpu_kernels = kernels::cpu::name(kernels::cpu::default_cpu_kernels());
  std::string report;
  int threads = 0;
  bool no_graph = false, tf32 = false;
  std::string conv_algo = "benchmark";
  double warmup = -1;
  long long max_steps = -1;
  unsigned long long seed = 42;
  rt::TrainConfig train;
  rt::BackendOptions backend;
};

// A default as --help shows it: 0.2, not the float's 0.200000003.
std::string shown(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

po::options_description describe(Options& o, const Example& ex) {
  rt::TrainConfig& t = o.train;
  rt::CudaOptions& c = o.backend.cuda;
  po::options_description d(std::string(ex.program) + ": " + ex.summary + "\noptions");
  d.add_options()("help,h", "show this help")("version", "print the version")(
      "data", po::value(&o.data)->default_value(o.data),
      "directory with train-/t10k- IDX files (raw or .gz); see scripts/fetch-data.sh")(
      "epochs", po::value(&t.epochs)->default_value(t.epochs), "epochs")(
      "batch-size", po::value(&t.batch_per_rank)->default_value(t.batch_per_rank),
      "images per rank per step")("lr", po::value(&t.lr)->default_value(t.lr, shown(t.lr)),
                                  "single-rank learning rate")(
      "lr-scaling", po::value(&o.lr_scaling)->default_value(o.lr_scaling),
      "linear (lr x ranks, warmed up) or none")(
      "warmup-epochs", po::value(&o.warmup),
      "epochs of linear warm-up from --lr to the scaled rate (default with linear: 1 epoch and at "
      "least 100 steps; 0 with none)")(
      "momentum", po::value(&t.momentum)->default_value(t.momentum, shown(t.momentum)),
      "SGD momentum")(
      "weight-decay",
      po::value(&t.weight_decay)->default_value(t.weight_decay, shown(t.weight_decay)),
      "SGD weight decay")("seed", po::value(&o.seed)->default_value(o.seed),
                          "seed of the initial weights and the shuffles")(
      "device", po::value(&o.device)->default_value(o.device),
      "cpu, cuda or auto (the GPU when one is usable, else the CPU)")(
      "no-graph", po::bool_switch(&o.no_graph),
      "GPU: launch each step's kernels eagerly instead of replaying a CUDA Graph")(
      "tf32", po::bool_switch(&o.tf32), "GPU: TF32 tensor-core math (default: full FP32)")(
      "conv-algo", po::value(&o.conv_algo)->default_value(o.conv_algo),
      "GPU: how cuDNN's convolution algorithms are chosen: benchmark (time each, take the fastest "
      "deterministic one; when two are about as fast, runs may choose differently and differ in "
      "the last bits) or heuristic (cuDNN's heuristics: a run repeats bit for bit)")(
      "comm-timeout", po::value(&c.comm_timeout_s),
      ("seconds before a stuck collective is an error naming the rank: GPU: an NCCL collective "
       "(or a rank that never joins), default " +
       shown(c.comm_timeout_s) +
       "; CPU: a wait for a peer in the shared-memory exchange, default " +
       shown(o.backend.cpu.comm_timeout_s))
          .c_str())("loss-every", po::value(&c.loss_every)->default_value(c.loss_every),
                    "GPU: steps between loss read-backs (and stop-signal checks)")(
      "breakdown", po::bool_switch(&c.breakdown),
      "GPU: time kernels vs allreduce per step and print the breakdown")(
      "threads", po::value(&o.threads),
      "threads per rank (default $OMP_NUM_THREADS, else cores / ranks on the node): T replicas "
      "each train on batch/T images; T BLAS threads when T does not divide the batch")(
      "report", po::value(&o.report),
      "write the run's report JSON to FILE (its folder must exist; checked before training)")(
      "record-losses", po::value(&t.record_losses)->default_value(t.record_losses),
      "keep rank 0's loss of each of the first N steps in the report (step_losses), to compare "
      "runs step by step")(
      "checkpoint", po::value(&t.checkpoint_dir),
      "checkpoint directory (written each epoch and on SIGUSR1/SIGUSR2/SIGTERM)")(
      "resume", po::bool_switch(&t.resume), "continue from --checkpoint DIR when it holds one")(
      "max-steps", po::value(&o.max_steps),
      "stop after this many global steps, checkpoint and evaluate (tests, benchmarks)")(
      "exchange", po::value(&o.exchange)->default_value(o.exchange),
      "CPU: how ranks combine gradients: allreduce (MPI_Allreduce of the whole gradient), shared "
      "(ranks on one node share one copy of the weights and update the Dense layers from each "
      "other's activations in shared memory), hierarchical (the allreduce in three stages: within "
      "each node, across one rank per node, back within each node), or auto (shared when every "
      "rank is on one node)")(
      "bucket-mb", po::value(&o.bucket_mb)->default_value(o.bucket_mb),
      "> 0 sums the gradient in buckets of at least this many MB (whole layers, from the last), "
      "each started as soon as backward has produced it, overlapping the rest of backward "
      "(PyTorch DDP's buckets): on the CPU with MPI_Iallreduce (allreduce exchange, one thread "
      "per rank), on the GPU with NCCL on the communication stream; 0: one allreduce after "
      "backward")(
      "grad-compression", po::value(&o.grad_compression)->default_value(o.grad_compression),
      "CPU, allreduce exchange: none, powersgd:R (PowerSGD of rank R with error feedback for "
      "the Dense layers' gradients: each sends (rows + inputs) x R floats instead of rows x "
      "inputs, in two sums a step; the report's exchange_bytes_per_step says what a step sent), "
      "or acp:R (alternating PowerSGD, ACP-SGD: a step sends either rows x R or inputs x R "
      "floats, in one sum, and makes it in one pass over the gradient; at R = 1 it can diverge "
      "where PowerSGD does not: R >= 2 is the safe choice)")(
      "local-sgd", po::value(&o.backend.cpu.local_sgd),
      "CPU: local SGD: each rank steps its own copy of the weights from its own batch, and every "
      "H steps and at each epoch's end the ranks average their weights in one allreduce: a "
      "step's traffic divided by H; accuracy may drop as H grows. A stop signal takes effect "
      "at the next average: keep H steps shorter than gpurun's --kill-grace (PyTorch's "
      "post-local SGD; not with --grad-compression, --bucket-mb or --exchange hierarchical)")(
      "local-sgd-bf16", po::bool_switch(&o.backend.cpu.local_sgd_bf16),
      "with --local-sgd: each average sends the rank's change since the last one as bfloat16, "
      "half the bytes (the ranks still end each average with the same weights)")(
      "local-sgd-overlap", po::bool_switch(&o.backend.cpu.local_sgd_overlap),
      "with --local-sgd: each average within an epoch travels while the next H steps train, and "
      "is applied at the next average with each rank's own steps since kept (Overlap Local-SGD): "
      "the link's time hides behind the H steps (one MPI_Test a step moves it) and a rank waits "
      "for a slower one only when it is over H steps ahead, or where the run settles. "
      "The loss figures and a stop signal arrive one average later. An epoch's end overlaps "
      "too, its line printed at the next average, except where a checkpoint is written "
      "(--checkpoint) and at the run's end: there the ranks' weights are averaged at once, the "
      "same on every rank")(
      "split-balance", po::value(&o.split_balance)->default_value(o.split_balance),
      "CPU, shared exchange: how the ranks (and threads) of a node share the split Dense layer's "
      "columns: measured (start even, then follow each one's measured speed), even, or fixed "
      "weights W:W:... (one per rank x thread, e.g. 3:1); the trained parameters are the same "
      "bits whichever")(
      "cpu-kernels", po::value(&o.cpu_kernels)->default_value(o.cpu_kernels),
      "CPU: the library under the ops: onednn (oneDNN primitives, the CPU's best instructions), "
      "openblas (im2col + OpenBLAS sgemm) or blis (BLIS sgemm)")(
      "micro-batch", po::value(&o.backend.cpu.micro_batch),
      "accumulate gradients over micro-batches of this many images (must divide --batch-size)")(
      "eval-batch", po::value(&t.eval_batch)->default_value(t.eval_batch),
      "images per evaluation batch (at most the test set's size: a larger one is capped)");
  return d;
}

// --split-balance: measured, even or W:W:...; an empty string, or the complaint.
std::string parse_split(const std::string& text, rt::SplitShares& split) {
  split = {};
  if (text == "measured") return "";
  split.measured = false;
  if (text == "even") return "";
  const std::string bad =
      "--split-balance must be measured, even or positive weights W:W:... "
      "(one per rank x thread), got '" +
      text + "'";
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(':', at), text.size());
    const std::string word = text.substr(at, end - at);
    std::size_t used = 0;
    double w = 0;
    try {
      w = std::stod(word, &used);
    } catch (const std::exception&) {
      return bad;
    }
    if (used != word.size() || !(w > 0) || w > 1e6) return bad;
    split.weights.push_back(w);
    at = end + 1;
  }
  return split.weights.size() >= 2 ? "" : bad;
}

// "none", "powersgd:R" or "acp:R" (R from 1 to 64) into *rank (0 for none) and *alternate (acp);
// an empty string, or the complaint.
std::string parse_compression(const std::string& text, int* rank, bool* alternate) {
  const std::string bad =
      "--grad-compression must be none, powersgd:R or acp:R with R from 1 to 64, got " + text;
  *rank = 0;
  *alternate = text.rfind("acp:", 0) == 0;
  if (text == "none") return "";
  const std::string prefix = *alternate ? "acp:" : "powersgd:";
  if (text.rfind(prefix, 0) != 0) return bad;
  const std::string digits = text.substr(prefix.size());
  if (digits.empty() || digits.size() > 2 || digits.find_first_not_of("0123456789") != std::string::npos)
    return bad;
  *rank = std::stoi(digits);
  return *rank >= 1 && *rank <= 64 ? "" : bad;
}

// Turns the words into enums; an empty string, or the complaint.
std::string interpret(Options& o, const po::variables_map& vm) {
  if (o.lr_scaling == "linear")
    o.train.lr_scaling = rt::LrScaling::kLinear;
  else if (o.lr_scaling == "none")
    o.train.lr_scaling = rt::LrScaling::kNone;
  else
    return "--lr-scaling must be linear or none, got " + o.lr_scaling;
  if (o.exchange == "auto")
    o.backend.cpu.exchange = rt::Exchange::kAuto;
  else if (o.exchange == "allreduce")
    o.backend.cpu.exchange = rt::Exchange::kAllreduce;
  else if (o.exchange == "shared")
    o.backend.cpu.exchange = rt::Exchange::kShared;
  else if (o.exchange == "hierarchical")
    o.backend.cpu.exchange = rt::Exchange::kHierarchical;
  else
    return "--exchange must be auto, allreduce, shared or hierarchical, got " + o.exchange;
  if (std::string why = parse_split(o.split_balance, o.backend.cpu.split); !why.empty()) {
    return why;
  }
  if (std::string why = parse_compression(o.grad_compression, &o.backend.cpu.powersgd_rank,
                                          &o.backend.cpu.powersgd_alternate);
      !why.empty())
    return why;
  if (!(o.bucket_mb >= 0) || o.bucket_mb > 1e4) return "--bucket-mb must be from 0 to 10000";
  if (vm.count("local-sgd") && (o.backend.cpu.local_sgd < 1 || o.backend.cpu.local_sgd > 100000))
    return "--local-sgd must be from 1 to 100000 (steps between averages), got " +
           std::to_string(o.backend.cpu.local_sgd);
  o.backend.cpu.bucket_floats = std::size_t(o.bucket_mb * 1e6 / sizeof(float));
  o.backend.cuda.bucket_floats = o.backend.cpu.bucket_floats;
  if (auto k = kernels::cpu::parse_cpu_kernels(o.cpu_kernels))
    o.backend.cpu.kernels = *k;
  else
    return "--cpu-kernels must be onednn, openblas or blis, got " + o.cpu_kernels;
  if (o.device != "cpu" && o.device != "cuda" && o.device != "auto") {
    return "--device must be cpu, cuda or auto, got " + o.device;
  }
  if (vm.count("threads") && o.threads < 1) return "--threads must be >= 1";
  if (o.train.record_losses < 0) return "--record-losses must be >= 0";
  if (o.train.epochs < 1) return "--epochs must be >= 1";
  if (o.train.batch_per_rank < 1) return "--batch-size must be >= 1";
  if (o.train.eval_batch < 1) return "--eval-batch must be >= 1";
  if (o.train.resume && o.train.checkpoint_dir.empty()) return "--resume needs --checkpoint DIR";
  const int micro = o.backend.cpu.micro_batch;
  if (micro < 0 || (micro > 0 && o.train.batch_per_rank % micro != 0)) {
    return "--micro-batch " + std::to_string(micro) + " must divide --batch-size " +
           std::to_string(o.train.batch_per_rank);
  }
  if (!(o.backend.cuda.comm_timeout_s > 0)) return "--comm-timeout must be > 0";
  if (vm.count("comm-timeout")) o.backend.cpu.comm_timeout_s = o.backend.cuda.comm_timeout_s;
  o.backend.cuda.graph = o.no_graph ? rt::GraphMode::kEager : rt::GraphMode::kCapture;
  o.backend.cuda.math = o.tf32 ? rt::GpuMath::kTf32 : rt::GpuMath::kFp32;
  if (o.conv_algo != "benchmark" && o.conv_algo != "heuristic") {
    return "--conv-algo must be benchmark or heuristic, got " + o.conv_algo;
  }
  o.backend.cuda.conv_algo =
      o.conv_algo == "heuristic" ? rt::ConvAlgo::kHeuristic : rt::ConvAlgo::kBenchmark;
  o.train.warmup_epochs = o.warmup;
  o.train.max_steps = o.max_steps;
  o.train.seed = o.seed;
  return "";
}

// Returns false (after printing) when the program should exit without training.
bool parse(int argc, char** argv, const Example& ex, Options& o, int& exit_code) {
  po::options_description desc = describe(o, ex);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << ex.program << ": " << e.what() << "\n" << desc;
    exit_code = 2;
    return false;
  }
  if (vm.count("help")) {
    std::cout << desc;
    exit_code = 0;
    return false;
  }
  if (vm.count("version")) {
    std::cout << common::version_line(ex.program) << "\n";
    exit_code = 0;
    return false;
  }
  const std::string bad = interpret(o, vm);
  if (!bad.empty()) {
    std::cerr << ex.program << ": " << bad << "\n";
    exit_code = 2;
    return false;
  }
  return true;
}

// Whether to train on the GPU. --device cuda without a usable device is an error (make_backend
// says which); auto falls back to the CPU.
rt::Device choose_device(const std::string& requested, std::ostream& log) {
  if (requested == "cpu") return rt::Device::kCpu;
  if (requested == "cuda") return rt::Device::kCuda;
  const bool have = rt::cuda_available();
  log << (have ? "device auto: a CUDA device is present, training on the GPU"
               : "device auto: no CUDA device, training on the CPU")
      << std::endl;
  return have ? rt::Device::kCuda : rt::Device::kCpu;
}

// OMP_NUM_THREADS is what gpurun sets as CPUs per rank; else the node's cores among its ranks.
int default_threads(const rt::RuntimeEnv& env, const rt::ProcessGroup& pg) {
  if (env.omp_num_threads > 0) return env.omp_num_threads;
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, pg.local_size()));
}

// Whether the user's terminal shows rank 0's stdout. gpurun says so in GPURUN_STDOUT_TTY; bare
// mpirun gives every rank a pseudo-terminal whatever its own stdout is, so isatty() means nothing
// under Open MPI and there is no bar.
bool stdout_is_terminal(const rt::RuntimeEnv& env) {
  if (env.stdout_tty >= 0) return env.stdout_tty == 1;
  if (env.under_open_mpi) return false;
  return ::isatty(STDOUT_FILENO) != 0;
}

void notes(const Options& o, const rt::RuntimeEnv& env, std::ostream& log) {
  if (o.backend.device == rt::Device::kCpu &&
      o.backend.cpu.kernels == kernels::cpu::CpuKernels::kOpenBlas &&
      kernels::cpu::blas_below_cpu()) {
    // OPENBLAS_CORETYPE is the user's (or the site's) choice, so it is kept; but say what it costs.
    log << "note: OpenBLAS runs its " << kernels::cpu::blas_core()
        << " (AVX2) kernels on this AVX-512 CPU"
        << (env.openblas_coretype.empty() ? "" : " because OPENBLAS_CORETYPE is set")
        << "; without that its AVX-512 kernels train about 40% faster" << std::endl;
  }
  if (o.backend.device == rt::Device::kCuda && o.exchange != "auto") {
    log << "note: --exchange " << o.exchange << " is for the CPU path; on the GPU the ranks "
        << "allreduce with NCCL" << std::endl;
  }
  if (o.backend.device == rt::Device::kCuda && o.backend.cpu.micro_batch > 0) {
    log << "note: --micro-batch is a CPU memory saver; the GPU runs the whole batch at once"
        << std::endl;
  }
}

void run(const Example& ex, Options& o, const rt::RuntimeEnv& env, rt::ProcessGroup& pg,
         std::ostream& log) {
  o.backend.device = choose_device(o.device, log);
  const int threads = o.threads > 0 ? o.threads : default_threads(env, pg);
  o.backend.cpu.threads = threads;
  o.backend.cuda.nccl_multi_rank_gpu = env.nccl_multi_rank_gpu;
  o.backend.cuda.visible_devices = env.cuda_visible_devices;
  o.backend.cuda.gpus_from_launcher = env.under_gpurun;
  o.train.progress = pg.rank() == 0 && stdout_is_terminal(env);
  rt::Dataset data;
  rt::run_agreed(pg, [&] { data = rt::load_mnist_dir(o.data); });  // a bad --data: one error
  const rt::ModelSpec model = ex.model({1, data.train.rows, data.train.cols}, data.classes);
  log << ex.program << ": " << data.name << " (" << data.train.count << " train, "
      << data.test.count << " test), " << pg.size() << " rank(s) [" << pg.backend() << "], device "
      << (o.backend.device == rt::Device::kCuda ? "cuda" : "cpu") << ", " << threads
      << " thread(s) per rank" << std::endl;
  notes(o, env, log);
  rt::run_agreed(pg, [&] {  // a bad --report path: one error now, not after the training
    if (pg.rank() == 0 && !o.report.empty()) rt::check_report_path(o.report);
  });
  auto backend = rt::make_backend(pg, model, data, rt::backend_config(o.train), o.backend, log);
  const rt::TrainResult r = rt::train(pg, data, model, *backend, o.train, log);
  if (r.stop == rt::StopReason::kSignal && !o.train.checkpoint_dir.empty() && !o.train.resume) {
    log << ex.program << ": the same command with --resume continues from there" << std::endl;
  }
  if (o.backend.cuda.breakdown && o.backend.device == rt::Device::kCuda) {
    log << "breakdown: kernels " << r.kernel_seconds << " s, allreduce " << r.exchange_seconds
        << " s, host " << r.host_seconds << " s" << std::endl;
  }
  if (pg.rank() == 0 && !o.report.empty()) {
    const rt::ReportContext ctx{ex.program, pg.size(),        pg.backend(),
                                data.name,  data.train.count, data.test.count,
                                threads,    o.lr_scaling,     env.restart_count};
    rt::write_report(o.report, o.train, r, ctx);
    log << "report written to " << o.report << std::endl;
  }
}

}  // namespace

int train_main(int argc, char** argv, const Example& example) {
  rt::block_stop_signals();  // before MPI, OpenBLAS or the trainer start threads (stop_signal.h)
  Options o;
  int code = 0;
  if (!parse(argc, argv, example, o, code)) return code;
  std::unique_ptr<rt::ProcessGroup> pg;
  try {
    const rt::RuntimeEnv env = rt::runtime_env_from_process();
    pg = rt::make_process_group({env.shm_dir, env.node_index});
    std::ostream null_stream(nullptr);
    run(example, o, env, *pg, pg->rank() == 0 ? std::cout : null_stream);
    return 0;
  } catch (const rt::GroupError& e) {
    // Every rank holds it (a bad --data, a checkpoint directory that cannot be used): rank 0
    // says it once, and every rank ends normally.
    if (pg->rank() == 0) std::cerr << example.program << ": error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << example.program;
    if (pg) std::cerr << " (rank " << pg->rank() << ")";
    std::cerr << ": error: " << e.what() << std::endl;
    rt::abort_job_if_parallel(1);  // the other ranks may wait for this one forever
    return 1;
  }
}

}  // namespace gpurun::examples
