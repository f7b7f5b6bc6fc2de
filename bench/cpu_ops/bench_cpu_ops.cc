// bench_cpu_ops: each op of one MNIST CNN training step (batch 64) on each available CPU library
// (cpu_kernels.h), one thread: milliseconds (best of N after a warm-up) and GFLOP/s, so a change
// to a kernel or a library shows where the step's time goes. Run it on a quiet machine:
//   build/bench/cpu_ops/bench_cpu_ops [--batch 64] [--repeats 20]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/cpu_kernels.h"
#include "gpurun/kernels/dense.h"
#include "gpurun/kernels/threads.h"

namespace k = gpurun::kernels;
namespace kc = gpurun::kernels::cpu;

namespace {

std::vector<float> noise(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(int(seed >> 9) % 2001 - 1000) / 1000.0f;
  }
  return v;
}

struct Op {
  const char* name;
  double flop;
  std::function<void()> run;
  bool in_step = true;  // counted in the step's total (as training runs it: dense dW unfused)
};

}  // namespace

int main(int argc, char** argv) {
  int batch = 64, repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--batch"))
      batch = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else
      return std::fprintf(stderr, "usage: bench_cpu_ops [--batch B] [--repeats N]\n"), 2;
  }
  k::Conv2dDesc c;
  c.batch = batch, c.in_c = 1, c.in_h = c.in_w = 28, c.out_c = 32, c.k_h = c.k_w = 3;
  const int flat = 32 * 26 * 26;
  const k::DenseDesc d1{batch, flat, 128};
  auto x = noise(c.x_floats(), 1), cw = noise(c.w_floats(), 2), cb = noise(32, 3);
  auto a1 = noise(c.y_floats(), 4), da1 = noise(c.y_floats(), 5), dcw = noise(c.w_floats(), 6);
  auto w1 = noise(std::size_t(128) * flat, 7), dw1 = w1, a2 = noise(std::size_t(batch) * 128, 8);
  auto da2 = noise(std::size_t(batch) * 128, 9), db = noise(128, 10);
  std::vector<float> ws(kc::conv2d_workspace_floats(c));
  const k::Workspace W{ws.data(), ws.size()};
  const double conv = 2.0 * c.y_floats() * c.k_h * c.k_w, dense = 2.0 * batch * 128 * flat;
  const std::vector<Op> ops = {
      {"conv fwd + bias + relu", conv,
       [&] {
         kc::conv2d_bias_act_forward(c, k::Activation::kRelu, x.data(), cw.data(), cb.data(),
                                     a1.data(), W);
       }},
      {"relu mask + conv db", double(c.y_floats()),
       [&] {
         kc::bias_act_backward({batch, 32, 676, k::Activation::kRelu}, a1.data(), da1.data(),
                               db.data());
       },
       false},
      {"conv dW", conv,
       [&] { kc::conv2d_backward_weights(c, x.data(), da1.data(), dcw.data(), W); }, false},
      {"conv mask + db + dW", conv,
       [&] {
         kc::conv2d_bias_act_backward_weights(c, k::Activation::kRelu, x.data(), a1.data(),
                                              da1.data(), dcw.data(), db.data(), W);
       }},
      {"dense1 fwd", dense, [&] { kc::dense_forward(d1, a1.data(), w1.data(), a2.data()); }},
      {"dense1 dW", dense,
       [&] { kc::dense_backward_weights(d1, a1.data(), da2.data(), dw1.data()); }},
      {"dense1 fused update", dense,
       [&] { kc::dense_weight_cols(d1, a1.data(), da2.data(), 0, d1.in, -1e-9f, 1.0f, w1.data()); },
       false},
      {"dense1 dX", dense, [&] { kc::dense_backward_data(d1, w1.data(), da2.data(), da1.data()); }},
  };
  kc::set_num_threads(1);
  std::printf("batch %d, 1 thread, best of %d; GFLOP/s counts 2 per multiply-add\n", batch,
              repeats);
  std::printf("%-24s", "op");
  std::vector<kc::CpuKernels> libs;
  for (auto l : {kc::CpuKernels::kOneDnn, kc::CpuKernels::kOpenBlas, kc::CpuKernels::kBlis}) {
    std::string why;
    if (!kc::cpu_kernels_available(l, &why)) {
      std::fprintf(stderr, "%s: not available: %s\n", kc::name(l), why.c_str());
      continue;
    }
    libs.push_back(l);
    kc::set_cpu_kernels(l);
    std::printf(" | %-26s", kc::cpu_kernels_info().c_str());
  }
  std::printf("\n");
  std::vector<double> total(libs.size(), 0.0);
  for (const Op& op : ops) {
    std::printf("%-24s", op.name);
    for (std::size_t i = 0; i < libs.size(); ++i) {
      kc::set_cpu_kernels(libs[i]);
      const double ms = best_ms(repeats, op.run);
      if (op.in_step) total[i] += ms;
      std::printf(" | %8.3f ms %7.1f GF/s  ", ms, op.flop / ms * 1e-6);
    }
    std::printf("\n");
  }
  std::printf("%-24s", "step (dense dW unfused)");
  for (double t : total) std::printf(" | %8.3f ms %7.0f img/s  ", t, batch / t * 1e3);
  std::printf("\n");
  return 0;
}
