// nccl.cc (gpurun CUDA stand-in): NCCL communicators across processes. The unique id names a
// POSIX shared-memory segment (owner-only) that the ranks map at init: a header with each rank's
// process, host and GPU, a barrier counter per rank, and a slot of data per rank. A collective
// runs on the executor of the stream it was enqueued on (or replayed from a graph): in chunks,
// each rank copies its part into its slot, all meet at a barrier, each rank reduces every slot in
// rank order (so every rank gets the same bits), all meet again. A wait notices a local abort
// (it returns), a peer that aborted or whose process died (ncclRemoteError, as NCCL's sockets
// would report; the wait goes on until the communicator is aborted, as a stuck NCCL kernel does).
// Running a collective on a communicator after ncclCommAbort or ncclCommDestroy is what the
// device would do with freed memory: the stand-in says so and aborts the process.
// Fault injection, read at init (1-based collective count on the communicator; the count
// includes every collective the rank ran on it):
//   GPURUN_STANDIN_NCCL_HANG=RANK:K         rank RANK never arrives at its K-th collective
//   GPURUN_STANDIN_NCCL_ASYNC_ERROR=RANK:K  rank RANK reports ncclSystemError at its K-th
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "core.h"
#include "nccl.h"

namespace gpurun_standin {
namespace {

constexpr char kMagic[] = "gpurun-standin-nccl";
constexpr int kMaxRanks = 256;
constexpr std::size_t kChunk = std::size_t(4) << 20;

struct PeerInfo {
  std::atomic<std::uint32_t> joined;
  std::atomic<std::uint32_t> aborted;
  std::int32_t pid;
  char host[64];
  char bus[32];
  std::atomic<std::uint64_t> arrived;  // the last barrier number this rank reached
};
struct Header {
  std::atomic<std::int32_t> nranks;
  std::atomic<std::uint32_t> joined;
  PeerInfo peers[kMaxRanks];
};

struct Fault {
  int rank = -1;
  std::uint64_t at = 0;
};
Fault read_fault(const char* var) {
  Fault f;
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return f;
  int r = -1;
  unsigned long long k = 0;
  if (std::sscanf(v, "%d:%llu", &r, &k) != 2 || r < 0 || k == 0) {
    say(std::string(var) + "='" + v + "': expected RANK:K with K >= 1; ignored");
    return f;
  }
  return Fault{r, k};
}

std::string host_name() {
  char h[64] = {0};
  ::gethostname(h, sizeof h - 1);
  return h;
}

}  // namespace

struct NcclImpl {
  int rank = 0, nranks = 0;
  int device = 0;
  bool blocking = true;
  std::string shm_name;
  Header* hdr = nullptr;
  unsigned char* data = nullptr;  // nranks slots of kChunk bytes
  std::uint64_t barrier = 0;      // barriers passed (executor thread only)
  std::uint64_t executed = 0;     // collectives run (executor thread only)
  std::atomic<std::uint64_t> enqueued{0}, finished{0};
  std::atomic<int> state{ncclInProgress};  // the async error
  std::atomic<bool> aborted{false}, destroyed{false}, finalizing{false};
  Fault hang, async_error;
  std::mutex mu;
  std::string last_error;

