// executor.cc (gpurun CUDA stand-in): the configuration, the devices and their executor threads,
// the error channel, and the ordering rules of streams and events (core.h).
#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "core.h"
#include "gpurun_standin/inspect.h"

namespace gpurun_standin {
namespace {

// CUDA_VISIBLE_DEVICES as the driver reads it: indices or GPU- UUID prefixes, comma-separated;
// the list ends at the first entry that names no device.
std::vector<int> visible_devices(const char* env, int physical) {
  std::vector<int> out;
  if (env == nullptr) {
    for (int i = 0; i < physical; ++i) out.push_back(i);
    return out;
  }
  std::string s(env);
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    int found = -1;
    if (!item.empty() && item.find_first_not_of("0123456789") == std::string::npos) {
      const long v = std::strtol(item.c_str(), nullptr, 10);
      if (v < physical) found = int(v);
    } else if (item.rfind("GPU-", 0) == 0 && item.size() > 4) {
      for (int i = 0; i < physical; ++i) {
        char uuid[64];
        std::snprintf(uuid, sizeof uuid, "GPU-57a4d100-0000-4000-8000-%012d", i);
        if (std::strncmp(uuid, item.c_str(), item.size()) == 0) found = i;
      }
    }
    if (found < 0) break;
    for (int v : out)
      if (v == found) found = -1;  // a repeat ends the list too
    if (found < 0) break;
    out.push_back(found);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

Config read_config() {
  Config c;
  if (const char* n = std::getenv("GPURUN_STANDIN_DEVICES")) {
    char* end = nullptr;
    const long v = std::strtol(n, &end, 10);
    if (end == n || *end != '\0' || v < 0 || v > 64) {
      say(std::string("GPURUN_STANDIN_DEVICES='") + n + "': expected 0..64; using 1");
    } else {
      c.physical_devices = int(v);
    }
  }
  c.visible = visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"), c.physical_devices);
  if (const char* o = std::getenv("GPURUN_STANDIN_BLOCK_ORDER")) {
    const std::string s(o);
    if (s == "forward") {
      c.order = BlockOrder::kForward;
    } else if (s == "reverse") {
      c.order = BlockOrder::kReverse;
    } else if (s.rfind("shuffle", 0) == 0) {
      c.order = BlockOrder::kShuffle;
      if (s.size() > 8 && s[7] == ':') c.seed = std::strtoull(s.c_str() + 8, nullptr, 10);
    } else {
      say("GPURUN_STANDIN_BLOCK_ORDER='" + s +
          "': expected forward, reverse or shuffle[:SEED]; using forward");
    }
  }
  return c;
}

thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;

bool ready(const Device& d, const Op& op, std::size_t index) {
  if (op.running) return false;
  for (const auto& c : op.waits)
    if (!c->done.load()) return false;
  for (std::size_t i = 0; i < index; ++i) {
    const StreamImpl* other = d.queue[i]->stream;
    if (other == op.stream) return false;  // in order within a stream
    // The legacy stream waits for, and is waited for by, every blocking stream.
    if (op.stream->legacy && other->blocking()) return false;
    if (other->legacy && op.stream->blocking()) return false;
  }
  return true;
}

void finish(Device& d, Op& op) {
  const double now =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  op.done->at_ms = now;
  op.done->done.store(true);
  ++op.stream->completed;
  ++d.completed;
}

void executor_loop(Device* d) {
  std::unique_lock<std::mutex> lock(d->mu);
  for (;;) {
    std::size_t i = 0;
    for (; i < d->queue.size(); ++i)
      if (ready(*d, *d->queue[i], i)) break;
    if (i == d->queue.size()) {
      d->cv.wait(lock);
      continue;
    }
    Op& op = *d->queue[i];
    op.running = true;
    const bool skip = d->sticky != cudaSuccess;  // a faulted device runs nothing more
    lock.unlock();
    if (!skip) run_work(*d, op.work);
    lock.lock();
    finish(*d, op);
    for (auto it = d->queue.begin(); it != d->queue.end(); ++it) {
      if (it->get() == &op) {
        d->queue.erase(it);
        break;
      }
    }
    d->cv.notify_all();
  }
}

}  // namespace

const Config& config() {
  static const Config* c = new Config(read_config());
  return *c;
}

void say(const std::string& msg) {
  const std::string line = "gpurun CUDA stand-in: " + msg + "\n";
  (void)!::write(2, line.data(), line.size());
}

cudaError_t remember(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

cudaError_t peek_last_error() {
  if (t_last != cudaSuccess) return t_last;
  if (config().visible.empty()) return cudaSuccess;
  return sticky(device(t_device));
}

cudaError_t take_last_error() {
  const cudaError_t e = peek_last_error();
  t_last = cudaSuccess;
  return e;
}

cudaError_t fail(cudaError_t e, const std::string& msg) {
  say(msg + " (" + cudaGetErrorName(e) + ")");
  return remember(e);
}

Counters& counters() {
  static auto* c = new Counters;
  return *c;
}

Counts counts() {
  const Counters& c = counters();
  return Counts{c.device_allocs.load(), c.device_frees.load(), c.legacy_ops.load(),
                c.kernels.load()};
}

Device& device(int ordinal) {
  // The stand-in's products run on its executor threads, beside the ranks' own threads: OpenBLAS
  // threads that spin between calls would only take the CPU from them.
  static std::once_flag blas_once;
  std::call_once(blas_once, [] { openblas_set_num_threads(1); });
  static std::mutex mu;
  static std::map<int, Device*>* devices = new std::map<int, Device*>;
  std::lock_guard<std::mutex> lock(mu);
  Device*& d = (*devices)[ordinal];
  if (d == nullptr) {
    d = new Device;  // leaked on purpose: the executor may still run while the process exits
    d->ordinal = ordinal;
    d->physical = config().visible[std::size_t(ordinal)];
    d->legacy.device = d;
    d->legacy.legacy = true;
    d->executor = std::thread(executor_loop, d);
    d->executor.detach();
  }
  return *d;
}

int current_ordinal() {
  return t_device;
}
void set_current_ordinal(int ordinal) {
  t_device = ordinal;
}

Device* current_device() {
  if (config().visible.empty()) {
    remember(cudaErrorNoDevice);
    return nullptr;
  }
  return &device(t_device);
}

cudaError_t sticky(Device& d) {
  std::lock_guard<std::mutex> lock(d.mu);
  return d.sticky;
}

void set_sticky(Device& d, cudaError_t e, const std::string& msg) {
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.sticky != cudaSuccess) return;
    d.sticky = e;
  }
  say("device " + std::to_string(d.ordinal) + " faulted: " + msg + " (" + cudaGetErrorName(e) +
      "; every later call on this device returns it)");
}

StreamImpl* resolve(cudaStream_t s, Device& d) {
  if (s == nullptr || s == cudaStreamLegacy) return &d.legacy;
  return s;
}

std::shared_ptr<Completion> enqueue(StreamImpl* s, Work work,
                                    std::vector<std::shared_ptr<Completion>> waits) {
  Device& d = *s->device;
  auto op = std::make_unique<Op>();
  op->stream = s;
  op->work = std::move(work);
  op->waits = std::move(waits);
  std::shared_ptr<Completion> done = op->done;
  if (s->legacy) ++counters().legacy_ops;
  std::lock_guard<std::mutex> lock(d.mu);
  ++s->enqueued;
  ++d.enqueued;
  d.queue.push_back(std::move(op));
  d.cv.notify_all();
  return done;
}

void wait_for(Device& d, const std::shared_ptr<Completion>& c) {
  std::unique_lock<std::mutex> lock(d.mu);
  d.cv.wait(lock, [&] { return c->done.load(); });
}

void wait_stream(StreamImpl* s) {
  Device& d = *s->device;
  std::unique_lock<std::mutex> lock(d.mu);
  const std::uint64_t target = s->enqueued;
  d.cv.wait(lock, [&] { return s->completed >= target; });
}

void wait_device(Device& d) {
  std::unique_lock<std::mutex> lock(d.mu);
  const std::uint64_t target = d.enqueued;
  d.cv.wait(lock, [&] { return d.completed >= target; });
}

void run_work(Device& d, const Work& w) {
  for (std::size_t i = 0; i < w.pointers.size(); ++i) {
    const void* p = w.pointers[i];
    std::string why;
    if (p != nullptr && !device_range(p, 0, d.ordinal, &why)) {
      set_sticky(d, cudaErrorIllegalAddress,
                 w.what + ": pointer argument " + std::to_string(i + 1) + ": " + why);
      return;
    }
  }
  try {
    if (w.run) w.run();
  } catch (const std::exception& e) {
    set_sticky(d, cudaErrorLaunchFailure, e.what());
    return;
  }
  std::string broken;
  if (!guards_intact(d.ordinal, &broken)) {
    set_sticky(d, cudaErrorIllegalAddress, w.what + ": " + broken);
  }
}

}  // namespace gpurun_standin
