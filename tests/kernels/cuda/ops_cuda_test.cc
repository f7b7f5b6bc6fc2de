// ops_cuda_test.cc: every cuda:: op against its CPU twin (the oracle), on shapes that include the
// MNIST CNN's, with the tolerance stated per op as |gpu - cpu| <= atol + rtol*|cpu| (the first
// mismatches are printed). FP32 math (no TF32). Without a CUDA device the program exits 77
// (skipped); with one, every case runs (gpu_test_main.cc).
// Run: ctest -L gpu, or build-cuda/tests/kernels/cuda/kernels_cuda_test.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "../test_util.h"
#include "gpu_test_util.h"
#include "gpurun/cuda_support/check.cuh"
#include "gpurun/cuda_support/owners.h"
#include "gpurun/kernels/accuracy.h"
#include "gpurun/kernels/bias_act.h"
#include "gpurun/kernels/conv2d.h"
#include "gpurun/kernels/dense.h"
#include "gpurun/kernels/pool2d.h"
#include "gpurun/kernels/sgd.h"
#include "gpurun/kernels/softmax_xent.h"

namespace gpurun::kernels {
namespace {

using gpurun::testing::DeviceVec;
using testing::all_close;
using testing::random_vec;

const Stream kDefault{};

Conv2dDesc conv_desc(int batch, int in_c, int hw, int out_c, int k, int stride = 1, int pad = 0) {
  Conv2dDesc d;
  d.batch = batch, d.in_c = in_c, d.in_h = d.in_w = hw, d.out_c = out_c, d.k_h = d.k_w = k;
  d.stride = stride, d.pad = pad;
  return d;
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override { cuda::set_math_precision(cuda::MathPrecision::kFp32); }
};

// Forward: a sum of in_c*k*k (9..72) products of values in [-1, 1]: FP32 rounding differences
// of cuDNN's algorithms (implicit GEMM, Winograd) stay below 1e-5; we allow 1e-4 + 1e-4*|ref|.
TEST_F(CudaOps, Conv2dForwardMatchesCpu) {
  for (const Conv2dDesc d : {conv_desc(64, 1, 28, 32, 3), conv_desc(5, 3, 11, 7, 3, 2, 1),
                             conv_desc(2, 8, 9, 4, 5, 1, 2)}) {
    const auto x = random_vec(d.x_floats(), 1), w = random_vec(d.w_floats(), 2);
    std::vector<float> ref(d.y_floats());
    ref::conv2d_forward(d, x.data(), w.data(), ref.data());
    DeviceVec<float> dx(x), dw(w), dy(d.y_floats()), ws(cuda::conv2d_workspace_floats(d) + 1);
    cuda::conv2d_forward(d, dx.get(), dw.get(), dy.get(),
                         {ws.get(), cuda::conv2d_workspace_floats(d) + 1}, kDefault);
    EXPECT_TRUE(all_close(dy.host(), ref, 1e-4f, 1e-4f)) << "batch " << d.batch;
  }
}

// Backward to the weights sums batch*out_h*out_w products (43,264 for the MNIST layer at batch
// 64): 1e-3 + 1e-4*|ref|. kAdd adds the batch's sum to what dw held.
TEST_F(CudaOps, Conv2dBackwardWeightsMatchesCpu) {
  for (const Conv2dDesc d : {conv_desc(64, 1, 28, 32, 3), conv_desc(5, 3, 11, 7, 3, 2, 1)}) {
    const auto x = random_vec(d.x_floats(), 3), dyv = random_vec(d.y_floats(), 4);
    const auto dw0 = random_vec(d.w_floats(), 5);
    const std::size_t wsf = cuda::conv2d_workspace_floats(d) + 1;
    DeviceVec<float> dx(x), ddy(dyv), ws(wsf);
    for (const Accumulate acc : {Accumulate::kOverwrite, Accumulate::kAdd}) {
      std::vector<float> ref = dw0;
      ref::conv2d_backward_weights(d, x.data(), dyv.data(), ref.data(), acc);
      DeviceVec<float> ddw(dw0);
      cuda::conv2d_backward_weights(d, dx.get(), ddy.get(), ddw.get(), {ws.get(), wsf}, acc,
                                    kDefault);
      EXPECT_TRUE(all_close(ddw.host(), ref, 1e-3f, 1e-4f))
          << "acc " << int(acc) << " batch " << d.batch;
    }
  }
}

// Convolution, bias and activation in one call: the direct kernels (at most 32 taps: the MNIST
// layer; 3 channels of 3x3 with stride 2 and padding; LeNet's 5x5; 6 channels, which the
// backward's groups of 4 do not divide, on 4x4 outputs, fewer than a warp's 32 positions; 4x4
// taps, in groups of 2, 5 channels; a 2x3 filter on 9x13 images with padding and 64 channels,
// two groups a warp) and, beyond, cuDNN + bias_act, against ref::conv2d_forward +
// ref::bias_act_forward: 1e-4 + 1e-4*|ref|. Bias and ReLU, and neither.
Conv2dDesc wide_desc() {
  Conv2dDesc d = conv_desc(3, 1, 9, 64, 3, 1, 1);
  d.in_w = 13, d.k_h = 2;
  return d;
}
const Conv2dDesc kFusedShapes[] = {conv_desc(64, 1, 28, 32, 3), conv_desc(5, 3, 11, 7, 3, 2, 1),
                                   conv_desc(3, 1, 32, 6, 5),   conv_desc(40, 1, 6, 6, 3),
                                   conv_desc(3, 1, 10, 5, 4),   wide_desc(),
                                   conv_desc(2, 8, 9, 4, 5, 1, 2)};

TEST_F(CudaOps, ConvBiasActForwardMatchesCpu) {
  EXPECT_TRUE(cuda::conv2d_direct(kFusedShapes[0]));
  EXPECT_FALSE(cuda::conv2d_direct(kFusedShapes[6]));  // 200 taps: cuDNN
  for (const Conv2dDesc& d : kFusedShapes) {
    for (const bool bias : {true, false}) {
      const Activation act = bias ? Activation::kRelu : Activation::kNone;
      const auto x = random_vec(d.x_floats(), 40), w = random_vec(d.w_floats(), 41);
      const auto b = random_vec(std::size_t(d.out_c), 42);
      std::vector<float> ref(d.y_floats());
      ref::conv2d_forward(d, x.data(), w.data(), ref.data());
      ref::bias_act_forward({d.batch, d.out_c, d.out_h() * d.out_w(), act}, ref.data(),
                            bias ? b.data() : nullptr);
      const std::size_t wsf = cuda::conv2d_workspace_floats(d) + 1;
      DeviceVec<float> dx(x), dw(w), db(b), dy(d.y_floats()), ws(wsf);
      cuda::conv2d_bias_act_forward(d, act, dx.get(), dw.get(), bias ? db.get() : nullptr,
                                    dy.get(), {ws.get(), wsf}, kDefault);
      EXPECT_TRUE(all_close(dy.host(), ref, 1e-4f, 1e-4f))
          << "batch " << d.batch << " in_c " << d.in_c << " out_c " << d.out_c << " bias " << bias;
    }
  }
}

// A first layer's backward to the weights and the bias: g = dy * act'(y), dw = sum of g * patch,
// db = sum of g, over batch*out_h*out_w positions (173,056 for the MNIST layer at batch 256, 339
// blocks of the direct kernels' first stage): 1e-3 + 1e-4*|ref|, overwriting and adding. The
// direct kernels sum in an order fixed by the shape: a second call gives the same bits.
TEST_F(CudaOps, ConvBiasActBackwardWeightsMatchesCpuAndRepeats) {
  std::vector<Conv2dDesc> shapes(std::begin(kFusedShapes), std::end(kFusedShapes));
  shapes[0].batch = 256;
  for (const Conv2dDesc& d : shapes) {
    const BiasActDesc bd{d.batch, d.out_c, d.out_h() * d.out_w(), Activation::kRelu};
    const auto x = random_vec(d.x_floats(), 43), y = random_vec(d.y_floats(), 44);
    const auto dyv = random_vec(d.y_floats(), 45);
    const auto dw0 = random_vec(d.w_floats(), 46), db0 = random_vec(std::size_t(d.out_c), 47);
    const std::size_t wsf = cuda::conv2d_workspace_floats(d) + 1;
    DeviceVec<float> dx(x), dyact(y), ws(wsf);
    std::vector<float> first;
    for (const Accumulate acc : {Accumulate::kOverwrite, Accumulate::kAdd, Accumulate::kOverwrite}) {
      std::vector<float> g = dyv, rw = dw0, rb = db0;
      ref::bias_act_backward(bd, y.data(), g.data(), rb.data(), acc);
      ref::conv2d_backward_weights(d, x.data(), g.data(), rw.data(), acc);
      DeviceVec<float> ddy(dyv), ddw(dw0), ddb(db0);
      cuda::conv2d_bias_act_backward_weights(d, bd.act, dx.get(), dyact.get(), ddy.get(),
                                             ddw.get(), ddb.get(), {ws.get(), wsf}, acc, kDefault);
      const std::string what = "batch " + std::to_string(d.batch) + " in_c " +
                               std::to_string(d.in_c) + " acc " + std::to_string(int(acc));
      EXPECT_TRUE(all_close(ddw.host(), rw, 1e-3f, 1e-4f)) << "dw, " << what;
      EXPECT_TRUE(all_close(ddb.host(), rb, 1e-3f, 1e-4f)) << "db, " << what;
      if (acc == Accumulate::kAdd) continue;
      std::vector<float> bits = ddw.host();
      const std::vector<float> b2 = ddb.host();
      bits.insert(bits.end(), b2.begin(), b2.end());
      if (first.empty()) {
        first = bits;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), bits.data(), bits.size() * sizeof(float)))
            << "a second call gave other bits, " << what;
      }
    }
  }
}

