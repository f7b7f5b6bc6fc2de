// capture.cc (gpurun CUDA stand-in): stream capture, graphs and their replay, with CUDA's rules
// and error codes:
//  - a potentially unsafe call (allocation, synchronous copy or memset, any synchronisation) from
//    a thread that a capture forbids it to (the thread's interaction mode, the captures' modes:
//    cudaThreadExchangeStreamCaptureMode's table) fails with cudaErrorStreamCaptureUnsupported
//    and invalidates the capture; using the legacy stream then fails with
//    cudaErrorStreamCaptureImplicit;
//  - an event recorded in a capture and waited for by another stream pulls that stream into the
//    capture (a fork); every such stream must be joined back into the origin stream before
//    cudaStreamEndCapture (else cudaErrorStreamCaptureUnjoined), which must come from the thread
//    that began it (else cudaErrorStreamCaptureWrongThread) on the origin stream (else
//    cudaErrorStreamCaptureUnmatched);
//  - waiting inside a capture for an event recorded outside it: cudaErrorStreamCaptureIsolation;
//    querying or synchronising an event recorded inside one: cudaErrorCapturedEvent.
// A graph launch is one operation of its stream that runs the nodes in dependency order.
#include <algorithm>
#include <set>

#include "core.h"

namespace gpurun_standin {

struct Node {
  Work work;
  std::vector<int> deps;
};

struct Capture {
  StreamImpl* origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  std::vector<Node> nodes;
  std::vector<StreamImpl*> streams;  // every stream in the capture, origin first
  cudaError_t invalid = cudaSuccess;
};

}  // namespace gpurun_standin

struct gpurun_standin::GraphImpl {
  Device* device = nullptr;
  std::vector<Node> nodes;
};
struct gpurun_standin::GraphExecImpl {
  Device* device = nullptr;
  // Shared with pending launches: CUDA lets a graph be destroyed while its launches are queued.
  std::shared_ptr<const std::vector<Node>> nodes;
};

