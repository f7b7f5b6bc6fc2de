// trainer.cc: the device-agnostic training loop (trainer.h): epochs of sampler-planned steps run by
// a Backend, syncs, stop signals, checkpoints and resume, evaluation and the epoch lines.
#include "gpurun/runtime/trainer.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>

#include "data/sampler.h"
#include "gpurun/common/posix.h"
#include "gpurun/common/strings.h"
#include "gpurun/runtime/stop_signal.h"
#include "heartbeat.h"
#include "train/checkpoint.h"

namespace gpurun::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

using common::seconds_since;

// Where an epoch stands: its running sums are what a checkpoint saves mid-epoch.
struct EpochSums {
  double loss = 0, correct = 0, seen = 0;
};

// What an epoch's line needs, taken at its end; kept while the end's average is in flight
// (SyncAt::kEpochEnd), until it lands at the next sync.
struct EpochDone {
  std::int64_t epoch = 0;
  double seconds = 0, images = 0, exchange_seconds = 0;
  EpochSums sums;
};

class Loop {
 public:
  Loop(ProcessGroup& pg, const Dataset& data, const ModelSpec& model, Backend& backend,
       const TrainConfig& cfg, std::ostream& log)
      : pg_(pg),
        model_(model),
        backend_(backend),
        cfg_(cfg),
        log_(log),
        world_(pg.size()),
        rank_(pg.rank()),
        sampler_(data.train.count, world_, rank_, cfg.batch_per_rank, cfg.seed),
        spe_(std::int64_t(sampler_.steps_per_epoch())),
        eval_batch_(eval_batch_for(cfg.eval_batch, data)),
        heartbeat_(cfg.heartbeat_path, std::cerr) {}  // every rank's warning, not only rank 0's

  TrainResult run();

 private:
  void start();
  bool resume();
  void run_epoch(std::int64_t epoch);
  EpochPlan plan(std::int64_t epoch, std::int64_t first);
  // The sync `at` (an epoch's end in flight landed first); folding it in is absorb's.
  Progress sync(SyncAt at);
  SyncAt where(std::int64_t epoch, std::int64_t done) const;
  bool land_epoch_end();
  // Folds a sync into the epoch's sums; true when the ranks agreed to stop.
  bool absorb(const Progress& p, std::int64_t epoch, std::int64_t steps_done);
  void add(EpochSums& sums, const Progress& p);
  void end_epoch(const EpochDone& e, const Evaluation& ev);
  void set_figures(const Evaluation& ev, const EpochSums& sums);
  void take_figures() { set_figures(backend_.evaluate(eval_batch_), sums_); }
  void clear_bar();
  bool steps_used_up() const { return cfg_.max_steps >= 0 && global_step_ >= cfg_.max_steps; }
  // A CPU step has run when step() returns, even between syncs (local SGD's are H steps apart);
  // a GPU step is only queued, so the GPU path beats at syncs, once the device has answered.
  bool beat_each_step() const { return res_.backend.device == "cpu"; }
  void checkpoint(std::int64_t epoch, std::int64_t step);
  void say_stopped();
  void say_max_steps();
  void check_agreement();

  ProcessGroup& pg_;
  const ModelSpec& model_;
  Backend& backend_;
  const TrainConfig& cfg_;
  std::ostream& log_;
  const int world_, rank_;
  DistributedSampler sampler_;
  const std::int64_t spe_;
  const int eval_batch_;  // the backend's (make_backend caps it alike)
  Heartbeat heartbeat_;
  TrainResult res_;
  std::int64_t start_epoch_ = 0, start_step_ = 0, global_step_ = 0;
  EpochSums sums_;
  std::optional<EpochDone> in_flight_;
  // This epoch's seconds (wall and CPU) spent on the figures of the one before: not training.
  double set_aside_ = 0, set_aside_cpu_ = 0;
};

