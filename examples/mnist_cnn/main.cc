// mnist_cnn: the MNIST CNN of the Keras benchmark (Conv2D 32 3x3 + ReLU -> Dense 128 + ReLU ->
// Dense 10, softmax cross-entropy, SGD lr 0.2, 8 epochs, 64 images per rank), data-parallel over
// Open MPI. Run it as one process, under `mpirun -n N`, or under `gpurun -n N --`:
//   ./scripts/fetch-data.sh && build/examples/mnist_cnn/mnist_cnn --data data/mnist
// Only this file turns errors into exit codes: 0 done (or stopped by a signal with a checkpoint),
// 1 runtime error, 2 bad usage.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "gpurun/kernels/device_probe.h"
#include "gpurun/kernels/threads.h"
#include "gpurun/runtime/dataset.h"
#include "gpurun/runtime/process_group.h"
#include "gpurun/runtime/trainer.h"
#include "report.h"
#ifdef GPURUN_HAVE_CUDA_TRAINER
#include "gpurun/runtime/gpu_trainer.h"
#endif

namespace po = boost::program_options;
namespace rt = gpurun::runtime;

namespace {

struct Options {
  std::string data = "data/mnist";
  std::string device = "auto";
  std::string lr_scaling = "linear";
  std::string exchange = "auto";
  std::string report;
  int threads = 0;
  bool no_graph = false;
  bool tf32 = false;
  bool breakdown = false;
  double comm_timeout = 60;
  int loss_every = 100;
  rt::TrainConfig train;
};

// Environment is read here, once: OMP_NUM_THREADS is what gpurun sets as CPUs per rank.
int default_threads(const rt::ProcessGroup& pg) {
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(omp);
    if (n > 0) return n;
  }
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, pg.local_size()));
}

// Whether the user's terminal shows rank 0's stdout. gpurun says so in GPURUN_STDOUT_TTY; bare
// mpirun gives every rank a pseudo-terminal whatever its own stdout is, so isatty() means nothing
// under Open MPI (OMPI_COMM_WORLD_SIZE set) and there is no bar.
bool stdout_is_terminal() {
  if (const char* t = std::getenv("GPURUN_STDOUT_TTY")) return std::string(t) == "1";
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) return false;
  return ::isatty(STDOUT_FILENO) != 0;
}

// Whether to train on the GPU. --device cuda without a usable device (or without CUDA in the
// build) is an error; auto falls back to the CPU.
bool use_cuda(const std::string& requested, std::ostream& log) {
#ifdef GPURUN_HAVE_CUDA_TRAINER
  const bool have = rt::cuda_available();
#else
  const bool have = false;
#endif
  if (requested == "cpu") return false;
  if (requested == "cuda") {
#ifndef GPURUN_HAVE_CUDA_TRAINER
    throw std::runtime_error(
        "--device cuda: this mnist_cnn was built without CUDA (GPURUN_ENABLE_CUDA=OFF); use "
        "--device cpu");
#endif
    if (!have) {
      throw std::runtime_error(
          "--device cuda: no usable CUDA device (no driver, none visible in CUDA_VISIBLE_DEVICES, "
          "or a kernel did not launch); use --device cpu");
    }
    return true;
  }
  log << (have ? "device auto: a CUDA device is present, training on the GPU"
               : "device auto: no usable CUDA device, training on the CPU")
      << std::endl;
  return have;
}