// A workspace sized for the training batch serves a smaller batch too, though the chunk follows
// the shape: batch 96 of the MNIST layer takes 1,014 stage-1 blocks where batch 256 takes 902,
// and a workspace of 256's exact need was refused at 96.
TEST_F(CudaOps, ConvBackwardWorkspaceOfALargerBatchServesASmallerOne) {
  Conv2dDesc big = kFusedShapes[0], d = kFusedShapes[0];
  big.batch = 256;
  d.batch = 96;
  const std::size_t wsf = cuda::conv2d_direct_workspace_floats(big);  // the model's first layer
  const BiasActDesc bd{d.batch, d.out_c, d.out_h() * d.out_w(), Activation::kRelu};
  const auto x = random_vec(d.x_floats(), 53), y = random_vec(d.y_floats(), 54);
  const auto dyv = random_vec(d.y_floats(), 55);
  std::vector<float> g = dyv, rw(d.w_floats()), rb(std::size_t(d.out_c));
  ref::bias_act_backward(bd, y.data(), g.data(), rb.data(), Accumulate::kOverwrite);
  ref::conv2d_backward_weights(d, x.data(), g.data(), rw.data(), Accumulate::kOverwrite);
  DeviceVec<float> dx(x), dyact(y), ddy(dyv), ddw(rw.size()), ddb(rb.size()), ws(wsf);
  ASSERT_NO_THROW(cuda::conv2d_bias_act_backward_weights(d, bd.act, dx.get(), dyact.get(),
                                                         ddy.get(), ddw.get(), ddb.get(),
                                                         {ws.get(), wsf}, Accumulate::kOverwrite,
                                                         kDefault));
  EXPECT_TRUE(all_close(ddw.host(), rw, 1e-3f, 1e-4f));
  EXPECT_TRUE(all_close(ddb.host(), rb, 1e-3f, 1e-4f));
}