TrainResult Loop::run() {
  const auto t_start = Clock::now();
  res_.backend = backend_.info();
  res_.param_count = model_.param_count();
  res_.train_flops_per_example = model_.train_flops_per_example();
  res_.steps_per_epoch = spe_;
  res_.lr_peak = learning_rate(cfg_, world_, std::int64_t(1) << 60, spe_);
  start();
  const std::int64_t first_step = global_step_;  // after a resume, the checkpoint's
  StopSignalGuard signals;  // installed before the "training:" line, which scripts wait for
  log_ << "training: " << world_ << " rank(s) x " << cfg_.batch_per_rank << " images, " << spe_
       << " steps/epoch, lr " << res_.lr_peak << ", " << res_.param_count << " parameters, "
       << res_.backend.device << ", " << res_.backend.summary << std::endl;
  for (std::int64_t epoch = start_epoch_; epoch < cfg_.epochs; ++epoch) {
    if (steps_used_up()) {  // at an epoch boundary: the last epoch's figures stand
      res_.stop = StopReason::kMaxSteps;
      break;
    }
    run_epoch(epoch);
    if (res_.stop != StopReason::kFinished) break;
  }
  if (in_flight_) land_epoch_end();  // (a sync of the next epoch lands it: never left, but safe)
  if (global_step_ == first_step) take_figures();  // none trained: the checkpoint's, evaluated
  if (res_.stop == StopReason::kSignal) say_stopped();
  if (res_.stop == StopReason::kMaxSteps) say_max_steps();
  const BackendTimes t = backend_.times();
  res_.exchange_seconds = t.exchange;
  res_.kernel_seconds = t.kernels;
  res_.host_seconds = t.host;
  res_.compute_seconds = t.kernels > 0 ? t.kernels : res_.train_seconds - t.exchange;
  res_.global_steps = global_step_;
  res_.steps_run = global_step_ - first_step;
  if (global_step_ > 0) res_.lr_last = learning_rate(cfg_, world_, global_step_ - 1, spe_);
  std::vector<float> params, velocity;
  backend_.get_state(&params, &velocity);
  res_.param_checksum = common::fnv1a(params.data(), params.size() * sizeof(float));
  check_agreement();
  res_.seconds_total = seconds_since(t_start);
  return res_;
}

// Rank 0's initial weights, or its checkpoint, become every rank's. Rank 0 alone touches the
// checkpoint directory; what fails there becomes every rank's error (agree_on_errors), so that
// the program can say it once and no rank waits for rank 0 in a collective forever.
void Loop::start() {
  if (!cfg_.checkpoint_dir.empty()) {
    int removed = 0;
    run_agreed(pg_, [&] {
      if (rank_ == 0) removed = prepare_checkpoint_dir(cfg_.checkpoint_dir);
    });
    if (removed > 0) {
      log_ << "removed " << removed << " temporary checkpoint file(s) of writers that died in "
           << cfg_.checkpoint_dir << "\n";
    }
  }
  if (cfg_.resume && resume()) return;
  std::vector<float> params(rank_ == 0 ? model_.param_floats() : 0);
  if (rank_ == 0) model_.init_params(cfg_.seed, params.data());
  backend_.set_state(params.data(), nullptr);
}

// Rank 0 reads the checkpoint and shares it (ranks need not share a filesystem). False: none.
// A checkpoint rank 0 cannot use is every rank's error (agree_on_errors): no rank waits for it.
bool Loop::resume() {
  const std::string path = checkpoint_path(cfg_.checkpoint_dir);
  std::int32_t have = 0;
  Checkpoint ck;
  run_agreed(pg_, [&] {
    if (rank_ != 0 || !checkpoint_exists(cfg_.checkpoint_dir)) return;
    ck = load_checkpoint(path);
    if (ck.params.size() != model_.param_floats()) {
      throw std::runtime_error(path + ": holds " + std::to_string(ck.params.size()) +
                               " parameters, the model has " +
                               std::to_string(model_.param_floats()));
    }
    have = 1;
  });
  if (have && ck.seed != cfg_.seed) {
    log_ << "warning: checkpoint was written with seed " << ck.seed << "; this run has seed "
         << cfg_.seed << ": the data order will differ\n";
  }
  const std::int32_t was_world = ck.world_size, was_batch = ck.batch_per_rank;
  if (have && rescale_position(ck, world_, cfg_.batch_per_rank, spe_)) {
    log_ << "checkpoint was written with " << was_world << " ranks x " << was_batch
         << "; this run has " << world_ << " x " << cfg_.batch_per_rank
         << ": its position is carried over in samples\n";
  }
  pg_.broadcast(&have, sizeof have, 0);
  if (!have) {
    log_ << "no checkpoint in " << cfg_.checkpoint_dir << ": starting from scratch\n";
    return false;
  }
  std::int64_t pos[3] = {ck.epoch, ck.step, ck.global_step};
  double sums[3] = {ck.epoch_loss_sum, ck.epoch_correct, ck.epoch_seen};
  pg_.broadcast(pos, sizeof pos, 0);
  pg_.broadcast(sums, sizeof sums, 0);
  const bool velocity = ck.velocity.size() == ck.params.size() && cfg_.momentum != 0.0f;
  backend_.set_state(ck.params.data(), velocity ? ck.velocity.data() : nullptr);
  start_epoch_ = pos[0], start_step_ = pos[1], global_step_ = pos[2];
  sums_ = {sums[0], sums[1], sums[2]};
  res_.resumed = true;
  res_.resumed_epoch = start_epoch_;
  res_.resumed_step = start_step_;
  if (start_epoch_ >= cfg_.epochs) {
    log_ << "resumed from " << path << ": the checkpoint is at the end of epoch " << start_epoch_
         << ", the run has " << cfg_.epochs << " epoch(s): nothing left to train\n";
  } else {
    log_ << "resumed from " << path << " at epoch " << start_epoch_ + 1 << ", step " << start_step_
         << "\n";
  }
  return true;
}

