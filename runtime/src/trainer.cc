// trainer.cc: the training loop, evaluation, checkpoint/resume and the stop protocol.
#include "gpurun/runtime/trainer.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ostream>
#include <stdexcept>
#include <string>

#include "gpurun/common/posix.h"
#include "gpurun/kernels/sgd.h"
#include "gpurun/kernels/threads.h"
#include "gpurun/runtime/checkpoint.h"
#include "gpurun/runtime/model.h"
#include "gpurun/runtime/sampler.h"
#include "gpurun/runtime/stop_signal.h"
#include "worker_pool.h"

namespace gpurun::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::uint64_t fnv1a(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

// Each worker evaluates every W-th chunk of this rank's shard; partial sums are added in worker
// order, then across ranks.
EvalResult evaluate(ProcessGroup& pg, WorkerPool& pool, std::vector<std::unique_ptr<Model>>& models,
                    const Split& test, int eval_batch) {
  const std::vector<std::int32_t> shard = eval_shard(test.count, pg.size(), pg.rank());
  const int W = pool.size();
  std::vector<double> part(2 * std::size_t(W), 0.0);
  pool.run([&](int w) {
    FloatBuffer x(std::size_t(eval_batch) * test.image_floats());
    std::vector<std::int32_t> y(eval_batch);
    std::size_t chunk = 0;
    for (std::size_t off = 0; off < shard.size(); off += eval_batch, ++chunk) {
      if (int(chunk % std::size_t(W)) != w) continue;
      const int n = int(std::min<std::size_t>(eval_batch, shard.size() - off));
      test.gather(shard.data() + off, n, x.data(), y.data());
      const StepResult r = models[w]->evaluate(n, x.data(), y.data());
      part[2 * w] += r.loss_sum;
      part[2 * w + 1] += double(r.correct);
    }
  });
  double sums[3] = {0, 0, double(shard.size())};  // loss, correct, count
  for (int w = 0; w < W; ++w) {
    sums[0] += part[2 * w];
    sums[1] += part[2 * w + 1];
  }
  pg.allreduce_sum(sums, 3);
  return {sums[0] / sums[2], sums[1] / sums[2]};
}

void draw_progress(std::ostream& log, int epoch, std::size_t step, std::size_t steps, double loss) {
  constexpr int kWidth = 30;
  const int filled = int(double(step) / double(steps) * kWidth);
  log << "\repoch " << epoch << " [" << std::string(filled, '#')
      << std::string(kWidth - filled, ' ') << "] " << step << "/" << steps << " loss " << loss
      << std::flush;
}

}  // namespace