  // The first error sticks (as NCCL's async error does).
  void set_error(ncclResult_t r, const std::string& why) {
    int cur = state.load();
    while (cur == ncclSuccess || cur == ncclInProgress) {
      if (state.compare_exchange_weak(cur, r)) {
        std::lock_guard<std::mutex> lock(mu);
        last_error = why;
        say("NCCL rank " + std::to_string(rank) + ": " + why);
        return;
      }
    }
  }
  unsigned char* slot(int r) const { return data + std::size_t(r) * kChunk; }
};

namespace {

// Waits until every rank reached barrier b. False: this communicator was aborted meanwhile.
bool meet(NcclImpl& c, std::uint64_t b) {
  c.hdr->peers[c.rank].arrived.store(b, std::memory_order_release);
  auto last_check = std::chrono::steady_clock::now();
  for (int spin = 0;; ++spin) {
    bool all = true;
    for (int r = 0; r < c.nranks && all; ++r)
      all = c.hdr->peers[r].arrived.load(std::memory_order_acquire) >= b;
    if (all) return true;
    if (c.aborted.load()) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check > std::chrono::milliseconds(20)) {
      last_check = now;
      for (int r = 0; r < c.nranks; ++r) {
        const PeerInfo& p = c.hdr->peers[r];
        if (r == c.rank) continue;
        if (p.aborted.load())
          c.set_error(ncclRemoteError, "rank " + std::to_string(r) + " aborted its communicator");
        else if (::kill(p.pid, 0) != 0 && errno == ESRCH)
          c.set_error(ncclRemoteError, "rank " + std::to_string(r) + " (pid " +
                                           std::to_string(p.pid) + ") exited");
      }
    }
    if (spin < 200) continue;
    std::this_thread::sleep_for(std::chrono::microseconds(spin < 2000 ? 5 : 50));
  }
}

// Blocks like a stuck NCCL kernel until the communicator is aborted.
void stall_until_abort(NcclImpl& c) {
  while (!c.aborted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

template <typename T>
T combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
    case ncclAvg: return a + b;
    case ncclProd: return a * b;
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
  }
  return a;
}

template <typename T>
void reduce_slots(const NcclImpl& c, std::size_t off_bytes, std::size_t len, ncclRedOp_t op,
                  unsigned char* out) {
  const std::size_t n = len / sizeof(T);
  T* dst = reinterpret_cast<T*>(out + off_bytes);
  for (std::size_t i = 0; i < n; ++i) {
    T acc = reinterpret_cast<const T*>(c.slot(0))[i];
    for (int r = 1; r < c.nranks; ++r) acc = combine(acc, reinterpret_cast<const T*>(c.slot(r))[i], op);
    if (op == ncclAvg) acc = acc / T(c.nranks);
    dst[i] = acc;
  }
}

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32: case ncclInt32: case ncclUint32: return 4;
    case ncclFloat64: case ncclInt64: case ncclUint64: return 8;
    case ncclInt8: case ncclUint8: return 1;
    default: return 0;
  }
}

[[noreturn]] void used_after_free(const NcclImpl& c, const char* what) {
  say(std::string(what) + " ran on the communicator of rank " + std::to_string(c.rank) +
      " after " + (c.destroyed.load() ? "ncclCommDestroy" : "ncclCommAbort") +
      ": on a GPU this kernel would use freed memory; the stand-in stops the process");
  std::abort();
}

// The collective's body, on the executor. False when it could not complete (abort).
void run_collective(NcclImpl& c, const char* what, const void* send, void* recv, std::size_t count,
                    ncclDataType_t type, ncclRedOp_t op, int root) {
  if (c.aborted.load() || c.destroyed.load()) used_after_free(c, what);
  const std::uint64_t k = ++c.executed;
  struct Done {
    NcclImpl& c;
    ~Done() { ++c.finished; }
  } done{c};
  if (c.hang.rank == c.rank && c.hang.at == k) {
    say("NCCL rank " + std::to_string(c.rank) + ": collective #" + std::to_string(k) + " (" +
        what + ") never arrives (GPURUN_STANDIN_NCCL_HANG)");
    return stall_until_abort(c);
  }
  if (c.async_error.rank == c.rank && c.async_error.at == k) {
    c.set_error(ncclSystemError, std::string("injected at collective #") + std::to_string(k) +
                                     " (" + what + ") by GPURUN_STANDIN_NCCL_ASYNC_ERROR");
    return stall_until_abort(c);
  }
  const std::size_t es = type_size(type), bytes = count * es;
  auto* out = static_cast<unsigned char*>(recv);
  const auto* in = static_cast<const unsigned char*>(send);
  for (std::size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += kChunk) {
    const std::size_t len = std::min(kChunk, bytes - off);
    if (root < 0 || root == c.rank) std::memcpy(c.slot(c.rank), in + off, len);
    if (!meet(c, ++c.barrier)) return;
    if (root >= 0) {
      std::memcpy(out + off, c.slot(root), len);
    } else if (type == ncclFloat32) {
      reduce_slots<float>(c, off, len, op, out);
    } else if (type == ncclFloat64) {
      reduce_slots<double>(c, off, len, op, out);
    } else {
      reduce_slots<std::int32_t>(c, off, len, op, out);
    }
    if (!meet(c, ++c.barrier)) return;
    if (bytes == 0) break;
  }
}