namespace gpurun_standin {
namespace {

std::mutex& mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<Capture*>& all_captures() {  // under mu()
  static auto* v = new std::vector<Capture*>;
  return *v;
}
thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

// Captures that forbid this thread's unsafe calls (under mu()).
std::vector<Capture*> forbidding() {
  std::vector<Capture*> out;
  if (t_mode == cudaStreamCaptureModeRelaxed) return out;
  const auto me = std::this_thread::get_id();
  for (Capture* c : all_captures()) {
    if (c->mode == cudaStreamCaptureModeRelaxed) continue;
    if (c->thread == me || (t_mode == cudaStreamCaptureModeGlobal &&
                            c->mode == cudaStreamCaptureModeGlobal))
      out.push_back(c);
  }
  return out;
}

cudaError_t forbid(cudaError_t e, const char* what, const char* rule) {
  std::vector<Capture*> cs;
  {
    std::lock_guard<std::mutex> lock(mu());
    cs = forbidding();
    if (cs.empty()) return cudaSuccess;
    for (Capture* c : cs)
      if (c->invalid == cudaSuccess) c->invalid = e;
  }
  return fail(e, std::string(what) + " " + rule +
                     " while a stream capture is under way; the capture is now invalidated");
}

void end(Capture* c) {  // under mu()
  for (StreamImpl* s : c->streams) {
    s->capture = nullptr;
    s->tail.clear();
  }
  auto& v = all_captures();
  v.erase(std::remove(v.begin(), v.end(), c), v.end());
}

std::vector<int> merged(std::vector<int> a, const std::vector<int>& b) {
  for (int x : b)
    if (std::find(a.begin(), a.end(), x) == a.end()) a.push_back(x);
  return a;
}

}  // namespace

bool capturing(const StreamImpl* s) {
  std::lock_guard<std::mutex> lock(mu());
  return s->capture != nullptr;
}

cudaError_t unsafe_call(const char* what) {
  return forbid(cudaErrorStreamCaptureUnsupported, what, "is not permitted");
}

cudaError_t legacy_use(StreamImpl* s, const char* what) {
  if (!s->legacy) return cudaSuccess;
  return forbid(cudaErrorStreamCaptureImplicit, what, "uses the legacy default stream");
}

cudaError_t submit(StreamImpl* s, Work work) {
  {
    std::lock_guard<std::mutex> lock(mu());
    if (Capture* c = s->capture) {
      if (c->invalid != cudaSuccess) return remember(cudaErrorStreamCaptureInvalidated);
      c->nodes.push_back(Node{std::move(work), s->tail});
      s->tail = {int(c->nodes.size()) - 1};
      return cudaSuccess;
    }
  }
  enqueue(s, std::move(work));
  return cudaSuccess;
}

// ---- events inside captures (runtime_api.cc calls these first) -------------------------------

// A record on a capturing stream: remembers the position; External adds a record node. External
// outside a capture is refused, as CUDA documents ("invalid when used outside of capture") and an
// H200 answered (cudaErrorIllegalState).
bool capture_record(EventImpl* e, StreamImpl* s, unsigned flags, cudaError_t* err) {
  std::lock_guard<std::mutex> lock(mu());
  if (s->capture == nullptr && (flags & cudaEventRecordExternal)) {
    *err = fail(cudaErrorIllegalState,
                "cudaEventRecordWithFlags: cudaEventRecordExternal on a stream that is not "
                "capturing");
    return true;
  }
  if (s->capture == nullptr) {
    e->captured = nullptr;
    return false;
  }
  Capture* c = s->capture;
  *err = c->invalid != cudaSuccess ? remember(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
  if (flags & cudaEventRecordExternal) {
    Work w;
    w.what = "event record node";
    w.record = e;
    c->nodes.push_back(Node{std::move(w), s->tail});
    s->tail = {int(c->nodes.size()) - 1};
  }
  e->captured = c;
  e->captured_tail = s->tail;
  return true;
}

// A wait that involves a capture: joins s to it (a fork), or merges tails. False: no capture.
bool capture_wait(StreamImpl* s, EventImpl* e, cudaError_t* err) {
  std::lock_guard<std::mutex> lock(mu());
  Capture* ec = e->captured;
  Capture* sc = s->capture;
  if (ec == nullptr && sc == nullptr) return false;
  *err = cudaSuccess;
  if (ec == nullptr) {
    *err = fail(cudaErrorStreamCaptureIsolation,
                "cudaStreamWaitEvent: a capturing stream waits for an event recorded outside "
                "the capture");
    if (sc->invalid == cudaSuccess) sc->invalid = cudaErrorStreamCaptureIsolation;
  } else if (sc == nullptr) {
    s->capture = ec;
    s->tail = e->captured_tail;
    ec->streams.push_back(s);
  } else if (sc == ec) {
    s->tail = merged(s->tail, e->captured_tail);
  } else {
    *err = fail(cudaErrorStreamCaptureMerge,
                "cudaStreamWaitEvent: would merge two independent captures");
  }
  return true;
}

bool captured_event(const EventImpl* e) {
  std::lock_guard<std::mutex> lock(mu());
  return e->captured != nullptr;
}

}  // namespace gpurun_standin

using namespace gpurun_standin;

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr || *mode < cudaStreamCaptureModeGlobal || *mode > cudaStreamCaptureModeRelaxed)
    return remember(cudaErrorInvalidValue);
  std::swap(t_mode, *mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  Device* d = current_device();
  if (!d) return cudaErrorNoDevice;
  StreamImpl* s = resolve(stream, *d);
  if (s->legacy)
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture on the legacy stream");
  std::lock_guard<std::mutex> lock(mu());
  if (s->capture) return remember(cudaErrorIllegalState);
  auto* c = new Capture;
  c->origin = s;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->streams.push_back(s);
  s->capture = c;
  s->tail.clear();
  all_captures().push_back(c);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  Device* d = current_device();
  if (!d) return cudaErrorNoDevice;
  StreamImpl* s = resolve(stream, *d);
  std::lock_guard<std::mutex> lock(mu());
  *status = s->capture == nullptr          ? cudaStreamCaptureStatusNone
            : s->capture->invalid != cudaSuccess ? cudaStreamCaptureStatusInvalidated
                                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  Device* d = current_device();
  if (!d) return cudaErrorNoDevice;
  if (graph == nullptr) return remember(cudaErrorInvalidValue);
  *graph = nullptr;
  StreamImpl* s = resolve(stream, *d);
  std::unique_ptr<Capture> c;
  std::vector<int> origin_tail;
  {
    std::lock_guard<std::mutex> lock(mu());
    if (s->capture == nullptr) return remember(cudaErrorIllegalState);
    if (s->capture->origin != s)
      return fail(cudaErrorStreamCaptureUnmatched,
                  "cudaStreamEndCapture on a stream that joined the capture, not its origin");
    if (s->capture->mode != cudaStreamCaptureModeRelaxed &&
        s->capture->thread != std::this_thread::get_id())
      return fail(cudaErrorStreamCaptureWrongThread,
                  "cudaStreamEndCapture from another thread than cudaStreamBeginCapture's");
    c.reset(s->capture);
    origin_tail = s->tail;
    end(c.get());
  }
  if (c->invalid != cudaSuccess) return remember(cudaErrorStreamCaptureInvalidated);
  // Every node must lead to the origin's last work: a leaf elsewhere is an unjoined fork.
  std::vector<bool> has_dependent(c->nodes.size(), false);
  for (const Node& n : c->nodes)
    for (int dep : n.deps) has_dependent[std::size_t(dep)] = true;
  for (std::size_t i = 0; i < c->nodes.size(); ++i) {
    if (!has_dependent[i] &&
        std::find(origin_tail.begin(), origin_tail.end(), int(i)) == origin_tail.end())
      return fail(cudaErrorStreamCaptureUnjoined,
                  "cudaStreamEndCapture: '" + c->nodes[i].work.what +
                      "' was captured on a forked stream that was never joined back into the "
                      "origin stream (a cudaStreamWaitEvent is missing)");
  }
  *graph = new GraphImpl{d, std::move(c->nodes)};
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return remember(cudaErrorInvalidValue);
  *exec = new GraphExecImpl{graph->device, std::make_shared<const std::vector<Node>>(graph->nodes)};
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (graph == nullptr) return remember(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (exec == nullptr) return remember(cudaErrorInvalidValue);
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  Device* d = current_device();
  if (!d) return cudaErrorNoDevice;
  if (exec == nullptr) return remember(cudaErrorInvalidValue);
  if (cudaError_t e = sticky(*d)) return e;
  StreamImpl* s = resolve(stream, *d);
  if (exec->device != s->device)
    return fail(cudaErrorInvalidValue, "cudaGraphLaunch on a stream of another device");
  if (capturing(s))
    return fail(cudaErrorNotSupported, "cudaGraphLaunch into a capture (child graphs)");
  if (cudaError_t e = legacy_use(s, "cudaGraphLaunch")) return e;
  // Record nodes: the events now stand for this launch's nodes.
  const std::shared_ptr<const std::vector<Node>> nodes = exec->nodes;
  std::vector<std::shared_ptr<Completion>> records(nodes->size());
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    if (EventImpl* e = (*nodes)[i].work.record) {
      records[i] = std::make_shared<Completion>();
      e->last = records[i];
      e->captured = nullptr;
    }
  }
  Work w;
  w.what = "graph launch (" + std::to_string(nodes->size()) + " nodes)";
  Device* dev = d;
  w.run = [nodes, dev, records]() {
    for (std::size_t i = 0; i < nodes->size(); ++i) {
      if (sticky(*dev) != cudaSuccess) return;
      if (records[i]) {
        records[i]->at_ms = std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count();
        records[i]->done.store(true);
        continue;
      }
      run_work(*dev, (*nodes)[i].work);
    }
  };
  enqueue(s, std::move(w));
  return cudaSuccess;
}
