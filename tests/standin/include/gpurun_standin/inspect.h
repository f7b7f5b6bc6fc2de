// inspect.h (gpurun CUDA stand-in): what the stand-in counted, for tests that pin properties a
// real device cannot show, such as "nothing is allocated after set-up" or "nothing uses the
// legacy stream". Only tests built against the stand-in include it.
#pragma once

namespace gpurun_standin {

struct Counts {
  long device_allocs = 0;  // cudaMalloc calls that succeeded
  long device_frees = 0;   // cudaFree calls that freed something
  long legacy_ops = 0;     // operations enqueued on the legacy default stream
  long kernels = 0;        // kernel launches accepted
};
Counts counts();

}  // namespace gpurun_standin
