// onednn.cc: the cpu:: ops on oneDNN (onednn.h). A matrix product is a matmul primitive on plain
// strided layouts (a transposition is a stride), alpha a run-time output scale and beta a sum
// post-op; a convolution is convolution_forward with the bias and the activation fused in, and
// its two backward primitives. Plain NCHW/OIHW layouts throughout: the activations and weights
// are shared with the rest of the runtime (and the GPU path) in those layouts.
#include "onednn.h"

#include <omp.h>

#include <dnnl.hpp>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpurun::kernels::cpu::onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DT = memory::data_type;

int g_threads = 1;

// This thread's engine, stream and primitives (they must run on the thread that made them).
struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  int omp_threads = -1;

  // Applies set_threads() to this thread's OpenMP teams (oneDNN runs on them).
  void use_threads() {
    if (omp_threads != g_threads) {
      omp_set_num_threads(g_threads);
      omp_threads = g_threads;
    }
  }
};

ThreadState& state() {
  thread_local ThreadState s;
  s.use_threads();
  return s;
}

memory::desc matrix(int rows, int cols, bool transposed, int ld) {
  const memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, DT::f32, strides);
}

struct Gemm {
  dnnl::matmul prim;
  bool scaled = false;
};

using GemmKey = std::tuple<bool, bool, int, int, int, int, int, int, bool, float>;

Gemm& gemm_for(const GemmKey& key) {
  thread_local std::map<GemmKey, std::unique_ptr<Gemm>> cache;
  auto& slot = cache[key];
  if (slot) return *slot;
  const auto [ta, tb, m, n, k, lda, ldb, ldc, scaled, beta] = key;
  dnnl::primitive_attr attr;
  if (scaled) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  // The source is op(A) [m x k], the weights op(B) [k x n]; a transposed operand is read with
  // swapped strides.
  const memory::desc a = ta ? matrix(m, k, true, lda) : matrix(m, k, false, lda);
  const memory::desc b = tb ? matrix(k, n, true, ldb) : matrix(k, n, false, ldb);
  const memory::desc c = matrix(m, n, false, ldc);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, state().engine);
  slot = std::make_unique<Gemm>(Gemm{dnnl::matmul(pd), scaled});
  return *slot;
}

struct ConvShapes {
  memory::desc x, w, b, y;
  memory::dims strides, pad;
};

// Plain layouts as the rest of the runtime holds them (NCHW, OIHW) and "any" ones for the
// primitive to choose: oneDNN's direct AVX-512 convolutions want blocked channels (nChw16c),
// and on plain layouts it falls back to a GEMM-based convolution some 20x slower here.
ConvShapes shapes(const Conv2dDesc& d, Tag tag) {
  const Tag weights = tag == Tag::any ? Tag::any : Tag::oihw;
  return {memory::desc({d.batch, d.in_c, d.in_h, d.in_w}, DT::f32, tag),
          memory::desc({d.out_c, d.in_c, d.k_h, d.k_w}, DT::f32, weights),
          memory::desc({d.out_c}, DT::f32, Tag::x),
          memory::desc({d.batch, d.out_c, d.out_h(), d.out_w()}, DT::f32, tag),
          {d.stride, d.stride},
          {d.pad, d.pad}};
}

// A primitive and, for each argument whose layout it chose differently from the plain one, a
// buffer in its layout and the reorders between the two.
class Bound {
 public:
  struct Arg {
    int id;
    memory::desc plain, chosen;
    bool output;
  };
  Bound(dnnl::primitive prim, const std::vector<Arg>& args) : prim_(std::move(prim)) {
    ThreadState& t = state();
    for (const Arg& a : args) {
      Slot s{a.id, a.plain, a.output, {}, {}};
      if (a.chosen != a.plain) {
        s.inner = memory(a.chosen, t.engine);
        memory user(a.plain, t.engine, DNNL_MEMORY_NONE);
        s.convert = a.output ? dnnl::reorder(s.inner, user) : dnnl::reorder(user, s.inner);
      }
      slots_.push_back(std::move(s));
    }
  }
  void run(const std::unordered_map<int, const float*>& pointers) {
    ThreadState& t = state();
    std::unordered_map<int, memory> args;
    for (Slot& s : slots_) {
      memory user(s.plain, t.engine, const_cast<float*>(pointers.at(s.id)));
      if (!s.inner) {
        args.emplace(s.id, user);
        continue;
      }
      if (!s.output) s.convert.execute(t.stream, user, s.inner);
      args.emplace(s.id, s.inner);
    }
    prim_.execute(t.stream, args);
    for (Slot& s : slots_) {
      if (s.inner && s.output) {
        memory user(s.plain, t.engine, const_cast<float*>(pointers.at(s.id)));
        s.convert.execute(t.stream, s.inner, user);
      }
    }
    t.stream.wait();
  }

 private:
  struct Slot {
    int id;
    memory::desc plain;
    bool output;
    memory inner;
    dnnl::reorder convert;
  };
  dnnl::primitive prim_;
  std::vector<Slot> slots_;
};

using ConvKey = std::tuple<int, int, int, int, int, int, int, int, int, int, int>;

ConvKey conv_key(const Conv2dDesc& d, int variant) {
  return {d.batch, d.in_c, d.in_h, d.in_w, d.out_c, d.k_h, d.k_w, d.stride, d.pad, variant, 0};
}