// Returns false (after printing) when the program should exit without training.
bool parse(int argc, char** argv, Options& o, int& exit_code) {
  po::options_description desc("mnist_cnn options");
  double warmup = -1;
  long long max_steps = -1;
  unsigned long long seed = o.train.seed;
  desc.add_options()("help,h", "show this help")(
      "data", po::value(&o.data)->default_value(o.data),
      "directory with train-/t10k- IDX files (raw or .gz); see scripts/fetch-data.sh")(
      "epochs", po::value(&o.train.epochs)->default_value(o.train.epochs), "epochs")(
      "batch-size", po::value(&o.train.batch_per_rank)->default_value(o.train.batch_per_rank),
      "images per rank per step")("lr", po::value(&o.train.lr)->default_value(o.train.lr),
                                  "single-rank learning rate")(
      "lr-scaling", po::value(&o.lr_scaling)->default_value(o.lr_scaling),
      "linear (lr x ranks, warmed up) or none")(
      "warmup-epochs", po::value(&warmup),
      "epochs of linear warm-up from --lr to the scaled rate (default with linear: 1 epoch and at "
      "least 100 steps; 0 with none)")(
      "momentum", po::value(&o.train.momentum)->default_value(o.train.momentum), "SGD momentum")(
      "weight-decay", po::value(&o.train.weight_decay)->default_value(o.train.weight_decay),
      "SGD weight decay")("seed", po::value(&seed)->default_value(seed),
                          "seed of the initial weights and the shuffles")(
      "device", po::value(&o.device)->default_value(o.device),
      "cpu, cuda or auto (the GPU when one is usable, else the CPU)")(
      "no-graph", po::bool_switch(&o.no_graph),
      "GPU: launch each step's kernels eagerly instead of replaying a CUDA Graph")(
      "tf32", po::bool_switch(&o.tf32), "GPU: TF32 tensor-core math (default: full FP32)")(
      "comm-timeout", po::value(&o.comm_timeout)->default_value(o.comm_timeout),
      "GPU: seconds before a stuck NCCL collective (or a rank that never joins) is an error")(
      "loss-every", po::value(&o.loss_every)->default_value(o.loss_every),
      "GPU: steps between loss read-backs (and stop-signal checks)")(
      "breakdown", po::bool_switch(&o.breakdown),
      "GPU: time kernels vs allreduce per step and print the breakdown")(
      "threads", po::value(&o.threads),
      "threads per rank (default $OMP_NUM_THREADS, else cores / ranks on the node): T replicas "
      "each train on batch/T images; T BLAS threads when T does not divide the batch")(
      "report", po::value(&o.report), "write the run's report JSON to FILE")(
      "checkpoint", po::value(&o.train.checkpoint_dir),
      "checkpoint directory (written each epoch and on SIGUSR1/SIGUSR2/SIGTERM)")(
      "resume", po::bool_switch(&o.train.resume), "continue from --checkpoint DIR")(
      "max-steps", po::value(&max_steps),
      "stop after this many global steps, checkpoint and evaluate (tests, benchmarks)")(
      "exchange", po::value(&o.exchange)->default_value(o.exchange),
      "CPU: how ranks combine gradients: allreduce (MPI_Allreduce of the whole gradient), shared "
      "(ranks on one node share one copy of the weights and update the Dense layers from each "
      "other's activations in shared memory), or auto (shared when every rank is on one node)")(
      "micro-batch", po::value(&o.train.micro_batch),
      "accumulate gradients over micro-batches of this many images (must divide --batch-size)")(
      "eval-batch", po::value(&o.train.eval_batch)->default_value(o.train.eval_batch),
      "images per evaluation batch");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "mnist_cnn: " << e.what() << "\n" << desc;
    exit_code = 2;
    return false;
  }
  if (vm.count("help")) {
    std::cout << desc;
    exit_code = 0;
    return false;
  }
  if (o.lr_scaling == "linear") {
    o.train.lr_scaling = rt::LrScaling::kLinear;
  } else if (o.lr_scaling == "none") {
    o.train.lr_scaling = rt::LrScaling::kNone;
  } else {
    std::cerr << "mnist_cnn: --lr-scaling must be linear or none, got " << o.lr_scaling << "\n";
    exit_code = 2;
    return false;
  }
  if (o.exchange == "auto") {
    o.train.exchange = rt::Exchange::kAuto;
  } else if (o.exchange == "allreduce") {
    o.train.exchange = rt::Exchange::kAllreduce;
  } else if (o.exchange == "shared") {
    o.train.exchange = rt::Exchange::kShared;
  } else {
    std::cerr << "mnist_cnn: --exchange must be auto, allreduce or shared, got " << o.exchange
              << "\n";
    exit_code = 2;
    return false;
  }
  if (o.device != "cpu" && o.device != "cuda" && o.device != "auto") {
    std::cerr << "mnist_cnn: --device must be cpu, cuda or auto, got " << o.device << "\n";
    exit_code = 2;
    return false;
  }
  if (vm.count("threads") && o.threads < 1) {
    std::cerr << "mnist_cnn: --threads must be >= 1\n";
    exit_code = 2;
    return false;
  }
  o.train.warmup_epochs = warmup;
  o.train.max_steps = max_steps;
  o.train.seed = seed;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  int code = 0;
  if (!parse(argc, argv, o, code)) return code;
  int rank = -1;
  try {
    auto pg = rt::make_process_group();
    rank = pg->rank();
    std::ostream null_stream(nullptr);
    std::ostream& log = rank == 0 ? std::cout : null_stream;
    const bool cuda = use_cuda(o.device, log);
    std::string device = cuda ? "cuda" : "cpu";
    const int threads = o.threads > 0 ? o.threads : default_threads(*pg);
    o.train.threads = threads;
    const rt::Dataset data = rt::load_mnist_dir(o.data);
    o.train.progress = rank == 0 && stdout_is_terminal();
    log << "mnist_cnn: " << data.name << " (" << data.train.count << " train, " << data.test.count
        << " test), " << pg->size() << " rank(s) [" << pg->backend() << "], device " << device
        << ", " << threads << " thread(s) per rank" << std::endl;
    if (!cuda && gpurun::kernels::cpu::blas_below_cpu()) {
      // OPENBLAS_CORETYPE is the user's (or the site's) choice, so it is kept; but say what it
      // costs.
      log << "note: OpenBLAS runs its " << gpurun::kernels::cpu::blas_core()
          << " (AVX2) kernels on this AVX-512 CPU"
          << (std::getenv("OPENBLAS_CORETYPE") ? " because OPENBLAS_CORETYPE is set" : "")
          << "; without that its AVX-512 kernels train about 40% faster" << std::endl;
    }
    if (cuda && o.exchange != "auto") {
      log << "note: --exchange " << o.exchange << " is for the CPU path; on the GPU the ranks "
          << "allreduce with NCCL" << std::endl;
    }
    rt::TrainResult r;
    if (cuda) {
#ifdef GPURUN_HAVE_CUDA_TRAINER
      rt::GpuOptions opt;
      opt.graph = o.no_graph ? rt::GraphMode::kEager : rt::GraphMode::kCapture;
      opt.math = o.tf32 ? rt::GpuMath::kTf32 : rt::GpuMath::kFp32;
      opt.comm_timeout_s = o.comm_timeout;
      opt.loss_every = o.loss_every;
      opt.breakdown = o.breakdown;
      rt::GpuTrainResult g = rt::train_gpu(*pg, data, o.train, opt, log);
      if (o.breakdown) {
        log << "breakdown: kernels " << g.kernel_seconds << " s, allreduce " << g.allreduce_seconds
            << " s, host " << g.host_seconds << " s" << std::endl;
      }
      r = std::move(g.train);
      device = g.device;
#endif
    } else {
      r = rt::train(*pg, data, o.train, log);
    }
    if (rank == 0 && !o.report.empty()) {
      ReportInput in{*pg, data, o.train, r, device, threads, o.lr_scaling};
      write_report(o.report, in);
      log << "report written to " << o.report << std::endl;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "mnist_cnn";
    if (rank >= 0) std::cerr << " (rank " << rank << ")";
    std::cerr << ": error: " << e.what() << std::endl;
    rt::abort_job_if_parallel(1);  // the other ranks may wait for this one forever
    return 1;
  }
}