ncclResult_t enqueue_collective(const char* what, const void* send, void* recv, std::size_t count,
                                ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->aborted.load() || comm->destroyed.load()) {
    say(std::string(what) + " called on a communicator after ncclCommAbort/ncclCommDestroy");
    return ncclInvalidUsage;
  }
  if (comm->state.load() == ncclInProgress) {
    say(std::string(what) + " before the non-blocking init completed (poll ncclCommGetAsyncError)");
    return ncclInvalidUsage;
  }
  const std::size_t es = type_size(type);
  if (es == 0 || (type != ncclFloat32 && type != ncclFloat64 && type != ncclInt32))
    return ncclInvalidArgument;
  if (int(op) < ncclSum || int(op) > ncclAvg) return ncclInvalidArgument;
  if (root >= comm->nranks) return ncclInvalidArgument;
  Device* d = current_device();
  if (d == nullptr || d->ordinal != comm->device) {
    say(std::string(what) + ": the current device is not the communicator's (device " +
        std::to_string(comm->device) + ")");
    return ncclInvalidUsage;
  }
  std::string why;
  const std::size_t bytes = count * es;
  if ((root < 0 || root == comm->rank) && !device_range(send, bytes, d->ordinal, &why)) {
    say(std::string(what) + ": sendbuff: " + why);
    return ncclInvalidArgument;
  }
  if (!device_range(recv, bytes, d->ordinal, &why)) {
    say(std::string(what) + ": recvbuff: " + why);
    return ncclInvalidArgument;
  }
  StreamImpl* s = resolve(stream, *d);
  if (legacy_use(s, what) != cudaSuccess) return ncclUnhandledCudaError;
  Work w;
  w.what = what;
  NcclImpl* c = comm;
  w.run = [c, what, send, recv, count, type, op, root]() {
    run_collective(*c, what, send, recv, count, type, op, root);
  };
  ++comm->enqueued;
  return submit(s, std::move(w)) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

// Joins the shared segment and waits for every rank; the duplicate-GPU rule of NCCL <= 2.29.
ncclResult_t join(NcclImpl& c) {
  auto* h = c.hdr;
  std::int32_t expect = 0;
  if (!h->nranks.compare_exchange_strong(expect, c.nranks) && expect != c.nranks) {
    c.set_error(ncclInvalidArgument, "ranks disagree on nranks (" + std::to_string(expect) +
                                         " and " + std::to_string(c.nranks) + ")");
    return ncclInvalidArgument;
  }
  PeerInfo& me = h->peers[c.rank];
  if (me.joined.exchange(1) != 0) {
    c.set_error(ncclInvalidArgument, "two processes joined as rank " + std::to_string(c.rank));
    return ncclInvalidArgument;
  }
  me.pid = ::getpid();
  std::snprintf(me.host, sizeof me.host, "%s", host_name().c_str());
  char bus[32] = {0};
  cudaDeviceGetPCIBusId(bus, sizeof bus, c.device);
  std::snprintf(me.bus, sizeof me.bus, "%s", bus);
  h->joined.fetch_add(1);
  while (h->joined.load() < std::uint32_t(c.nranks)) {
    if (c.aborted.load()) return ncclInvalidUsage;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::shm_unlink(c.shm_name.c_str());  // everyone is in: the name is no longer needed
  for (int a = 0; a < c.nranks; ++a)
    for (int b = a + 1; b < c.nranks; ++b)
      if (std::strcmp(h->peers[a].host, h->peers[b].host) == 0 &&
          std::strcmp(h->peers[a].bus, h->peers[b].bus) == 0) {
        c.set_error(ncclInvalidUsage, "Duplicate GPU detected : rank " + std::to_string(a) +
                                          " and rank " + std::to_string(b) +
                                          " both on CUDA device " + h->peers[a].bus);
        return ncclInvalidUsage;
      }
  int ok = ncclInProgress;
  c.state.compare_exchange_strong(ok, ncclSuccess);
  return ncclSuccess;
}

}  // namespace
}  // namespace gpurun_standin