// Without an activation nothing is masked, and without a bias gradient (db nullptr) only dw is
// written: the direct kernels, and dy is left as it was.
TEST_F(CudaOps, ConvBackwardWeightsWithoutActivationOrBias) {
  for (const Conv2dDesc& d : {kFusedShapes[0], wide_desc()}) {
    const auto x = random_vec(d.x_floats(), 50), y = random_vec(d.y_floats(), 51);
    const auto dyv = random_vec(d.y_floats(), 52);
    std::vector<float> rw(d.w_floats());
    ref::conv2d_backward_weights(d, x.data(), dyv.data(), rw.data());
    const std::size_t wsf = cuda::conv2d_workspace_floats(d) + 1;
    DeviceVec<float> dx(x), dyact(y), ddy(dyv), ddw(d.w_floats()), ws(wsf);
    cuda::conv2d_bias_act_backward_weights(d, Activation::kNone, dx.get(), dyact.get(), ddy.get(),
                                           ddw.get(), nullptr, {ws.get(), wsf},
                                           Accumulate::kOverwrite, kDefault);
    EXPECT_TRUE(all_close(ddw.host(), rw, 1e-3f, 1e-4f)) << "out_c " << d.out_c;
    EXPECT_TRUE(all_close(ddy.host(), dyv, 0.0f, 0.0f)) << "dy changed, out_c " << d.out_c;
  }
}

