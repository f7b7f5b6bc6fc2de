// grid.cc (gpurun CUDA stand-in): runs a kernel launch on the CPU, a CUDA thread per fiber
// (Boost.Context). Blocks run one at a time in the configured order (forward, reverse, or
// shuffled by a seed: GPURUN_STANDIN_BLOCK_ORDER), so results that depend on the blocks' order
// differ between orders. Inside a block, a worker fiber runs threads one after another until one
// waits at __syncthreads or a warp operation; that thread keeps the fiber, and a new worker takes
// the next threads. A barrier is released when every thread of the block waits at the same
// __syncthreads, a warp operation when every lane its mask names waits at the same call. A thread
// that returns while others wait for it, lanes at different calls, a mask that leaves out the
// calling lane or names a lane that does not exist: each is an error naming the kernel, the
// block, the thread and the source line, as the rules of CUDA's execution model make it.
#include <sys/mman.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define GPURUN_STANDIN_ASAN 1
#endif

namespace ctx = boost::context;

namespace gpurun_standin {

thread_local const uint3* t_thread = nullptr;
thread_local const BlockCoords* t_block_coords = nullptr;

namespace {

#ifdef GPURUN_STANDIN_ASAN
constexpr std::size_t kStackBytes = 512 << 10;
#else
constexpr std::size_t kStackBytes = 32 << 10;  // kernel frames are shallow; 1,024 may be live
#endif
constexpr std::size_t kGuardPage = 4096;

// Fiber stacks, reused across blocks and kernels by their executor thread; a guard page below
// each turns an overflow into a fault instead of silent corruption.
class StackPool {
 public:
  ~StackPool() {
    for (void* p : free_) ::munmap(p, kStackBytes + kGuardPage);
  }
  ctx::stack_context allocate() {
    void* base = nullptr;
    if (!free_.empty()) {
      base = free_.back();
      free_.pop_back();
    } else {
      base = ::mmap(nullptr, kStackBytes + kGuardPage, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) throw std::bad_alloc();
      ::mprotect(base, kGuardPage, PROT_NONE);
    }
    ctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = static_cast<char*>(base) + kGuardPage + kStackBytes;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept {
    free_.push_back(static_cast<char*>(sc.sp) - kStackBytes - kGuardPage);
  }

 private:
  std::vector<void*> free_;
};
thread_local StackPool t_stacks;

// A fiber's stack, as AddressSanitizer's fiber annotations want it (the lowest address, size).
struct StackBounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};
thread_local StackBounds t_new_stack;  // the stack the pool handed out last

struct PoolAllocator {
  ctx::stack_context allocate() {
    ctx::stack_context sc = t_stacks.allocate();
    t_new_stack = {static_cast<char*>(sc.sp) - sc.size, sc.size};
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept { t_stacks.deallocate(sc); }
};

struct Site {
  const char* file = nullptr;
  int line = 0;
  bool operator==(const Site& o) const {
    return line == o.line && (file == o.file || std::strcmp(file, o.file) == 0);
  }
};
std::string where(const Site& s) {
  const char* base = std::strrchr(s.file, '/');
  return std::string(base ? base + 1 : s.file) + ":" + std::to_string(s.line);
}

enum class State { kUnstarted, kRunning, kAtBarrier, kAtWarp, kReleased, kDone };

struct WarpCall {
  bool open = false;
  Site site;
  WarpOp op = WarpOp::kShflIdx;
  unsigned mask = 0;
  unsigned arrived = 0;
  std::uint64_t value[32] = {};
  int arg[32] = {};
  int width = 32;
  std::uint64_t result[32] = {};
};

std::string coords_name(uint3 v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

// The order in which the engine visits n items (blocks, or a block's threads).
std::vector<unsigned> visit_order(unsigned n, std::uint64_t salt) {
  std::vector<unsigned> o(n);
  for (unsigned i = 0; i < n; ++i) o[i] = i;
  const Config& c = config();
  if (c.order == BlockOrder::kReverse) std::reverse(o.begin(), o.end());
  if (c.order == BlockOrder::kShuffle) {
    std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ull + salt);
    std::shuffle(o.begin(), o.end(), rng);
  }
  return o;
}

class Block;
thread_local Block* t_block = nullptr;

class Block {
 public:
  // One per launch, reused for every block (reset), so a block costs no allocation.
  Block(const KernelLaunch& l, const std::vector<unsigned>& order)
      : launch_(l), order_(order), n_(unsigned(order.size())) {
    const dim3 b = l.block;
    tidx_.resize(n_);
    for (unsigned t = 0; t < n_; ++t) tidx_[t] = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
    coords_.block_dim = b;
    coords_.grid_dim = l.grid;
    state_.resize(n_);
    fibers_.resize(n_);
    stacks_.resize(n_);
    warps_.resize((n_ + 31) / 32);
  }

