// runtime_api.cc (gpurun CUDA stand-in): the cuda* functions of cuda_runtime.h over the model
// of core.h. Copies follow CUDA's "API synchronization behavior": from pageable host memory the
// call returns once the source is staged (the device write may still be pending); to host memory
// it returns when done; device to device and memsets do not wait; pinned memory is fully
// asynchronous. cudaFree synchronises the device first, as CUDA's does.
#include <cstdio>
#include <cstring>
#include <thread>

#include "core.h"

namespace gpurun_standin {

bool capture_record(EventImpl* e, StreamImpl* s, unsigned flags, cudaError_t* err);
bool capture_wait(StreamImpl* s, EventImpl* e, cudaError_t* err);
bool captured_event(const EventImpl* e);

namespace {

constexpr std::size_t kDeviceMemory = std::size_t(80) << 30;  // an H100's 80 GB

// Most calls start here: a device, and no sticky fault on it.
cudaError_t begin(Device*& d) {
  d = current_device();
  if (d == nullptr) return cudaErrorNoDevice;
  return remember(sticky(*d));
}

enum class Side { kDevice, kPinned, kPageable };

Side side_of(const void* p) {
  const Where w = lookup(p);
  if (!w.known) return Side::kPageable;
  return w.alloc.kind == MemKind::kDevice ? Side::kDevice : Side::kPinned;
}

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

// The direction's sides, and each device side within its allocation.
cudaError_t check_copy(const char* call, void* dst, const void* src, std::size_t n,
                       cudaMemcpyKind kind, int dev, Side* ds, Side* ss) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection, std::string(call) + ": kind " +
                                                      std::to_string(int(kind)));
  *ds = side_of(dst);
  *ss = side_of(src);
  const bool dst_dev = *ds == Side::kDevice, src_dev = *ss == Side::kDevice;
  const bool want_dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault && (dst_dev != want_dst_dev || src_dev != want_src_dev)) {
    return fail(cudaErrorInvalidValue,
                std::string(call) + " with " + kind_name(kind) + ": the destination is " +
                    (dst_dev ? "device" : "host") + " memory and the source " +
                    (src_dev ? "device" : "host") + " memory");
  }
  std::string why;
  if (dst_dev && !device_range(dst, n, dev, &why))
    return fail(cudaErrorInvalidValue, std::string(call) + ": destination: " + why);
  if (src_dev && !device_range(src, n, dev, &why))
    return fail(cudaErrorInvalidValue, std::string(call) + ": source: " + why);
  return cudaSuccess;
}

// A query waits up to a millisecond for the work before answering "not ready": a host thread
// polling in a tight loop would otherwise take the CPU (and, sleeping, a system call a poll)
// from the executor whose work it waits for.
cudaError_t query(Device& d, const std::function<bool()>& done) {
  std::unique_lock<std::mutex> lock(d.mu);
  if (d.cv.wait_for(lock, std::chrono::milliseconds(1), done)) return cudaSuccess;
  return remember(cudaErrorNotReady);
}

// One copy; `sync`: the synchronous API (cudaMemcpy, on the legacy stream).
cudaError_t copy(const char* call, void* dst, const void* src, std::size_t n, cudaMemcpyKind kind,
                 cudaStream_t stream, bool sync) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  StreamImpl* s = resolve(stream, *d);
  if (sync)
    if (cudaError_t e = unsafe_call(call)) return e;
  if (cudaError_t e = legacy_use(s, call)) return e;
  Side ds = Side::kPageable, ss = Side::kPageable;
  if (cudaError_t e = check_copy(call, dst, src, n, kind, d->ordinal, &ds, &ss)) return e;
  if (n == 0) return cudaSuccess;
  const bool in_capture = capturing(s);
  if (in_capture && (ds == Side::kPageable || ss == Side::kPageable))
    return fail(cudaErrorStreamCaptureUnsupported,
                std::string(call) + " of pageable host memory inside a stream capture (a graph "
                                    "cannot replay it: use cudaMallocHost memory)");
  Work w;
  w.what = std::string(call) + " of " + std::to_string(n) + " bytes";
  if (ss == Side::kPageable && !in_capture) {
    // Staged now: the caller may reuse its buffer as soon as the call returns.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
    w.run = [dst, staged]() { std::memcpy(dst, staged->data(), staged->size()); };
  } else {
    w.run = [dst, src, n]() { std::memmove(dst, src, n); };
  }
  if (cudaError_t e = submit(s, std::move(w))) return e;
  // To host memory the call returns when the copy is done (asynchronous only into pinned
  // memory); a synchronous copy from pinned memory waits too.
  const bool to_host = ds != Side::kDevice;
  const bool waits = (to_host && (sync || ds == Side::kPageable)) ||
                     (sync && ss == Side::kPinned);
  if (waits && !in_capture) wait_stream(s);
  return remember(sticky(*d));
}