// Backward to the input: out_c*k*k terms per value: 1e-4 + 1e-4*|ref|.
TEST_F(CudaOps, Conv2dBackwardDataMatchesCpu) {
  for (const Conv2dDesc d : {conv_desc(8, 1, 28, 32, 3), conv_desc(5, 3, 11, 7, 3, 2, 1)}) {
    const auto w = random_vec(d.w_floats(), 6), dyv = random_vec(d.y_floats(), 7);
    std::vector<float> ref(d.x_floats());
    ref::conv2d_backward_data(d, w.data(), dyv.data(), ref.data());
    const std::size_t wsf = cuda::conv2d_workspace_floats(d) + 1;
    DeviceVec<float> dw(w), ddy(dyv), ddx(d.x_floats()), ws(wsf);
    cuda::conv2d_backward_data(d, dw.get(), ddy.get(), ddx.get(), {ws.get(), wsf}, kDefault);
    EXPECT_TRUE(all_close(ddx.host(), ref, 1e-4f, 1e-4f)) << "batch " << d.batch;
  }
}

// Dense: forward sums `in` products (21,632 for the MNIST layer, values in [-1, 1] scaled by
// 0.05 to keep activations O(1)), dW sums `batch`, dX sums `out`: 1e-3 + 1e-4*|ref| covers FP32
// accumulation-order differences of K up to ~2e4. The shapes take both dW paths: cuBLAS, and
// the narrow layers' kernel (out <= 64 and in * out <= 65,536; 40 x 1024 x 64 is its edge,
// 3 x 2080 x 32 just past it).
TEST_F(CudaOps, DenseMatchesCpu) {
  for (const DenseDesc d :
       {DenseDesc{64, 21632, 128}, DenseDesc{64, 128, 10}, DenseDesc{7, 33, 5},
        DenseDesc{256, 128, 10}, DenseDesc{40, 1024, 64}, DenseDesc{3, 2080, 32}}) {
    const auto x = random_vec(std::size_t(d.batch) * d.in, 8, -0.05f, 0.05f);
    const auto w = random_vec(std::size_t(d.out) * d.in, 9, -0.05f, 0.05f);
    const auto dyv = random_vec(std::size_t(d.batch) * d.out, 10);
    DeviceVec<float> dx(x), dw(w), ddy(dyv);
    std::vector<float> y(std::size_t(d.batch) * d.out), gw(w.size()), gx(x.size());
    ref::dense_forward(d, x.data(), w.data(), y.data());
    DeviceVec<float> dy(y.size());
    cuda::dense_forward(d, dx.get(), dw.get(), dy.get(), kDefault);
    EXPECT_TRUE(all_close(dy.host(), y, 1e-3f, 1e-4f)) << "forward in=" << d.in;

    const auto gw0 = random_vec(w.size(), 11);
    for (const Accumulate acc : {Accumulate::kOverwrite, Accumulate::kAdd}) {
      gw = gw0;
      ref::dense_backward_weights(d, x.data(), dyv.data(), gw.data(), acc);
      DeviceVec<float> dgw(gw0);
      cuda::dense_backward_weights(d, dx.get(), ddy.get(), dgw.get(), acc, kDefault);
      const auto first = dgw.host();
      EXPECT_TRUE(all_close(first, gw, 1e-3f, 1e-4f)) << "dW in=" << d.in;
      DeviceVec<float> again(gw0);  // the same bits a second time
      cuda::dense_backward_weights(d, dx.get(), ddy.get(), again.get(), acc, kDefault);
      EXPECT_EQ(again.host(), first) << "dW in=" << d.in;
    }
    ref::dense_backward_data(d, w.data(), dyv.data(), gx.data());
    DeviceVec<float> dgx(gx.size());
    cuda::dense_backward_data(d, dw.get(), ddy.get(), dgx.get(), kDefault);
    EXPECT_TRUE(all_close(dgx.host(), gx, 1e-3f, 1e-4f)) << "dX in=" << d.in;
  }
}

