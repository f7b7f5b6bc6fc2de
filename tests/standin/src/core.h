// core.h (gpurun CUDA stand-in, private): the model behind the runtime API.
//  - A Device is an executor thread over one queue of operations. An operation runs when it is
//    the oldest unfinished one of its stream, every event it waits for has happened, and the
//    legacy stream's ordering with blocking streams allows it. So streams are in-order queues
//    that run concurrently with the host, and the host sees results only after it synchronises.
//  - Memory is host memory the registry knows: device allocations at their exact size plus a
//    guard tail (checked after every kernel), filled with a NaN pattern; pinned host memory.
//  - A capture turns what would be enqueued into graph nodes (capture.cc); a graph launch is one
//    operation that runs its nodes in dependency order.
//  - Errors: the API's own (returned, remembered as the last error) and sticky device faults
//    (a kernel that broke a rule, an illegal address): said on stderr, returned by every later
//    call on that device.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_runtime.h"

namespace gpurun_standin {

// ---- configuration, read once from the environment ----------------------------------------
enum class BlockOrder { kForward, kReverse, kShuffle };
struct Config {
  int physical_devices = 1;   // GPURUN_STANDIN_DEVICES
  std::vector<int> visible;   // CUDA_VISIBLE_DEVICES applied: ordinal -> physical index
  BlockOrder order = BlockOrder::kForward;  // GPURUN_STANDIN_BLOCK_ORDER
  std::uint64_t seed = 1;                   // its shuffle:SEED
};
const Config& config();

// ---- messages and errors ---------------------------------------------------------------------
void say(const std::string& msg);  // "gpurun CUDA stand-in: msg" on stderr
cudaError_t fail(cudaError_t e, const std::string& msg);  // say + remember as the last error
cudaError_t remember(cudaError_t e);                       // the last error, if not success
// cudaGetLastError / cudaPeekAtLastError: the last error, else the current device's sticky one.
cudaError_t take_last_error();
cudaError_t peek_last_error();

// ---- memory ----------------------------------------------------------------------------------
// A handle that outlives its destroy call, as in CUDA (work queued with a stream, cuBLAS or cuDNN
// handle may still run; an aborted NCCL communicator must stay recognisable): held here for the
// process's life, so it stays reachable and a leak checker does not report it.
void hold_for_process_life(const void* handle);
enum class MemKind { kDevice, kPinned };
struct Allocation {
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  MemKind kind = MemKind::kDevice;
  int device = 0;
};
constexpr std::size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xA5;
constexpr unsigned char kFillByte = 0xFF;  // as float: NaN; as int32: -1

// Where a pointer lies: in an allocation (a copy of it), or host memory nobody registered.
struct Where {
  bool known = false;
  Allocation alloc;
};
Where lookup(const void* p);
// [p, p + bytes) inside one device allocation of `device`; else why not.
bool device_range(const void* p, std::size_t bytes, int device, std::string* why);
void* allocate(std::size_t bytes, MemKind kind, int device);
bool release(void* p, MemKind kind, std::string* why);
// Guard tails of `device`'s allocations intact; else names the first broken one.
bool guards_intact(int device, std::string* broken);

// ---- streams, events, operations -------------------------------------------------------------
struct Device;
struct Capture;

// Completion of one enqueued operation, shared with the events that recorded it.
struct Completion {
  std::atomic<bool> done{false};
  double at_ms = 0;  // steady clock, when done
};

struct StreamImpl {
  Device* device = nullptr;
  unsigned flags = 0;
  bool legacy = false;
  std::uint64_t enqueued = 0, completed = 0;  // under the device's lock
  // Capture state (under the capture lock, capture.cc).
  Capture* capture = nullptr;
  std::vector<int> tail;  // the nodes the next captured node depends on
  bool blocking() const { return legacy || (flags & cudaStreamNonBlocking) == 0; }
};

struct EventImpl {
  Device* device = nullptr;
  unsigned flags = 0;
  std::shared_ptr<Completion> last;  // the most recent record's, or none
  Capture* captured = nullptr;       // recorded last inside this capture
  std::vector<int> captured_tail;
};

// Work as it runs on the executor (or as a graph node). `pointers` are device pointers checked
// just before it runs (a kernel's arguments; a freed buffer is an illegal address).
struct Work {
  std::string what;
  std::function<void()> run;  // empty: a marker (event record, wait)
  std::vector<const void*> pointers;
  EventImpl* record = nullptr;  // an event record node of a graph
};

struct Op {
  StreamImpl* stream = nullptr;
  Work work;
  std::vector<std::shared_ptr<Completion>> waits;
  std::shared_ptr<Completion> done = std::make_shared<Completion>();
  bool running = false;
};

struct Device {
  int ordinal = 0, physical = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Op>> queue;  // enqueue order; an op leaves when done
  std::uint64_t enqueued = 0, completed = 0;
  cudaError_t sticky = cudaSuccess;
  StreamImpl legacy;
  std::thread executor;
};

Device& device(int ordinal);  // created (with its executor) on first use
int current_ordinal();        // this thread's device
void set_current_ordinal(int ordinal);
Device* current_device();     // nullptr when there is none (error remembered)
cudaError_t sticky(Device& d);
void set_sticky(Device& d, cudaError_t e, const std::string& msg);
StreamImpl* resolve(cudaStream_t s, Device& d);  // 0 and cudaStreamLegacy: d's legacy stream

// Enqueue on the executor (not capturing). Returns the op's completion.
std::shared_ptr<Completion> enqueue(StreamImpl* s, Work work,
                                    std::vector<std::shared_ptr<Completion>> waits = {});
void wait_for(Device& d, const std::shared_ptr<Completion>& c);
void wait_stream(StreamImpl* s);
void wait_device(Device& d);
// Runs one piece of work now, on the executor thread: pointer checks, then the work, then the
// guard check; a fault becomes the device's sticky error.
void run_work(Device& d, const Work& w);

// ---- capture (capture.cc) --------------------------------------------------------------------
// Submits work to s: a node when s is capturing, else an operation. Returns the capture's error.
cudaError_t submit(StreamImpl* s, Work work);
// The capture rules for a potentially unsafe call from this thread: cudaSuccess, or the error
// (the thread's captures are invalidated, as CUDA does).
cudaError_t unsafe_call(const char* what);
// Enqueueing on the legacy stream while a capture forbids it.
cudaError_t legacy_use(StreamImpl* s, const char* what);
bool capturing(const StreamImpl* s);

// ---- kernels (grid.cc) -----------------------------------------------------------------------
// Runs every block and thread of a launch; throws std::runtime_error naming the kernel, the
// block and the rule broken.
void run_grid(const KernelLaunch& launch);
// Launch configuration as the device validates it; "" when valid.
std::string launch_config_error(const KernelLaunch& launch);

// ---- inspection counters (inspect.h) ----------------------------------------------------------
struct Counters {
  std::atomic<long> device_allocs{0}, device_frees{0}, legacy_ops{0}, kernels{0};
};
Counters& counters();

}  // namespace gpurun_standin
