// memory.cc (gpurun CUDA stand-in): the registry of device and pinned allocations. A device
// allocation is exactly the bytes asked for, filled with a NaN pattern (CUDA leaves memory
// uninitialised; code that reads before writing sees NaN), followed by a guard tail that every
// kernel's end checks (under AddressSanitizer the tail is poisoned instead, so the faulting
// access itself is reported).
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GPURUN_STANDIN_ASAN 1
#endif

namespace gpurun_standin {
namespace {

std::mutex& mu() {
  static std::mutex* m = new std::mutex;  // leaked: executors may run while the process exits
  return *m;
}
std::map<std::uintptr_t, Allocation>& table() {
  static auto* t = new std::map<std::uintptr_t, Allocation>;
  return *t;
}

std::string hex(std::uintptr_t p) {
  std::ostringstream o;
  o << "0x" << std::hex << p;
  return o.str();
}

}  // namespace

void hold_for_process_life(const void* handle) {
  static auto* held = new std::vector<const void*>;  // reachable for the process's life
  std::lock_guard<std::mutex> lock(mu());
  held->push_back(handle);
}

Where lookup(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu());
  auto it = table().upper_bound(a);
  if (it == table().begin()) return {};
  --it;
  const Allocation& al = it->second;
  // One past the end belongs to nobody (a zero-byte range there is checked by the caller).
  if (a >= al.base && a < al.base + std::max<std::size_t>(al.bytes, 1)) return {true, al};
  return {};
}

bool device_range(const void* p, std::size_t bytes, int device, std::string* why) {
  const Where w = lookup(p);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (!w.known || w.alloc.kind != MemKind::kDevice) {
    if (why) *why = hex(a) + " is not device memory (host memory, or freed)";
    return false;
  }
  if (w.alloc.device != device) {
    if (why)
      *why = hex(a) + " belongs to device " + std::to_string(w.alloc.device) + ", not device " +
             std::to_string(device);
    return false;
  }
  if (a + bytes > w.alloc.base + w.alloc.bytes) {
    if (why)
      *why = std::to_string(bytes) + " bytes at " + hex(a) + " run past the end of a " +
             std::to_string(w.alloc.bytes) + "-byte allocation (by " +
             std::to_string(a + bytes - w.alloc.base - w.alloc.bytes) + " bytes)";
    return false;
  }
  return true;
}

void* allocate(std::size_t bytes, MemKind kind, int device) {
  const std::size_t guard = kind == MemKind::kDevice ? kGuardBytes : 0;
  void* raw = nullptr;
  // 256-byte aligned, as cudaMalloc guarantees (cuBLAS refuses a less aligned workspace).
  if (::posix_memalign(&raw, 256, bytes + guard + 1) != 0) return nullptr;
  auto* p = static_cast<unsigned char*>(raw);
  std::memset(p, kFillByte, bytes);
  std::memset(p + bytes, kGuardByte, guard);
#ifdef GPURUN_STANDIN_ASAN
  ASAN_POISON_MEMORY_REGION(p + bytes, guard);
#endif
  std::lock_guard<std::mutex> lock(mu());
  table()[reinterpret_cast<std::uintptr_t>(p)] =
      Allocation{reinterpret_cast<std::uintptr_t>(p), bytes, kind, device};
  if (kind == MemKind::kDevice) ++counters().device_allocs;
  return p;
}

bool release(void* p, MemKind kind, std::string* why) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu());
    auto it = table().find(a);
    if (it == table().end() || it->second.kind != kind) {
      const char* want = kind == MemKind::kDevice ? "cudaMalloc" : "cudaMallocHost";
      *why = hex(a) + " is not the start of a live " + std::string(want) + " allocation" +
             (it != table().end() ? " (it is the other kind)" : " (freed twice, or never allocated)");
      return false;
    }
    bytes = it->second.bytes;
    table().erase(it);
  }
  if (kind == MemKind::kDevice) {
#ifdef GPURUN_STANDIN_ASAN
    ASAN_UNPOISON_MEMORY_REGION(static_cast<unsigned char*>(p) + bytes, kGuardBytes);
#endif
    ++counters().device_frees;
  }
  (void)bytes;
  std::free(p);
  return true;
}

bool guards_intact(int device, std::string* broken) {
#ifdef GPURUN_STANDIN_ASAN
  (void)device, (void)broken;
  return true;  // the poisoned tails report the access itself
#else
  std::lock_guard<std::mutex> lock(mu());
  for (const auto& [base, al] : table()) {
    if (al.kind != MemKind::kDevice || al.device != device) continue;
    const auto* tail = reinterpret_cast<const unsigned char*>(base + al.bytes);
    for (std::size_t i = 0; i < kGuardBytes; ++i) {
      if (tail[i] != kGuardByte) {
        *broken = "a write " + std::to_string(i) + " bytes past the end of the " +
                  std::to_string(al.bytes) + "-byte allocation at " + hex(base);
        return false;
      }
    }
  }
  return true;
#endif
}

}  // namespace gpurun_standin