// Bias + activation forward is the same two float operations as the CPU: exact (atol 0).
// Backward masks exactly; db sums up to 43,264 values in another order (the CPU oracle in
// double): 1e-3 + 1e-4*|ref|, as for the other batch reductions.
TEST_F(CudaOps, BiasActMatchesCpu) {
  const BiasActDesc shapes[] = {{64, 32, 676, Activation::kRelu},
                                {64, 128, 1, Activation::kRelu},
                                {64, 10, 1, Activation::kNone},
                                {3, 37, 5, Activation::kRelu},
                                {1000, 70, 1, Activation::kRelu}};
  for (const BiasActDesc& d : shapes) {
    const auto y0 = random_vec(d.floats(), 12), b = random_vec(std::size_t(d.channels), 13);
    std::vector<float> y = y0;
    cpu::bias_act_forward(d, y.data(), b.data());
    DeviceVec<float> dyv(y0), db(b);
    cuda::bias_act_forward(d, dyv.get(), db.get(), kDefault);
    EXPECT_TRUE(all_close(dyv.host(), y, 0.0f, 0.0f)) << "forward channels " << d.channels;

    const auto g0 = random_vec(d.floats(), 14), db0 = random_vec(std::size_t(d.channels), 15);
    for (const Accumulate acc : {Accumulate::kOverwrite, Accumulate::kAdd}) {
      std::vector<float> g = g0, gb = db0;
      ref::bias_act_backward(d, y.data(), g.data(), gb.data(), acc);
      DeviceVec<float> dg(g0), dgb(db0);
      cuda::bias_act_backward(d, dyv.get(), dg.get(), dgb.get(), acc, kDefault);
      EXPECT_TRUE(all_close(dg.host(), g, 0.0f, 0.0f)) << "mask channels " << d.channels;
      EXPECT_TRUE(all_close(dgb.host(), gb, 1e-3f, 1e-4f)) << "db channels " << d.channels;
    }
    // Without db only the mask is applied.
    std::vector<float> g = g0;
    ref::bias_act_backward(d, y.data(), g.data(), nullptr);
    DeviceVec<float> dg(g0);
    cuda::bias_act_backward(d, dyv.get(), dg.get(), nullptr, Accumulate::kOverwrite, kDefault);
    EXPECT_TRUE(all_close(dg.host(), g, 0.0f, 0.0f)) << "mask only, channels " << d.channels;
  }
}

// Max pooling: a max does not round and the gather adds each input's gradients in the CPU
// scatter's order: bitwise (atol 0), overlapping windows included.
TEST_F(CudaOps, MaxPoolMatchesCpu) {
  const Pool2dDesc shapes[] = {{64, 6, 24, 24, 2, 2},
                               {64, 16, 8, 8, 2, 2},
                               {3, 2, 7, 9, 2, 2},
                               {2, 3, 7, 7, 3, 2},
                               {1, 1, 5, 5, 3, 1}};
  for (const Pool2dDesc& d : shapes) {
    const auto x = random_vec(d.x_floats(), 30), dyv = random_vec(d.y_floats(), 31);
    std::vector<float> y(d.y_floats()), dx(d.x_floats());
    cpu::max_pool2d_forward(d, x.data(), y.data());
    cpu::max_pool2d_backward(d, x.data(), dyv.data(), dx.data());
    DeviceVec<float> gx(x), gy(d.y_floats()), gdy(dyv), gdx(d.x_floats());
    cuda::max_pool2d_forward(d, gx.get(), gy.get(), kDefault);
    cuda::max_pool2d_backward(d, gx.get(), gdy.get(), gdx.get(), kDefault);
    EXPECT_TRUE(all_close(gy.host(), y, 0.0f, 0.0f)) << "forward " << d.size << "/" << d.stride;
    EXPECT_TRUE(all_close(gdx.host(), dx, 0.0f, 0.0f)) << "backward " << d.size << "/" << d.stride;
  }
}