cudaError_t set(const char* call, void* p, int value, std::size_t n, cudaStream_t stream) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  StreamImpl* s = resolve(stream, *d);
  if (cudaError_t e = legacy_use(s, call)) return e;
  std::string why;
  if (!device_range(p, n, d->ordinal, &why))
    return fail(cudaErrorInvalidValue, std::string(call) + ": " + why);
  Work w;
  w.what = std::string(call) + " of " + std::to_string(n) + " bytes";
  w.run = [p, value, n]() { std::memset(p, value, n); };
  return submit(s, std::move(w));
}

}  // namespace
}  // namespace gpurun_standin

using namespace gpurun_standin;

// ---- errors, versions, devices ---------------------------------------------------------------
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define GPURUN_STANDIN_NAME(x) \
  case x:                     \
    return #x;
    GPURUN_STANDIN_NAME(cudaSuccess)
    GPURUN_STANDIN_NAME(cudaErrorInvalidValue)
    GPURUN_STANDIN_NAME(cudaErrorMemoryAllocation)
    GPURUN_STANDIN_NAME(cudaErrorInitializationError)
    GPURUN_STANDIN_NAME(cudaErrorInvalidConfiguration)
    GPURUN_STANDIN_NAME(cudaErrorInvalidHostPointer)
    GPURUN_STANDIN_NAME(cudaErrorInvalidDevicePointer)
    GPURUN_STANDIN_NAME(cudaErrorInvalidMemcpyDirection)
    GPURUN_STANDIN_NAME(cudaErrorInsufficientDriver)
    GPURUN_STANDIN_NAME(cudaErrorNoDevice)
    GPURUN_STANDIN_NAME(cudaErrorInvalidDevice)
    GPURUN_STANDIN_NAME(cudaErrorInvalidResourceHandle)
    GPURUN_STANDIN_NAME(cudaErrorIllegalState)
    GPURUN_STANDIN_NAME(cudaErrorNotReady)
    GPURUN_STANDIN_NAME(cudaErrorIllegalAddress)
    GPURUN_STANDIN_NAME(cudaErrorLaunchOutOfResources)
    GPURUN_STANDIN_NAME(cudaErrorLaunchFailure)
    GPURUN_STANDIN_NAME(cudaErrorNotSupported)
    GPURUN_STANDIN_NAME(cudaErrorStreamCaptureUnsupported)
    GPURUN_STANDIN_NAME(cudaErrorStreamCaptureInvalidated)
    GPURUN_STANDIN_NAME(cudaErrorStreamCaptureMerge)
    GPURUN_STANDIN_NAME(cudaErrorStreamCaptureUnmatched)
    GPURUN_STANDIN_NAME(cudaErrorStreamCaptureUnjoined)
    GPURUN_STANDIN_NAME(cudaErrorStreamCaptureIsolation)
    GPURUN_STANDIN_NAME(cudaErrorStreamCaptureImplicit)
    GPURUN_STANDIN_NAME(cudaErrorCapturedEvent)
    GPURUN_STANDIN_NAME(cudaErrorStreamCaptureWrongThread)
    GPURUN_STANDIN_NAME(cudaErrorUnknown)
#undef GPURUN_STANDIN_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnjoined:
      return "capture sequence contains a fork that was not joined to the primary stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    default: return cudaGetErrorName(e);
  }
}