  void reset(uint3 bidx) {
    coords_.block_idx = bidx;
    std::fill(state_.begin(), state_.end(), State::kUnstarted);
    for (WarpCall& w : warps_) w.open = false;
    next_ = 0;
    at_barrier_ = 0;
    released_ = 0;
    done_ = 0;
  }

  void run();
  void barrier(Site site);
  std::uint64_t warp(WarpOp op, Site site, unsigned mask, std::uint64_t v, int arg, int width);

 private:
  friend struct Worker;
  unsigned take_unstarted() { return next_ < n_ ? order_[next_++] : n_; }
  void start_worker();
  void resume(ctx::fiber&& f, StackBounds to);
  void yield(unsigned tid);
  bool release_ready();
  void finish_warp(WarpCall& w, unsigned warp);
  void fault(const std::string& what);
  std::string deadlock() const;
  unsigned lanes_in(unsigned warp) const { return std::min(32u, n_ - warp * 32); }

  const KernelLaunch& launch_;
  const std::vector<unsigned>& order_;
  const unsigned n_;
  unsigned next_ = 0;  // into order_: threads not started yet
  std::vector<uint3> tidx_;  // each thread's threadIdx (the same in every block)
  BlockCoords coords_;
  std::vector<State> state_;
  std::vector<ctx::fiber> fibers_;  // the fiber each waiting thread holds
  std::vector<StackBounds> stacks_;  // and its stack (for ASan's fiber annotations)
  StackBounds running_stack_;       // the running worker's stack
  std::vector<WarpCall> warps_;
  unsigned at_barrier_ = 0;
  unsigned released_ = 0;  // threads in kReleased: the scheduler scans only when there are some
  unsigned done_ = 0;      // threads in kDone
  Site barrier_site_;
  unsigned running_ = 0;        // the thread on the CPU now
  unsigned yielded_ = 0;        // the thread whose fiber came back last
  ctx::fiber* sink_ = nullptr;  // the running worker's way back to the scheduler
  std::string error_;
#ifdef GPURUN_STANDIN_ASAN
  const void* sched_bottom_ = nullptr;
  std::size_t sched_size_ = 0;
#endif
};

// A worker fiber: runs unstarted threads until one waits (it then stays with that thread) or
// none is left.
struct Worker {
  Block* b;
  ctx::fiber operator()(ctx::fiber&& sink) {
    const StackBounds mine = t_new_stack;  // allocated for this fiber just before its first run
#ifdef GPURUN_STANDIN_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b->sched_bottom_, &b->sched_size_);
#endif
    b->running_stack_ = mine;
    b->sink_ = &sink;
    for (unsigned t = b->take_unstarted(); t < b->n_ && b->error_.empty();
         t = b->take_unstarted()) {
      b->running_ = t;
      b->state_[t] = State::kRunning;
      t_thread = &b->tidx_[t];
      try {
        b->launch_.body();
      } catch (const std::exception& e) {
        b->fault(std::string("thread ") + coords_name(b->tidx_[t]) + ": " + e.what());
      }
      b->state_[t] = State::kDone;
      ++b->done_;
    }
#ifdef GPURUN_STANDIN_ASAN
    __sanitizer_start_switch_fiber(nullptr, b->sched_bottom_, b->sched_size_);
#endif
    return std::move(*b->sink_);
  }
};

void Block::fault(const std::string& what) {
  if (error_.empty()) error_ = what;
}

void Block::start_worker() {
  ctx::fiber f(std::allocator_arg, PoolAllocator{}, Worker{this});  // sets t_new_stack
  resume(std::move(f), t_new_stack);
}

void Block::resume(ctx::fiber&& f, StackBounds to) {
  Block* outer = t_block;
  t_block = this;
  t_block_coords = &coords_;
#ifdef GPURUN_STANDIN_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, to.bottom, to.size);
#else
  (void)to;
#endif
  ctx::fiber back = std::move(f).resume();
#ifdef GPURUN_STANDIN_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  t_block = outer;
  if (back) fibers_[yielded_] = std::move(back);
}

// From a fiber: hand the CPU back to the scheduler until the thread is released.
void Block::yield(unsigned tid) {
  yielded_ = tid;
  stacks_[tid] = running_stack_;
  const StackBounds mine = running_stack_;
  ctx::fiber* sink = sink_;
#ifdef GPURUN_STANDIN_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, sched_bottom_, sched_size_);
#endif
  *sink = std::move(*sink).resume();
#ifdef GPURUN_STANDIN_ASAN
  __sanitizer_finish_switch_fiber(fake, &sched_bottom_, &sched_size_);
#endif
  sink_ = sink;
  running_stack_ = mine;
  running_ = tid;
  t_thread = &tidx_[tid];
  state_[tid] = State::kRunning;
}

void Block::barrier(Site site) {
  const unsigned t = running_;
  if (at_barrier_ > 0 && !(site == barrier_site_)) {
    throw std::runtime_error("__syncthreads at " + where(site) + " while other threads wait at " +
                             where(barrier_site_) + " (divergent barriers)");
  }
  barrier_site_ = site;
  ++at_barrier_;
  state_[t] = State::kAtBarrier;
  yield(t);
}

std::uint64_t Block::warp(WarpOp op, Site site, unsigned mask, std::uint64_t v, int arg,
                          int width) {
  const unsigned t = running_, w = t / 32, lane = t % 32;
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    throw std::runtime_error("warp operation at " + where(site) + ": width " +
                             std::to_string(width) + " is not a power of two in 1..32");
  if ((mask >> lane & 1u) == 0)
    throw std::runtime_error("warp operation at " + where(site) + ": the mask 0x" +
                             [&] { std::ostringstream o; o << std::hex << mask; return o.str(); }() +
                             " leaves out the calling lane " + std::to_string(lane));
  const unsigned lanes = lanes_in(w);
  if (lanes < 32 && (mask >> lanes) != 0)
    throw std::runtime_error("warp operation at " + where(site) + ": the mask names lanes beyond " +
                             "the " + std::to_string(lanes) + " threads of warp " +
                             std::to_string(w) + " (blockDim is not a multiple of 32)");
  WarpCall& c = warps_[w];
  if (c.open && (!(c.site == site) || c.mask != mask || c.op != op))
    throw std::runtime_error("warp operation at " + where(site) + " while lanes of warp " +
                             std::to_string(w) + " wait at " + where(c.site) +
                             " with another mask or operation");
  if (!c.open) {
    c.open = true;
    c.site = site, c.op = op, c.mask = mask, c.width = width, c.arrived = 0;
  }
  c.arrived |= 1u << lane;
  c.value[lane] = v;
  c.arg[lane] = arg;
  state_[t] = State::kAtWarp;
  yield(t);
  return warps_[w].result[lane];
}

void Block::finish_warp(WarpCall& c, unsigned w) {
  const int width = c.width;
  unsigned ballot = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((c.mask >> l & 1u) && c.value[l] != 0) ballot |= 1u << l;
  for (unsigned l = 0; l < 32; ++l) {
    if ((c.mask >> l & 1u) == 0) continue;
    const int lane = int(l), seg = lane / width * width;
    int src = lane;
    switch (c.op) {
      case WarpOp::kShflIdx: src = seg + ((c.arg[l] % width) + width) % width; break;
      case WarpOp::kShflUp: src = lane - seg >= c.arg[l] ? lane - c.arg[l] : lane; break;
      case WarpOp::kShflDown: src = lane - seg + c.arg[l] < width ? lane + c.arg[l] : lane; break;
      case WarpOp::kShflXor: {
        const int x = lane ^ c.arg[l];
        src = x >= seg && x < seg + width ? x : lane;
        break;
      }
      default: break;
    }
    switch (c.op) {
      case WarpOp::kBallot: c.result[l] = ballot; break;
      case WarpOp::kAll: c.result[l] = ballot == c.mask ? 1 : 0; break;
      case WarpOp::kAny: c.result[l] = ballot != 0 ? 1 : 0; break;
      default:
        // A source lane outside the mask has no defined value: the NaN pattern makes it show.
        c.result[l] = (c.mask >> src & 1u) ? c.value[src] : ~std::uint64_t(0);
    }
    state_[w * 32 + l] = State::kReleased;
    ++released_;
  }
  c.open = false;
}

// Releases a barrier or warp operation whose threads have all arrived.
bool Block::release_ready() {
  bool any = false;
  if (at_barrier_ == n_) {
    for (unsigned t = 0; t < n_; ++t) state_[t] = State::kReleased;
    released_ += n_;
    at_barrier_ = 0;
    any = true;
  }
  for (unsigned w = 0; w < warps_.size(); ++w) {
    WarpCall& c = warps_[w];
    if (c.open && c.arrived == c.mask) {
      finish_warp(c, w);
      any = true;
    }
  }
  return any;
}

std::string Block::deadlock() const {
  for (unsigned t = 0; t < n_; ++t) {
    if (state_[t] != State::kAtWarp) continue;
    const WarpCall& c = warps_[t / 32];
    for (unsigned l = 0; l < 32; ++l) {
      const unsigned other = t / 32 * 32 + l;
      if ((c.mask >> l & 1u) && !(c.arrived >> l & 1u)) {
        return "lanes of warp " + std::to_string(t / 32) + " wait at " + where(c.site) +
               " for lane " + std::to_string(l) + " (thread " +
               coords_name(tidx_[other]) + "), which " +
               (state_[other] == State::kDone ? "returned" : "waits elsewhere") +
               " without reaching it";
      }
    }
  }
  for (unsigned t = 0; t < n_; ++t) {
    if (state_[t] == State::kAtBarrier) continue;
    return std::to_string(at_barrier_) + " threads wait at __syncthreads at " +
           where(barrier_site_) + ", but thread " + coords_name(tidx_[t]) + " " +
           (state_[t] == State::kDone ? "returned" : "waits at a warp operation") +
           " without reaching it";
  }
  return "no thread can run";
}

void Block::run() {
  for (;;) {
    if (!error_.empty()) break;
    bool ran = false;
    for (std::size_t i = 0; released_ > 0 && i < order_.size(); ++i) {
      const unsigned t = order_[i];
      if (state_[t] != State::kReleased) continue;
      --released_;
      state_[t] = State::kRunning;
      resume(std::move(fibers_[t]), stacks_[t]);
      ran = true;
      if (!error_.empty()) break;
    }
    if (!error_.empty()) break;
    if (next_ < n_) {
      start_worker();
      continue;
    }
    if (release_ready()) continue;
    if (ran) continue;
    if (done_ == n_) break;
    error_ = deadlock();
  }
  if (!error_.empty()) {
    const uint3 b = coords_.block_idx;
    throw std::runtime_error(std::string("kernel ") + launch_.name + " block " + coords_name(b) +
                             ": " + error_);
  }
}

}  // namespace

void syncthreads(const char* file, int line) {
  if (t_block == nullptr) throw std::logic_error("__syncthreads outside a kernel");
  t_block->barrier(Site{file, line});
}

void syncwarp(const char* file, int line, unsigned mask) {
  if (t_block == nullptr) throw std::logic_error("__syncwarp outside a kernel");
  (void)t_block->warp(WarpOp::kBallot, Site{file, line}, mask, 0, 0, 32);
}

std::uint64_t warp_op(WarpOp op, const char* file, int line, unsigned mask, std::uint64_t value,
                      int arg, int width) {
  if (t_block == nullptr) throw std::logic_error("warp operation outside a kernel");
  return t_block->warp(op, Site{file, line}, mask, value, arg, width);
}

std::string launch_config_error(const KernelLaunch& l) {
  const dim3 b = l.block, g = l.grid;
  std::ostringstream o;
  if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0) {
    o << "a zero grid or block dimension";
  } else if (b.x > 1024 || b.y > 1024 || b.z > 64) {
    o << "block (" << b.x << "," << b.y << "," << b.z << ") exceeds 1024 x 1024 x 64";
  } else if (std::uint64_t(b.x) * b.y * b.z > 1024) {
    o << std::uint64_t(b.x) * b.y * b.z << " threads per block (at most 1024)";
  } else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
    o << "grid (" << g.x << "," << g.y << "," << g.z << ") exceeds 2^31-1 x 65535 x 65535";
  } else if (l.shared_bytes > (48u << 10)) {
    o << l.shared_bytes << " bytes of dynamic shared memory (48 KiB without an opt-in)";
  }
  return o.str();
}

void run_grid(const KernelLaunch& l) {
  const std::uint64_t blocks = std::uint64_t(l.grid.x) * l.grid.y * l.grid.z;
  const unsigned threads = l.block.x * l.block.y * l.block.z;
  std::uint64_t salt = 0;
  for (const char* c = l.name; *c; ++c) salt = salt * 131 + std::uint64_t(*c);
  const std::vector<unsigned> thread_order = visit_order(threads, salt + 1);
  // Blocks beyond 2^32 are never asked for by gpurun; visit_order takes unsigned.
  const std::vector<unsigned> block_order = visit_order(unsigned(blocks), salt);
  Block b(l, thread_order);
  for (unsigned lin : block_order) {
    b.reset(uint3{lin % l.grid.x, (lin / l.grid.x) % l.grid.y, lin / (l.grid.x * l.grid.y)});
    b.run();
  }
}

}  // namespace gpurun_standin