// A ReLU layer: bias_act without a bias, exact.
TEST_F(CudaOps, ReluWithoutBiasMatchesCpu) {
  const BiasActDesc d{64, 1, 2304, Activation::kRelu};
  const auto y0 = random_vec(d.floats(), 32);
  std::vector<float> y = y0;
  cpu::bias_act_forward(d, y.data(), nullptr);
  DeviceVec<float> dy(y0);
  cuda::bias_act_forward(d, dy.get(), nullptr, kDefault);
  EXPECT_TRUE(all_close(dy.host(), y, 0.0f, 0.0f));
}

// A runtime call's failure, once caught, is not reported again by the next launch check. CUDA
// keeps a failed call's error as the thread's last error until cudaGetLastError reads it; on an
// H200 a caught cudaEventRecordWithFlags failure failed the next test's first launch. The call
// here is one CUDA refuses (and the stand-in with it): an external record outside a capture.
TEST_F(CudaOps, ACaughtFailureIsNotReportedAgainByTheNextLaunch) {
  cuda_support::OwnedStream stream;
  cuda_support::Event ev;
  EXPECT_THROW(GPURUN_CUDA_CHECK(cudaEventRecordWithFlags(ev.get(), stream.get(),
                                                          cudaEventRecordExternal)),
               std::runtime_error);
  const BiasActDesc d{2, 1, 8, Activation::kRelu};
  DeviceVec<float> dy(random_vec(d.floats(), 33));
  EXPECT_NO_THROW(cuda::bias_act_forward(d, dy.get(), nullptr, kDefault));
}

// Softmax cross-entropy: expf/logf differ from the host's by an ulp or two: dlogits
// 1e-6 + 1e-5*|ref|, the loss sum 1e-5*|ref|. Also in place (dlogits aliasing logits).
TEST_F(CudaOps, SoftmaxXentMatchesCpu) {
  for (const int batch : {1, 64, 1024, 1500}) {
    const SoftmaxXentDesc d{batch, 10, 1.0f / float(batch)};
    const auto z = random_vec(std::size_t(batch) * 10, 16, -8.0f, 8.0f);
    std::vector<std::int32_t> labels(batch);
    for (int n = 0; n < batch; ++n) labels[n] = (n * 7 + 3) % 10;
    std::vector<float> g(z.size());
    float loss = 0;
    cpu::softmax_xent(d, z.data(), labels.data(), g.data(), &loss);
    DeviceVec<float> dz(z), dg(z.size()), dloss(1);
    DeviceVec<std::int32_t> dl(labels);
    cuda::softmax_xent(d, dz.get(), dl.get(), dg.get(), dloss.get(), kDefault);
    EXPECT_TRUE(all_close(dg.host(), g, 1e-6f, 1e-5f)) << "batch " << batch;
    EXPECT_TRUE(all_close(dloss.host(), {loss}, 0.0f, 1e-5f)) << "batch " << batch;
    cuda::softmax_xent(d, dz.get(), dl.get(), dz.get(), dloss.get(), kDefault);  // in place
    EXPECT_TRUE(all_close(dz.host(), g, 1e-6f, 1e-5f)) << "in place, batch " << batch;
  }
}

// A label out of range cannot throw on the device: the loss becomes NaN, visibly.
TEST_F(CudaOps, SoftmaxXentBadLabelGivesNan) {
  const SoftmaxXentDesc d{2, 10, 0.5f};
  DeviceVec<float> dz(random_vec(20, 17)), dg(20), dloss(1);
  DeviceVec<std::int32_t> dl(std::vector<std::int32_t>{3, 10});
  cuda::softmax_xent(d, dz.get(), dl.get(), dg.get(), dloss.get(), kDefault);
  EXPECT_TRUE(std::isnan(dloss.host()[0]));
}