cudaError_t cudaGetLastError() {
  return take_last_error();
}
cudaError_t cudaPeekAtLastError() {
  return peek_last_error();
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return remember(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  return cudaDriverGetVersion(v);
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return remember(cudaErrorInvalidValue);
  *count = int(config().visible.size());
  return *count == 0 ? remember(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* dev) {
  if (!dev) return remember(cudaErrorInvalidValue);
  if (config().visible.empty()) return remember(cudaErrorNoDevice);
  *dev = current_ordinal();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) {
  if (config().visible.empty()) return remember(cudaErrorNoDevice);
  if (dev < 0 || dev >= int(config().visible.size())) return remember(cudaErrorInvalidDevice);
  set_current_ordinal(dev);
  (void)device(dev);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev) {
  if (!p) return remember(cudaErrorInvalidValue);
  if (dev < 0 || dev >= int(config().visible.size())) return remember(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  const int phys = config().visible[std::size_t(dev)];
  std::snprintf(p->name, sizeof p->name, "NVIDIA H100 80GB HBM3 (gpurun CUDA stand-in)");
  std::snprintf(p->uuid.bytes, sizeof p->uuid.bytes, "standin-%07d", phys);
  p->totalGlobalMem = kDeviceMemory;
  p->sharedMemPerBlock = 48 << 10;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->l2CacheSize = 50 << 20;
  p->pciBusID = 0x18 + 0x10 * phys;
  p->pciDeviceID = 0;
  p->pciDomainID = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int dev) {
  cudaDeviceProp p;
  if (bus == nullptr || len <= 0) return remember(cudaErrorInvalidValue);
  if (cudaError_t e = cudaGetDeviceProperties(&p, dev)) return e;
  std::snprintf(bus, std::size_t(len), "%08X:%02X:%02X.0", p.pciDomainID, p.pciBusID,
                p.pciDeviceID);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (cudaError_t e = unsafe_call("cudaDeviceSynchronize")) return e;
  wait_device(*d);
  return remember(sticky(*d));
}

// ---- memory -----------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t size) {
  Device* d = nullptr;
  if (!ptr) return remember(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (cudaError_t e = unsafe_call("cudaMalloc")) return e;
  if (size > kDeviceMemory)
    return fail(cudaErrorMemoryAllocation,
                "cudaMalloc of " + std::to_string(size) + " bytes (the device has 80 GB)");
  *ptr = allocate(size, MemKind::kDevice, d->ordinal);
  return *ptr ? cudaSuccess : remember(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* ptr) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (ptr == nullptr) return cudaSuccess;
  if (cudaError_t e = unsafe_call("cudaFree")) return e;
  wait_device(*d);  // cudaFree synchronises the device: it waits for every queued kernel
  std::string why;
  if (!release(ptr, MemKind::kDevice, &why)) return fail(cudaErrorInvalidValue, "cudaFree: " + why);
  return remember(sticky(*d));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  Device* d = nullptr;
  if (!ptr) return remember(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (cudaError_t e = unsafe_call("cudaMallocHost")) return e;
  *ptr = allocate(size, MemKind::kPinned, d->ordinal);
  return *ptr ? cudaSuccess : remember(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void* ptr) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (ptr == nullptr) return cudaSuccess;
  if (cudaError_t e = unsafe_call("cudaFreeHost")) return e;
  wait_device(*d);
  std::string why;
  if (!release(ptr, MemKind::kPinned, &why))
    return fail(cudaErrorInvalidValue, "cudaFreeHost: " + why);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return copy("cudaMemcpy", dst, src, n, kind, cudaStreamLegacy, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy("cudaMemcpyAsync", dst, src, n, kind, stream, false);
}
cudaError_t cudaMemset(void* p, int value, size_t n) {
  return set("cudaMemset", p, value, n, cudaStreamLegacy);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
  return set("cudaMemsetAsync", p, value, n, stream);
}

// ---- streams --------------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  Device* d = nullptr;
  if (!s) return remember(cudaErrorInvalidValue);
  if (cudaError_t e = begin(d)) return e;
  if (flags & ~unsigned(cudaStreamNonBlocking)) return remember(cudaErrorInvalidValue);
  auto* st = new StreamImpl;
  hold_for_process_life(st);
  st->device = d;
  st->flags = flags;
  *s = st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
    return remember(cudaErrorInvalidResourceHandle);
  if (capturing(s))
    return fail(cudaErrorIllegalState, "cudaStreamDestroy of a stream that is capturing");
  // Its queued work still runs (CUDA releases it when the work is done): kept, never freed.
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  StreamImpl* s = resolve(stream, *d);
  if (capturing(s)) {
    (void)unsafe_call("cudaStreamSynchronize");
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize of a capturing stream");
  }
  if (cudaError_t e = unsafe_call("cudaStreamSynchronize")) return e;
  wait_stream(s);
  return remember(sticky(*d));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  StreamImpl* s = resolve(stream, *d);
  if (capturing(s)) return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamQuery in capture");
  return query(*d, [s] { return s->completed >= s->enqueued; });
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t ev, unsigned int flags) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (ev == nullptr || flags != 0) return remember(cudaErrorInvalidValue);
  StreamImpl* s = resolve(stream, *d);
  cudaError_t err = cudaSuccess;
  if (capture_wait(s, ev, &err)) return err;
  if (cudaError_t e = legacy_use(s, "cudaStreamWaitEvent")) return e;
  if (ev->last && !ev->last->done.load()) {
    Work w;
    w.what = "cudaStreamWaitEvent";
    enqueue(s, std::move(w), {ev->last});
  }
  return cudaSuccess;
}

// ---- events ---------------------------------------------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  Device* d = nullptr;
  if (!e) return remember(cudaErrorInvalidValue);
  if (cudaError_t err = begin(d)) return err;
  if (flags & ~unsigned(cudaEventBlockingSync | cudaEventDisableTiming))
    return remember(cudaErrorInvalidValue);
  auto* ev = new EventImpl;
  ev->device = d;
  ev->flags = flags;
  *e = ev;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (e == nullptr) return remember(cudaErrorInvalidResourceHandle);
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  return cudaEventRecordWithFlags(e, stream, cudaEventRecordDefault);
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t stream, unsigned int flags) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (ev == nullptr || (flags & ~unsigned(cudaEventRecordExternal)))
    return remember(cudaErrorInvalidValue);
  StreamImpl* s = resolve(stream, *d);
  if (ev->device != s->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: event and stream of two devices");
  cudaError_t err = cudaSuccess;
  if (capture_record(ev, s, flags, &err)) return err;
  if (cudaError_t e = legacy_use(s, "cudaEventRecord")) return e;
  Work w;
  w.what = "cudaEventRecord";
  ev->last = enqueue(s, std::move(w));
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (ev == nullptr) return remember(cudaErrorInvalidResourceHandle);
  if (captured_event(ev))
    return fail(cudaErrorCapturedEvent, "cudaEventQuery of an event recorded in a capture");
  if (ev->last) {
    const std::shared_ptr<Completion> c = ev->last;
    if (cudaError_t e = query(*d, [&c] { return c->done.load(); })) return e;
  }
  return remember(sticky(*d));
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  if (ev == nullptr) return remember(cudaErrorInvalidResourceHandle);
  if (captured_event(ev))
    return fail(cudaErrorCapturedEvent, "cudaEventSynchronize of an event recorded in a capture");
  if (cudaError_t e = unsafe_call("cudaEventSynchronize")) return e;
  if (ev->last) wait_for(*d, ev->last);
  return remember(sticky(*d));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (ms == nullptr || a == nullptr || b == nullptr) return remember(cudaErrorInvalidValue);
  if ((a->flags | b->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventElapsedTime of an event created with cudaEventDisableTiming");
  if (!a->last || !b->last) return remember(cudaErrorInvalidResourceHandle);
  if (!a->last->done.load() || !b->last->done.load()) return remember(cudaErrorNotReady);
  *ms = float(b->last->at_ms - a->last->at_ms);
  return cudaSuccess;
}

// ---- kernels ---------------------------------------------------------------------------------
cudaError_t gpurun_standin::enqueue_kernel(KernelLaunch l, cudaStream_t stream) {
  Device* d = nullptr;
  if (cudaError_t e = begin(d)) return e;
  StreamImpl* s = resolve(stream, *d);
  const std::string bad = launch_config_error(l);
  if (!bad.empty())
    return fail(cudaErrorInvalidConfiguration, std::string("launch of ") + l.name + ": " + bad);
  if (cudaError_t e = legacy_use(s, l.name)) return e;
  ++counters().kernels;
  Work w;
  w.what = std::string("kernel ") + l.name;
  w.pointers = l.pointers;
  auto shared = std::make_shared<const KernelLaunch>(std::move(l));
  w.run = [shared]() { run_grid(*shared); };
  return submit(s, std::move(w));
}