EpochPlan Loop::plan(std::int64_t epoch, std::int64_t first) {
  EpochPlan p;
  p.epoch = epoch;
  p.first_step = first;
  p.steps = spe_;
  p.indices.resize(std::size_t(spe_) * std::size_t(cfg_.batch_per_rank));
  p.lr.resize(std::size_t(spe_));
  sampler_.set_epoch(epoch);
  for (std::int64_t t = 0; t < spe_; ++t) {
    sampler_.step_indices(std::size_t(t), &p.indices[std::size_t(t) * cfg_.batch_per_rank]);
    p.lr[std::size_t(t)] = learning_rate(cfg_, world_, global_step_ - first + t, spe_);
  }
  return p;
}

void Loop::run_epoch(std::int64_t epoch) {
  const std::int64_t first = epoch == start_epoch_ ? start_step_ : 0;
  // The sums cover this epoch's steps before `first`: none at step 0, whatever a checkpoint
  // written at the end of the previous epoch carried.
  if (first == 0) sums_ = {};
  backend_.begin_epoch(plan(epoch, first));
  const auto t_epoch = Clock::now();
  const double cpu0 = process_cpu_seconds(), exchange0 = backend_.times().exchange;
  set_aside_ = set_aside_cpu_ = 0;
  const int every = std::max(1, backend_.sync_every());
  std::int64_t done = first, synced = first;  // steps run, and run and synced
  bool ends_in_flight = false;
  while (done < spe_) {
    if (steps_used_up()) {
      res_.stop = StopReason::kMaxSteps;
      break;
    }
    backend_.step(done, StopSignalGuard::received() != 0);
    ++done;
    ++global_step_;
    if (beat_each_step()) heartbeat_.beat(global_step_);
    if (done - synced < every && done != spe_) continue;
    synced = done;
    const SyncAt at = where(epoch, done);
    const Progress p = sync(at);
    ends_in_flight = at == SyncAt::kEpochEnd && !p.stop;  // a stop settled it
    if (absorb(p, epoch, done)) break;
  }
  if (synced < done) absorb(sync(SyncAt::kSettle), epoch, done);  // before max_steps
  const double seconds = seconds_since(t_epoch) - set_aside_;
  const std::int64_t images = (done - first) * cfg_.batch_per_rank * world_;
  res_.train_seconds += seconds;
  res_.train_cpu_seconds += process_cpu_seconds() - cpu0 - set_aside_cpu_;
  res_.images += images;
  clear_bar();
  if (res_.stop == StopReason::kSignal) return;
  EpochDone e{epoch, seconds, double(images), backend_.times().exchange - exchange0, sums_};
  if (ends_in_flight) {
    in_flight_ = std::move(e);
    ++res_.epoch_ends_overlapped;
    return;
  }
  if (res_.stop == StopReason::kMaxSteps) {  // a partial epoch: its figures, no epoch line
    checkpoint(epoch, done);
    return take_figures();
  }
  end_epoch(e, backend_.evaluate(eval_batch_));
  checkpoint(epoch + 1, 0);
}

// Where the sync after `done` steps of `epoch` falls. The parameters are read (evaluated, saved)
// after an epoch's last step and max_steps'; a backend whose averages overlap the steps after
// them (over more than one rank) may leave an epoch's end in flight when no checkpoint is
// written there and the run goes on: its figures then wait for the next sync.
SyncAt Loop::where(std::int64_t epoch, std::int64_t done) const {
  if (done != spe_ && !steps_used_up()) return SyncAt::kPartway;
  const bool overlaps = res_.backend.local_sgd_overlap && world_ > 1;
  if (overlaps && cfg_.checkpoint_dir.empty() && done == spe_ && !steps_used_up() &&
      epoch + 1 < cfg_.epochs)
    return SyncAt::kEpochEnd;
  return SyncAt::kSettle;
}

// An epoch's end still in flight lands first; a stop that came with it makes this sync settle
// and stop every rank.
Progress Loop::sync(SyncAt at) {
  const bool stop = in_flight_ && land_epoch_end();
  Progress p = backend_.sync(stop ? SyncAt::kSettle : at);
  p.stop = p.stop || stop;
  return p;
}