// Accuracy is a count: exact, with ties going to the lowest index as on the CPU.
TEST_F(CudaOps, AccuracyMatchesCpu) {
  for (const int batch : {1, 64, 1024, 3000}) {
    const AccuracyDesc d{batch, 10};
    auto z = random_vec(std::size_t(batch) * 10, 18);
    for (int n = 0; n < batch; n += 5)
      z[std::size_t(n) * 10 + 4] = z[std::size_t(n) * 10 + 2] = 2.0f;
    std::vector<std::int32_t> labels(batch);
    for (int n = 0; n < batch; ++n) labels[n] = (n * 3) % 10;
    std::int64_t want = 0;
    cpu::accuracy_count(d, z.data(), labels.data(), &want);
    DeviceVec<float> dz(z);
    DeviceVec<std::int32_t> dl(labels);
    DeviceVec<std::int64_t> dc(1);
    cuda::accuracy_count(d, dz.get(), dl.get(), dc.get(), kDefault);
    EXPECT_EQ(dc.host()[0], want) << "batch " << batch;
  }
}

// SGD: two or three multiply-adds per value; nvcc may fuse them (FMA), the CPU build does not:
// 1e-6 + 1e-6*|ref|. Both the host-lr and the device-lr forms, with and without momentum.
TEST_F(CudaOps, SgdMatchesCpu) {
  const std::size_t n = 2770640 + 3;  // the MNIST CNN's padded buffer, plus an odd tail
  for (const float momentum : {0.0f, 0.9f}) {
    SgdDesc d;
    d.n = n, d.lr = 0.2f, d.momentum = momentum, d.weight_decay = 1e-4f, d.grad_scale = 0.5f;
    const auto p0 = random_vec(n, 19), g = random_vec(n, 20), v0 = random_vec(n, 21);
    std::vector<float> p = p0, v = v0;
    cpu::sgd_step(d, p.data(), g.data(), v.data());
    for (const bool device_lr : {false, true}) {
      DeviceVec<float> dp(p0), dg(g), dv(v0), dlr(std::vector<float>{d.lr});
      SgdDesc dd = d;
      if (device_lr) {
        dd.lr = 123.0f;  // must be ignored
        cuda::sgd_step_device_lr(dd, dlr.get(), dp.get(), dg.get(), dv.get(), kDefault);
      } else {
        cuda::sgd_step(dd, dp.get(), dg.get(), dv.get(), kDefault);
      }
      EXPECT_TRUE(all_close(dp.host(), p, 1e-6f, 1e-6f)) << "params, momentum " << momentum;
      if (momentum != 0.0f) {
        EXPECT_TRUE(all_close(dv.host(), v, 1e-6f, 1e-6f)) << "velocity";
      }
    }
  }
}

// TF32 is opt-in: after kTf32 a 21,632-long product differs from FP32 by ~1e-3 relative, so
// only agreement to 2e-2 is asked; switching back restores FP32 results.
TEST_F(CudaOps, Tf32IsOptIn) {
  const DenseDesc d{64, 21632, 128};
  const auto x = random_vec(std::size_t(d.batch) * d.in, 22, -0.05f, 0.05f);
  const auto w = random_vec(std::size_t(d.out) * d.in, 23, -0.05f, 0.05f);
  std::vector<float> y(std::size_t(d.batch) * d.out);
  ref::dense_forward(d, x.data(), w.data(), y.data());
  DeviceVec<float> dx(x), dw(w), dy(y.size());
  cuda::set_math_precision(cuda::MathPrecision::kTf32);
  cuda::dense_forward(d, dx.get(), dw.get(), dy.get(), kDefault);
  EXPECT_TRUE(all_close(dy.host(), y, 2e-2f, 2e-2f));
  cuda::set_math_precision(cuda::MathPrecision::kFp32);
  cuda::dense_forward(d, dx.get(), dw.get(), dy.get(), kDefault);
  EXPECT_TRUE(all_close(dy.host(), y, 1e-3f, 1e-4f));
}

}  // namespace
}  // namespace gpurun::kernels