// The forward primitive descriptor: what the backward ones are hinted with.
dnnl::convolution_forward::primitive_desc forward_pd(const Conv2dDesc& d, Activation act,
                                                     bool bias) {
  const ConvShapes s = shapes(d, Tag::any);
  dnnl::primitive_attr attr;
  if (act == Activation::kRelu) {
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  const dnnl::convolution_forward::desc cd(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, s.x, s.w,
      bias ? s.b : memory::desc(), s.y, s.strides, s.pad, s.pad);
  return dnnl::convolution_forward::primitive_desc(cd, attr, state().engine);
}

Bound& cached(const ConvKey& key, const std::function<std::unique_ptr<Bound>()>& make) {
  thread_local std::map<ConvKey, std::unique_ptr<Bound>> cache;
  auto& slot = cache[key];
  if (!slot) slot = make();
  return *slot;
}

void run(const dnnl::primitive& p, const std::unordered_map<int, memory>& args) {
  ThreadState& t = state();
  p.execute(t.stream, args);
  t.stream.wait();
}

memory wrap(const memory::desc& md, const float* p) {
  return memory(md, state().engine, const_cast<float*>(p));
}

}  // namespace

void set_threads(int n) {
  g_threads = n;
}

std::string info() {
  const dnnl_version_t* v = dnnl_version();
  static const std::map<dnnl::cpu_isa, const char*> names = {
      {dnnl::cpu_isa::sse41, "sse41"},
      {dnnl::cpu_isa::avx, "avx"},
      {dnnl::cpu_isa::avx2, "avx2"},
      {dnnl::cpu_isa::avx2_vnni, "avx2_vnni"},
      {dnnl::cpu_isa::avx512_core, "avx512_core"},
      {dnnl::cpu_isa::avx512_core_vnni, "avx512_core_vnni"},
      {dnnl::cpu_isa::avx512_core_bf16, "avx512_core_bf16"},
      {dnnl::cpu_isa::avx512_core_amx, "avx512_core_amx"}};
  const auto it = names.find(dnnl::get_effective_cpu_isa());
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + (it == names.end() ? "isa ?" : it->second) + ")";
}

void sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  const bool scaled = alpha != 1.0f;
  Gemm& g = gemm_for(GemmKey{ta, tb, m, n, k, lda, ldb, ldc, scaled, beta});
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(matrix(m, k, ta, lda), a)},
                                          {DNNL_ARG_WEIGHTS, wrap(matrix(k, n, tb, ldb), b)},
                                          {DNNL_ARG_DST, wrap(matrix(m, n, false, ldc), c)}};
  float scale = alpha;
  if (g.scaled) {
    args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, wrap(memory::desc({1}, DT::f32, Tag::x), &scale));
  }
  run(g.prim, args);
}

void conv_forward(const Conv2dDesc& d, Activation act, const float* x, const float* w,
                  const float* b, float* y) {
  ConvKey key = conv_key(d, 0);
  std::get<10>(key) = int(act) * 2 + (b != nullptr);
  Bound& p = cached(key, [&] {
    const auto pd = forward_pd(d, act, b != nullptr);
    const ConvShapes s = shapes(d, Tag::nchw);
    std::vector<Bound::Arg> args = {{DNNL_ARG_SRC, s.x, pd.src_desc(), false},
                                    {DNNL_ARG_WEIGHTS, s.w, pd.weights_desc(), false},
                                    {DNNL_ARG_DST, s.y, pd.dst_desc(), true}};
    if (b) args.push_back({DNNL_ARG_BIAS, s.b, pd.bias_desc(), false});
    return std::make_unique<Bound>(dnnl::convolution_forward(pd), args);
  });
  p.run({{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}, {DNNL_ARG_BIAS, b}});
}

void conv_backward_weights(const Conv2dDesc& d, const float* x, const float* dy, float* dw) {
  Bound& p = cached(conv_key(d, 1), [&] {
    const ConvShapes any = shapes(d, Tag::any), s = shapes(d, Tag::nchw);
    const dnnl::convolution_backward_weights::desc cd(dnnl::algorithm::convolution_direct, any.x,
                                                      any.w, any.y, s.strides, s.pad, s.pad);
    const dnnl::convolution_backward_weights::primitive_desc pd(
        cd, state().engine, forward_pd(d, Activation::kNone, false));
    return std::make_unique<Bound>(
        dnnl::convolution_backward_weights(pd),
        std::vector<Bound::Arg>{{DNNL_ARG_SRC, s.x, pd.src_desc(), false},
                                {DNNL_ARG_DIFF_DST, s.y, pd.diff_dst_desc(), false},
                                {DNNL_ARG_DIFF_WEIGHTS, s.w, pd.diff_weights_desc(), true}});
  });
  p.run({{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}});
}

void conv_backward_data(const Conv2dDesc& d, const float* w, const float* dy, float* dx) {
  Bound& p = cached(conv_key(d, 2), [&] {
    const ConvShapes any = shapes(d, Tag::any), s = shapes(d, Tag::nchw);
    const dnnl::convolution_backward_data::desc cd(dnnl::algorithm::convolution_direct, any.x,
                                                   any.w, any.y, s.strides, s.pad, s.pad);
    const dnnl::convolution_backward_data::primitive_desc pd(
        cd, state().engine, forward_pd(d, Activation::kNone, false));
    return std::make_unique<Bound>(
        dnnl::convolution_backward_data(pd),
        std::vector<Bound::Arg>{{DNNL_ARG_WEIGHTS, s.w, pd.weights_desc(), false},
                                {DNNL_ARG_DIFF_DST, s.y, pd.diff_dst_desc(), false},
                                {DNNL_ARG_DIFF_SRC, s.x, pd.diff_src_desc(), true}});
  });
  p.run({{DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dx}});
}

}  // namespace gpurun::kernels::cpu::onednn