// Collective: the average started at the last epoch's end, landed. That epoch's last steps'
// statistics, its test split evaluated with its average, and its line; the evaluation's seconds
// are set aside from this epoch's. True when a stop came with the statistics.
bool Loop::land_epoch_end() {
  EpochDone e = std::move(*in_flight_);
  in_flight_.reset();
  const Progress p = backend_.land_epoch_end();
  const auto t = Clock::now();
  const double cpu = process_cpu_seconds();
  add(e.sums, p);
  clear_bar();
  end_epoch(e, backend_.evaluate_epoch_end(eval_batch_));
  set_aside_ += seconds_since(t);
  set_aside_cpu_ += process_cpu_seconds() - cpu;
  return p.stop;
}

void Loop::clear_bar() {
  if (cfg_.progress && rank_ == 0) log_ << "\r" << std::string(70, ' ') << "\r";
}

void Loop::add(EpochSums& sums, const Progress& p) {
  sums.loss += p.loss_sum;
  sums.correct += p.correct;
  sums.seen += double(p.steps) * cfg_.batch_per_rank * world_;
  for (double l : p.rank_losses) {
    if (std::int64_t(res_.step_losses.size()) < cfg_.record_losses) res_.step_losses.push_back(l);
  }
}

bool Loop::absorb(const Progress& p, std::int64_t epoch, std::int64_t steps_done) {
  add(sums_, p);
  if (!beat_each_step()) heartbeat_.beat(global_step_);
  if (cfg_.progress && rank_ == 0) {
    char bar[128];
    const int filled = int(30.0 * double(steps_done) / double(spe_));
    std::snprintf(bar, sizeof bar, "\repoch %lld [%-30s] %lld/%lld loss %.4f", (long long)epoch + 1,
                  std::string(std::size_t(filled), '#').c_str(), (long long)steps_done,
                  (long long)spe_, sums_.loss / std::max(1.0, sums_.seen));
    log_ << bar << std::flush;
  }
  if (!p.stop) return false;
  res_.stop = StopReason::kSignal;
  res_.signal = StopSignalGuard::received();
  if (res_.signal == 0) res_.signal = SIGTERM;  // another rank was signalled
  checkpoint(epoch, steps_done);
  return true;
}

// The result's figures: the test split as evaluated, and the epoch's training figures so far. An
// epoch with no steps yet (a checkpoint at step 0) leaves those as they were: none, or the
// figures of the epoch that a checkpoint written at its end carried.
void Loop::set_figures(const Evaluation& ev, const EpochSums& sums) {
  res_.test_accuracy = ev.accuracy;
  res_.test_loss = ev.loss;
  if (sums.seen > 0) {
    res_.final_loss = sums.loss / sums.seen;
    res_.train_accuracy = sums.correct / sums.seen;
  }
}

void Loop::end_epoch(const EpochDone& e, const Evaluation& ev) {
  set_figures(ev, e.sums);
  EpochStats es;
  es.epoch = int(e.epoch) + 1;
  es.loss = *res_.final_loss;
  es.train_accuracy = *res_.train_accuracy;
  es.test_loss = res_.test_loss;
  es.test_accuracy = res_.test_accuracy;
  es.seconds = e.seconds;
  es.images_per_second = e.seconds > 0 ? e.images / e.seconds : 0;
  es.exchange_share = e.seconds > 0 ? std::min(1.0, e.exchange_seconds / e.seconds) : 0;
  res_.epochs.push_back(es);
  char line[256];
  std::snprintf(line, sizeof line,
                "epoch %d/%d  loss %.4f  train_acc %.2f%%  test_acc %.2f%%  %.3fs  %.0f img/s"
                "  %s %.1f%%",
                es.epoch, cfg_.epochs, es.loss, 100 * es.train_accuracy, 100 * es.test_accuracy,
                es.seconds, es.images_per_second, res_.backend.exchange.c_str(),
                100 * es.exchange_share);
  const std::string note = backend_.epoch_note();
  log_ << line << (note.empty() ? "" : "  ") << note << std::endl;
}

// Collective: whether every rank ends with rank 0's parameters, bit for bit, as data parallelism
// promises (each rank steps its own copy with the allreduce exchange and with local SGD).
void Loop::check_agreement() {
  std::uint64_t first = res_.param_checksum;
  pg_.broadcast(&first, sizeof first, 0);
  double differ = first != res_.param_checksum ? 1.0 : 0.0;
  pg_.allreduce_sum(&differ, 1);
  res_.params_agree = differ == 0;
  if (!res_.params_agree)
    log_ << "warning: " << differ << " rank(s) ended with parameters other than rank 0's (param "
         << "checksums differ): the ranks' copies have drifted apart\n";
}

