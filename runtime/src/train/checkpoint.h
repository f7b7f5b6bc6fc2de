// checkpoint.h: what a resumed run needs to continue bit for bit: parameters, optimizer velocity,
// the position (epoch, step within it, global step), the seed (the sampler's shuffle is a pure
// function of (seed, epoch), so seed + position is the whole RNG state) and the partial sums of
// the interrupted epoch. Written atomically: temp file, fsync, rename, fsync of the directory.
// The temp file's name carries its writer (boot id, pid, start time), so a dead writer's leftover
// can be told from a live one's (prepare_checkpoint_dir).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpurun::runtime {

struct Checkpoint {
  std::uint64_t seed = 0;
  std::int32_t world_size = 1;
  std::int32_t batch_per_rank = 0;
  std::int64_t epoch = 0;        // the epoch to continue
  std::int64_t step = 0;         // the next step within that epoch
  std::int64_t global_step = 0;  // steps done since the start (drives the LR warmup)
  double epoch_loss_sum = 0, epoch_correct = 0, epoch_seen = 0;
  std::vector<float> params;
  std::vector<float> velocity;  // empty when training without momentum
};

// DIR/checkpoint.bin
std::string checkpoint_path(const std::string& dir);
// Creates DIR if needed and checks that checkpoints can be written there; removes the temp files
// (DIR/checkpoint.bin.tmp.BOOT.PID.START) of writers that died mid-write (kill -9, a node
// crash), judged by boot id, pid and the process's start time, never by a bare pid: a live
// writer's file stays, and so does one of another machine or boot. Returns how many it removed.
// Throws std::runtime_error naming DIR when it cannot be created, read or written.
int prepare_checkpoint_dir(const std::string& dir);
// Creates DIR if needed. Throws std::runtime_error naming the path on any failure.
void save_checkpoint(const std::string& dir, const Checkpoint& c);
// Throws std::runtime_error naming the file when it is missing, truncated or corrupt.
Checkpoint load_checkpoint(const std::string& path);
bool checkpoint_exists(const std::string& dir);
// A checkpoint written at another world size or batch (gpurun --nnodes restarted on fewer
// nodes): every rank deals from the same (seed, epoch) shuffle, a step taking the next
// world x batch samples of it, so the position in samples is what carries over. Rescales `c`'s
// step and global step to a step of `world` x `batch_per_rank` samples (rounded down: at most one
// step's samples are seen again); a position at or past the epoch's `steps_per_epoch` becomes
// the next epoch's start, with its sums zeroed. False when nothing changed.
bool rescale_position(Checkpoint& c, int world, int batch_per_rank, std::int64_t steps_per_epoch);

}  // namespace gpurun::runtime