const char* exchange_name(Exchange e) {
  switch (e) {
    case Exchange::kAuto:
      return "auto";
    case Exchange::kAllreduce:
      return "allreduce";
    case Exchange::kShared:
      return "shared";
  }
  return "?";
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

TrainResult train(ProcessGroup& pg, const Dataset& data, const TrainConfig& cfg,
                  std::ostream& log) {
  if (cfg.epochs < 1) throw std::invalid_argument("epochs must be >= 1");
  if (cfg.batch_per_rank < 1) throw std::invalid_argument("batch size must be >= 1");
  if (cfg.eval_batch < 1) throw std::invalid_argument("eval batch must be >= 1");
  if (cfg.micro_batch < 0 || (cfg.micro_batch > 0 && cfg.batch_per_rank % cfg.micro_batch != 0)) {
    throw std::invalid_argument("--micro-batch " + std::to_string(cfg.micro_batch) +
                                " must divide --batch-size " + std::to_string(cfg.batch_per_rank));
  }
  if (cfg.resume && cfg.checkpoint_dir.empty()) {
    throw std::invalid_argument("--resume needs --checkpoint DIR");
  }
  const auto t_start = Clock::now();
  const int world = pg.size(), rank = pg.rank();
  const Split& train_set = data.train;
  const Shape in{1, train_set.rows, train_set.cols};
  // --threads T: T replicas each train on batch/T images with single-threaded BLAS (the same
  // partial sums as T ranks, added in a fixed order); when T does not divide the batch, one
  // replica and T BLAS threads instead.
  const int workers = cfg.threads > 1 && cfg.batch_per_rank % cfg.threads == 0 ? cfg.threads : 1;
  const int slice = cfg.batch_per_rank / workers;
  if (cfg.micro_batch > 0 && slice % cfg.micro_batch != 0) {
    throw std::invalid_argument("--micro-batch " + std::to_string(cfg.micro_batch) +
                                " must divide each thread's " + std::to_string(slice) + " images");
  }
  kernels::cpu::set_num_threads(workers > 1 ? 1 : std::max(1, cfg.threads));
  WorkerPool pool(workers);
  std::vector<std::unique_ptr<Model>> models;
  for (int w = 0; w < workers; ++w) {
    models.push_back(make_mnist_cnn(in, data.classes, std::max(slice, cfg.eval_batch)));
  }
  Model* model = models[0].get();
  const std::size_t n = model->param_floats();

  // The exchange. Shared: the parameters (and momentum), every member's X and dZ of each Dense
  // layer, and one slot per rank for the small gradients live in one block all ranks map.
  // Members are (rank, worker) pairs, rank-major: X and dZ of all members lie one after another,
  // so one sgemm over them sums every member's gradient.
  const int members = world * workers;
  // small: the parameters SGD steps separately; exchanged: their gradients and the stat slots,
  // what the shared exchange sums.
  const std::vector<Layer::Range> small = model->undeferred_ranges();
  std::vector<Layer::Range> exchanged = small;
  exchanged.push_back({n, n + kStatSlots});
  std::size_t small_floats = 0;
  for (const Layer::Range& r : exchanged) small_floats += r.end - r.begin;
  std::unique_ptr<SharedMemory> shm;
  if (cfg.exchange == Exchange::kShared && cfg.micro_batch > 0) {
    throw std::invalid_argument(
        "--exchange shared cannot accumulate micro-batches: use "
        "--exchange allreduce with --micro-batch");
  }
  struct Arena {
    std::size_t params = 0, velocity = 0, small = 0, total = 0;
    std::vector<std::size_t> x, dz;  // per deferred layer
  } arena;
  if (cfg.exchange != Exchange::kAllreduce && cfg.micro_batch == 0) {
    auto take = [&](std::size_t floats) {
      const std::size_t at = arena.total;
      arena.total += (floats + kParamAlign - 1) / kParamAlign * kParamAlign;
      return at;
    };
    arena.params = take(n);
    arena.velocity = take(cfg.momentum != 0.0f ? n : 0);
    for (const Model::Deferred& d : model->deferred()) {
      arena.x.push_back(take(std::size_t(members) * slice * std::size_t(d.in)));
      arena.dz.push_back(take(std::size_t(members) * slice * std::size_t(d.rows)));
    }
    arena.small = take(std::size_t(world) * small_floats);
    std::string why_not;
    try {
      shm = pg.allocate_shared(arena.total * sizeof(float), why_not);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(e.what()) + " (allocating " +
                               std::to_string(arena.total * sizeof(float) >> 20) +
                               " MiB for the shared-memory exchange; --exchange allreduce needs "
                               "none)");
    }
    if (!shm && cfg.exchange == Exchange::kShared) {
      throw std::invalid_argument("--exchange shared: " + why_not);
    }
    if (!shm) log << "exchange: allreduce, not shared memory: " << why_not << "\n";
  }
  const bool shared = shm != nullptr;
  float* const arena_base = shared ? static_cast<float*>(shm->data()) : nullptr;
  FloatBuffer private_velocity(!shared && cfg.momentum != 0.0f ? n : 0);
  float* velocity = nullptr;
  if (cfg.momentum != 0.0f)
    velocity = shared ? arena_base + arena.velocity : private_velocity.data();
  // The arena starts uninitialised. Rank 0 writes the parameters (init) and the velocity; each
  // member's X and dZ are written by that member before anyone reads them, so their pages land
  // on the writer's NUMA node.
  if (shared && rank == 0 && velocity) std::fill(velocity, velocity + n, 0.0f);
  // The replicas train model 0's parameters (in the arena when shared).
  if (shared) models[0]->use_param_storage(arena_base + arena.params);
  for (int w = 1; w < workers; ++w) models[w]->share_params(*models[0]);
  if (shared) {
    for (int w = 0; w < workers; ++w) {
      const std::size_t m = std::size_t(rank) * workers + w;
      for (std::size_t k = 0; k < model->deferred().size(); ++k) {
        const Model::Deferred& d = model->deferred()[k];
        models[w]->bind_deferred(k, arena_base + arena.x[k] + m * slice * std::size_t(d.in),
                                 arena_base + arena.dz[k] + m * slice * std::size_t(d.rows));
      }
    }
  }
  // Publishes rank 0's parameters (and momentum) to every rank.
  auto publish_from_rank0 = [&] {
    if (shared) {
      shm->fence();  // one copy: rank 0 wrote it, everybody reads it after the fence
      return;
    }
    pg.broadcast(model->params(), n * sizeof(float), 0);
    if (velocity) pg.broadcast(velocity, n * sizeof(float), 0);
  };

  // Rank 0's initial weights are the job's: broadcast so ranks agree even if their init differed.
  if (!shared || rank == 0) model->init(cfg.seed);
  publish_from_rank0();

  DistributedSampler sampler(train_set.count, world, rank, cfg.batch_per_rank, cfg.seed);
  const std::int64_t spe = std::int64_t(sampler.steps_per_epoch());

  TrainResult res;
  res.param_count = model->param_count();
  res.workers = workers;
  res.exchange = shared ? Exchange::kShared : Exchange::kAllreduce;
  // Plain SGD goes inside the Dense layers' sgemm (w += -lr/N dZ^T X): no dW written, no
  // separate pass over the 11 MB of weights. Momentum and weight decay need dW itself.
  const bool fused = shared && cfg.momentum == 0.0f && cfg.weight_decay == 0.0f;
  res.fused_update = fused;
  res.steps_per_epoch = spe;
  res.lr_peak = learning_rate(cfg, world, std::int64_t(1) << 60, spe);

  // Resume: rank 0 reads the checkpoint and broadcasts it (ranks need not share a filesystem).
  std::int64_t start_epoch = 0, start_step = 0, global_step = 0;
  double ep_loss = 0, ep_correct = 0, ep_seen = 0;
  if (cfg.resume) {
    std::int32_t have = 0;
    Checkpoint ck;
    if (rank == 0 && checkpoint_exists(cfg.checkpoint_dir)) {
      ck = load_checkpoint(checkpoint_path(cfg.checkpoint_dir));
      if (ck.params.size() != n) {
        throw std::runtime_error(checkpoint_path(cfg.checkpoint_dir) + ": holds " +
                                 std::to_string(ck.params.size()) + " parameters, model has " +
                                 std::to_string(n));
      }
      if (ck.seed != cfg.seed || ck.world_size != world ||
          ck.batch_per_rank != cfg.batch_per_rank) {
        log << "warning: checkpoint was written with seed " << ck.seed << ", " << ck.world_size
            << " ranks x " << ck.batch_per_rank << "; this run has seed " << cfg.seed << ", "
            << world << " x " << cfg.batch_per_rank << ": the data order will differ\n";
      }
      have = 1;
    }
    pg.broadcast(&have, sizeof have, 0);
    if (have) {
      std::int64_t pos[3] = {ck.epoch, ck.step, ck.global_step};
      double sums[3] = {ck.epoch_loss_sum, ck.epoch_correct, ck.epoch_seen};
      pg.broadcast(pos, sizeof pos, 0);
      pg.broadcast(sums, sizeof sums, 0);
      if (rank == 0) {
        std::memcpy(model->params(), ck.params.data(), n * sizeof(float));
        if (velocity && ck.velocity.size() == n) {
          std::memcpy(velocity, ck.velocity.data(), n * sizeof(float));
        }
      }
      publish_from_rank0();
      start_epoch = pos[0];
      start_step = pos[1];
      global_step = pos[2];
      ep_loss = sums[0];
      ep_correct = sums[1];
      ep_seen = sums[2];
      res.resumed = true;
      res.resumed_epoch = start_epoch;
      res.resumed_step = start_step;
      log << "resumed from " << checkpoint_path(cfg.checkpoint_dir) << " at epoch "
          << start_epoch + 1 << ", step " << start_step << "\n";
    } else {
      log << "no checkpoint in " << cfg.checkpoint_dir << ": starting from scratch\n";
    }
  }

  auto make_checkpoint = [&](std::int64_t epoch, std::int64_t step) {
    if (cfg.checkpoint_dir.empty() || rank != 0) return;
    Checkpoint ck;
    ck.seed = cfg.seed;
    ck.world_size = world;
    ck.batch_per_rank = cfg.batch_per_rank;
    ck.epoch = epoch;
    ck.step = step;
    ck.global_step = global_step;
    ck.epoch_loss_sum = ep_loss;
    ck.epoch_correct = ep_correct;
    ck.epoch_seen = ep_seen;
    ck.params.assign(model->params(), model->params() + n);
    if (velocity) ck.velocity.assign(velocity, velocity + n);
    save_checkpoint(cfg.checkpoint_dir, ck);
  };

  StopSignalGuard signals;
  const std::size_t img = train_set.image_floats();
  FloatBuffer x(std::size_t(cfg.batch_per_rank) * img);
  std::vector<std::int32_t> y(cfg.batch_per_rank), idx(cfg.batch_per_rank);
  float* grads = model->grads();
  float* stats = model->stats();
  const std::size_t reduce_floats = model->grad_buffer_floats();
  const std::vector<Layer::Range> whole{{0, reduce_floats}};
  log << "training: " << world << " rank(s) x " << cfg.batch_per_rank << " images, " << spe
      << " steps/epoch, lr " << res.lr_peak << ", " << res.param_count << " parameters, "
      << (shared ? "shared-memory exchange" : "allreduce") << std::endl;

  for (std::int64_t epoch = start_epoch; epoch < cfg.epochs && res.stop == StopReason::kFinished;
       ++epoch) {
    sampler.set_epoch(epoch);
    const auto t_epoch = Clock::now();
    const double cpu_epoch = process_cpu_seconds();
    double ep_allreduce = 0;
    std::int64_t ep_images = 0;
    const std::int64_t first = epoch == start_epoch ? start_step : 0;
    if (epoch != start_epoch) ep_loss = ep_correct = ep_seen = 0;
    for (std::int64_t step = first; step < spe; ++step) {
      if (cfg.max_steps >= 0 && global_step >= cfg.max_steps) {
        res.stop = StopReason::kMaxSteps;
        make_checkpoint(epoch, step);
        break;
      }
      const auto t0 = Clock::now();
      sampler.step_indices(std::size_t(step), idx.data());
      const float lr = learning_rate(cfg, world, global_step, spe);
      pool.run([&](int w) {
        float* xw = x.data() + std::size_t(w) * slice * img;
        std::int32_t* yw = y.data() + std::size_t(w) * slice;
        train_set.gather(idx.data() + std::size_t(w) * slice, slice, xw, yw);
        if (shared) {
          models[w]->forward_backward_deferred(slice, xw, yw);
        } else {
          models[w]->forward_backward(slice, xw, yw, cfg.micro_batch);
        }
      });
      // The ranges of the gradient buffer to sum: all of it, or (shared) the small ones.
      const std::vector<Layer::Range>& summed = shared ? exchanged : whole;
      if (workers > 1) {
        // grads_0 += grads_1 + ... in worker order (the order micro-batch accumulation uses),
        // each worker summing its own part of every range, stat slots included.
        pool.run([&](int w) {
          for (const Layer::Range& r : summed) {
            std::size_t lo, hi;
            share(r.end - r.begin, workers, w, lo, hi);
            for (int v = 1; v < workers; ++v) {
              const float* g = models[v]->grads();
              for (std::size_t i = r.begin + lo; i < r.begin + hi; ++i) grads[i] += g[i];
            }
          }
        });
      }
      const int sig = StopSignalGuard::received();
      stats[kStopFlag] = sig != 0 ? 1.0f : 0.0f;
      const auto t1 = Clock::now();
      double t_ar = 0;
      kernels::SgdDesc sd;
      sd.n = n;
      sd.lr = lr;
      sd.momentum = cfg.momentum;
      sd.weight_decay = cfg.weight_decay;
      sd.grad_scale = 1.0f / float(members);
      auto sgd = [&](std::size_t lo, std::size_t hi) {
        kernels::SgdDesc part = sd;
        part.n = hi - lo;
        kernels::cpu::sgd_step(part, model->params() + lo, grads + lo,
                               velocity ? velocity + lo : nullptr);
      };
      if (shared) {
        // The small gradients and the stats go through this rank's slot; after the fence every
        // rank adds all slots in rank order (so all get the same sums).
        float* slots = arena_base + arena.small;
        float* mine = slots + std::size_t(rank) * small_floats;
        for (const Layer::Range& r : exchanged) {
          mine = std::copy(grads + r.begin, grads + r.end, mine);
        }
        shm->fence();  // every rank's X, dZ and small gradients are written; W is no longer read
        for (const Layer::Range& r : exchanged) std::fill(grads + r.begin, grads + r.end, 0.0f);
        for (int q = 0; q < world; ++q) {
          const float* from = slots + std::size_t(q) * small_floats;
          for (const Layer::Range& r : exchanged) {
            for (std::size_t i = r.begin; i < r.end; ++i) grads[i] += *from++;
          }
        }
        t_ar += since(t1);
        // Member m updates its share of every deferred layer's rows from all members' X and dZ;
        // rank 0 also steps the small parameters.
        pool.run([&](int w) {
          const int m = rank * workers + w;
          for (std::size_t k = 0; k < model->deferred().size(); ++k) {
            const Model::Deferred& d = model->deferred()[k];
            std::size_t lo, hi;
            share(std::size_t(d.rows), members, m, lo, hi);
            const float* xa = arena_base + arena.x[k];
            const float* dza = arena_base + arena.dz[k];
            if (fused) {
              model->deferred_weight_rows(k, members * slice, xa, dza, int(lo), int(hi),
                                          -lr * sd.grad_scale, 1.0f, model->params());
            } else {
              model->deferred_weight_rows(k, members * slice, xa, dza, int(lo), int(hi), 1.0f, 0.0f,
                                          grads);
              sgd(d.offset + lo * std::size_t(d.in), d.offset + hi * std::size_t(d.in));
            }
          }
          if (m == 0) {
            for (const Layer::Range& r : small) sgd(r.begin, r.end);
          }
        });
        const auto t3 = Clock::now();
        shm->fence();  // the new parameters are in place before anyone's next forward
        t_ar += since(t3);
      } else {
        pg.allreduce_sum(grads, reduce_floats);  // the step's one collective
        t_ar = since(t1);
        pool.run([&](int w) {
          std::size_t lo, hi;
          share(n, workers, w, lo, hi);
          sgd(lo, hi);
        });
      }
      ++global_step;
      ep_loss += stats[kLossSum];
      ep_correct += stats[kCorrect];
      ep_seen += double(cfg.batch_per_rank) * world;
      ep_images += std::int64_t(cfg.batch_per_rank) * world;
      ep_allreduce += t_ar;
      res.allreduce_seconds += t_ar;
      res.compute_seconds += since(t0) - t_ar;
      if (cfg.progress && rank == 0 && (step % 20 == 0 || step + 1 == spe)) {
        draw_progress(log, int(epoch) + 1, std::size_t(step + 1), std::size_t(spe),
                      ep_loss / std::max(1.0, ep_seen));
      }
      if (stats[kStopFlag] > 0.0f) {
        res.stop = StopReason::kSignal;
        res.signal = sig;
        make_checkpoint(epoch, step + 1);
        break;
      }
    }
    const double ep_seconds = since(t_epoch);
    res.train_cpu_seconds += process_cpu_seconds() - cpu_epoch;
    res.train_seconds += ep_seconds;
    res.images += ep_images;
    if (cfg.progress && rank == 0) log << "\r" << std::string(70, ' ') << "\r";
    if (res.stop == StopReason::kSignal) break;
    const EvalResult ev = evaluate(pg, pool, models, data.test, cfg.eval_batch);
    res.test_accuracy = ev.accuracy;
    res.test_loss = ev.loss;
    res.final_loss = ep_loss / std::max(1.0, ep_seen);
    res.train_accuracy = ep_correct / std::max(1.0, ep_seen);
    if (res.stop == StopReason::kMaxSteps) break;  // a partial epoch: no epoch line
    EpochStats es;
    es.epoch = int(epoch) + 1;
    es.loss = res.final_loss;
    es.train_accuracy = res.train_accuracy;
    es.test_loss = ev.loss;
    es.test_accuracy = ev.accuracy;
    es.seconds = ep_seconds;
    es.images_per_second = ep_seconds > 0 ? double(ep_images) / ep_seconds : 0;
    es.allreduce_share = ep_seconds > 0 ? ep_allreduce / ep_seconds : 0;
    res.epochs.push_back(es);
    char line[256];
    std::snprintf(line, sizeof line,
                  "epoch %d/%d  loss %.4f  train_acc %.2f%%  test_acc %.2f%%  %.2fs  %.0f img/s"
                  "  %s %.1f%%",
                  es.epoch, cfg.epochs, es.loss, 100 * es.train_accuracy, 100 * es.test_accuracy,
                  es.seconds, es.images_per_second, shared ? "exchange" : "allreduce",
                  100 * es.allreduce_share);
    log << line << std::endl;
    make_checkpoint(epoch + 1, 0);
  }
  if (res.stop == StopReason::kSignal) {
    log << "received " << common::signal_name(res.signal)
        << ": stopped at a step boundary (global step " << global_step << ")";
    if (!cfg.checkpoint_dir.empty()) {
      log << ", checkpoint written to " << checkpoint_path(cfg.checkpoint_dir)
          << "; continue with --resume";
    } else {
      log << "; no --checkpoint DIR was given, so nothing was saved";
    }
    log << std::endl;
  }
  res.global_steps = global_step;
  res.param_checksum = fnv1a(model->params(), n * sizeof(float));
  res.seconds_total = since(t_start);
  return res;
}

}  // namespace gpurun::runtime