using namespace gpurun_standin;

ncclResult_t ncclGetVersion(int* v) {
  if (v == nullptr) return ncclInvalidArgument;
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id, 0, sizeof *id);
  std::random_device rd;
  const unsigned long long token = (std::uint64_t(rd()) << 32) ^ rd() ^ std::uint64_t(::getpid());
  std::snprintf(id->internal, sizeof id->internal, "%s %016llx", kMagic, token);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  static thread_local std::string copy;
  if (comm == nullptr) return "";
  std::lock_guard<std::mutex> lock(comm->mu);
  copy = comm->last_error;
  return copy.c_str();
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  return ncclCommInitRankConfig(comm, nranks, id, rank, &cfg);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return ncclInvalidArgument;
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (std::strncmp(id.internal, kMagic, sizeof kMagic - 1) != 0) {
    say("ncclCommInitRank: the unique id was not made by ncclGetUniqueId (was it broadcast?)");
    return ncclInvalidArgument;
  }
  if (config != nullptr && config->magic != 0xcafebeef) {
    say("ncclCommInitRankConfig: the config was not set with NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  Device* d = current_device();
  if (d == nullptr) return ncclUnhandledCudaError;
  auto* c = new NcclImpl;  // never freed: an aborted communicator must stay recognisable
  hold_for_process_life(c);
  c->rank = rank, c->nranks = nranks, c->device = d->ordinal;
  c->blocking = config == nullptr || config->blocking != 0;
  c->hang = read_fault("GPURUN_STANDIN_NCCL_HANG");
  c->async_error = read_fault("GPURUN_STANDIN_NCCL_ASYNC_ERROR");
  const char* token = id.internal + sizeof kMagic;
  c->shm_name = "/gpurun-standin-nccl-" + std::to_string(::getuid()) + "-" + token;
  const int fd = ::shm_open(c->shm_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  const std::size_t bytes = sizeof(Header) + std::size_t(nranks) * kChunk;
  if (fd < 0 || ::ftruncate(fd, off_t(bytes)) != 0) {
    say("ncclCommInitRank: shared memory " + c->shm_name + ": " + std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return ncclSystemError;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return ncclSystemError;
  c->hdr = static_cast<Header*>(p);
  c->data = static_cast<unsigned char*>(p) + sizeof(Header);
  *comm = c;
  if (c->blocking) return join(*c);
  std::thread([c] { (void)join(*c); }).detach();
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr || state == nullptr) return ncclInvalidArgument;
  const int s = comm->state.load();
  if (s == ncclSuccess && comm->finalizing.load() &&
      comm->finished.load() < comm->enqueued.load()) {
    *state = ncclInProgress;  // finalize waits for the collectives already enqueued
    return ncclSuccess;
  }
  *state = ncclResult_t(s);
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr || comm->destroyed.load()) return ncclInvalidArgument;
  comm->finalizing.store(true);
  if (!comm->blocking) return ncclInProgress;
  while (comm->finished.load() < comm->enqueued.load() && !comm->aborted.load())
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr || comm->destroyed.load()) return ncclInvalidArgument;
  comm->destroyed.store(true);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->aborted.exchange(true)) return ncclSuccess;
  if (comm->hdr) comm->hdr->peers[comm->rank].aborted.store(1);
  ::shm_unlink(comm->shm_name.c_str());  // in case some rank never joined
  return ncclSuccess;
}

ncclResult_t ncclCommCount(ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue_collective("ncclAllReduce", send, recv, count, type, op, -1, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (root < 0) return ncclInvalidArgument;
  return enqueue_collective("ncclBroadcast", send, recv, count, type, ncclSum, root, comm, stream);
}