void Loop::checkpoint(std::int64_t epoch, std::int64_t step) {
  if (cfg_.checkpoint_dir.empty() || rank_ != 0) return;
  Checkpoint ck;
  ck.seed = cfg_.seed;
  ck.world_size = world_;
  ck.batch_per_rank = cfg_.batch_per_rank;
  ck.epoch = epoch;
  ck.step = step;
  ck.global_step = global_step_;
  ck.epoch_loss_sum = sums_.loss;
  ck.epoch_correct = sums_.correct;
  ck.epoch_seen = sums_.seen;
  backend_.get_state(&ck.params, &ck.velocity);
  save_checkpoint(cfg_.checkpoint_dir, ck);
}

void Loop::say_stopped() {
  log_ << "received " << common::signal_name(res_.signal)
       << ": stopped at a step boundary (global step " << global_step_ << ")";
  if (!cfg_.checkpoint_dir.empty()) {
    log_ << ", checkpoint written to " << checkpoint_path(cfg_.checkpoint_dir)
         << "; a run with resume on continues from it";
  } else {
    log_ << "; no checkpoint directory was set, so nothing was saved";
  }
  log_ << std::endl;
}

// The line an epoch would have printed, for the steps run when max_steps stopped the run.
void Loop::say_max_steps() {
  char line[256];
  std::snprintf(line, sizeof line, "stopped by max_steps after step %lld of %lld (epoch %lld/%d)",
                (long long)global_step_, (long long)(cfg_.epochs * spe_),
                (long long)(std::max<std::int64_t>(global_step_ - 1, 0) / spe_ + 1), cfg_.epochs);
  log_ << line;
  if (res_.final_loss) {
    std::snprintf(line, sizeof line, "  loss %.4f  train_acc %.2f%%", *res_.final_loss,
                  100 * *res_.train_accuracy);
    log_ << line;
  }
  std::snprintf(line, sizeof line, "  test_acc %.2f%%", 100 * res_.test_accuracy);
  log_ << line << std::endl;
}

}  // namespace

BackendConfig backend_config(const TrainConfig& cfg) {
  BackendConfig b;
  b.batch_per_rank = cfg.batch_per_rank;
  b.eval_batch = cfg.eval_batch;
  b.momentum = cfg.momentum;
  b.weight_decay = cfg.weight_decay;
  return b;
}

// The messages name TrainConfig's fields: a program maps them to its own options.
void validate(const TrainConfig& cfg) {
  const auto at_least_1 = [](const char* field, long long v) {
    if (v < 1) {
      throw std::invalid_argument(std::string("training configuration: ") + field +
                                  " must be >= 1, got " + std::to_string(v));
    }
  };
  at_least_1("epochs", cfg.epochs);
  at_least_1("batch_per_rank (the batch size of each rank)", cfg.batch_per_rank);
  at_least_1("eval_batch (the evaluation batch size)", cfg.eval_batch);
  if (cfg.resume && cfg.checkpoint_dir.empty()) {
    throw std::invalid_argument(
        "training configuration: resume is set but checkpoint_dir is empty: there is nothing to "
        "resume from");
  }
}

float learning_rate(const TrainConfig& cfg, int world, std::int64_t t, std::int64_t spe) {
  const float peak = cfg.lr_scaling == LrScaling::kLinear ? cfg.lr * float(world) : cfg.lr;
  const double warm = cfg.warmup_epochs >= 0 ? cfg.warmup_epochs
                                             : (cfg.lr_scaling == LrScaling::kLinear ? 1.0 : 0.0);
  double warm_steps = warm * double(spe);
  if (cfg.warmup_epochs < 0 && cfg.lr_scaling == LrScaling::kLinear)
    warm_steps = std::max(warm_steps, double(kMinDefaultWarmupSteps));
  // Goyal et al. 2017: ramp linearly from the single-rank rate to the scaled rate.
  if (warm_steps > 0 && double(t) < warm_steps) {
    return cfg.lr + float((peak - cfg.lr) * (double(t) / warm_steps));
  }
  return peak;
}

TrainResult train(ProcessGroup& pg, const Dataset& data, const ModelSpec& model, Backend& backend,
                  const TrainConfig& cfg, std::ostream& log) {
  run_agreed(pg, [&] { validate(cfg); });
  return Loop(pg, data, model, backend, cfg, log).run();
}

}  // namespace gpurun::runtime
