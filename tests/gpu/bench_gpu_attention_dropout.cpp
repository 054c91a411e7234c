// The attention dropout decision, measured (label gpu; skips without a GPU or
// cuDNN): one attention FORWARD through rig's cuDNN graphs at a Transformer
// base's size (B 32, H 8, T 256, D 64, bf16, dropout 0.1), with
//   (a) cuDNN's own Philox dropout: the graph draws the keep bits from
//       (seed, offset); nothing is read for them;
//   (b) rig's keep mask: rig's dropout kernel (DropoutForward over ones: keep
//       ? 1 : 0, bf16) writes the [B, H, T, T] mask from rig's Philox stream
//       each step, and the forward graph reads it. Its time is part of (b).
// The forward only: the backward takes cuDNN's Philox only (cuDNN 9.14's fused
// backward mishandled rig's mask, see attention_backward_graph), so the GPU
// uses Philox and this measures what the forward alone would cost with rig's
// bits. Each variant runs kWarmup steps (plans built), then kRuns steps timed
// one by one with cudaEvents on one stream; the medians are printed in one
// line
//   attention dropout cost (forward): philox A ms, rig mask B ms (of which the
//   mask kernel M ms), rig mask / philox R (...)
// No speed makes the test fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "cuda/dnn/cudnn_graphs.hpp"
#include "cuda/runtime/kernel_runs.cuh"
#include "device_array.hpp"
#include "event_timer.hpp"
#include "gpu_test.hpp"
#include "rig/dtype.hpp"
#include "rig/math/philox.hpp"
#include "rig/random.hpp"

namespace dnn = rig::cuda::dnn;
using rig_gpu_test::DeviceArray;

namespace {

constexpr int kWarmup = 3;
constexpr int kRuns = 25;

class AttentionDropoutBenchmark : public rig_gpu_test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (!dnn::cudnn_load_error().empty()) GTEST_SKIP() << dnn::cudnn_load_error();
    RIG_CUDA_CHECK(cudaSetDevice(rig_gpu_test::kDevice));
    timer_ = std::make_unique<rig_gpu_test::EventTimer>();
    stream_ = timer_->stream();
    graphs_ = std::make_unique<dnn::CudnnGraphs>();
  }
  void TearDown() override {
    graphs_.reset();
    timer_.reset();
  }

  // Median milliseconds of `step(i)` over kRuns calls, after kWarmup.
  template <class Step>
  float median_ms(Step step) {
    return timer_->median_ms(kWarmup, kRuns, step);
  }

  std::unique_ptr<rig_gpu_test::EventTimer> timer_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<dnn::CudnnGraphs> graphs_;
};

}  // namespace

TEST_F(AttentionDropoutBenchmark, PhiloxVersusRigsMask) {
  const float p = 0.1F;
  dnn::AttentionGraphShape s = dnn::AttentionGraphShape::packed(32, 8, 256, 256, 64);
  s.type = dnn::ConvType::bf16;
  s.dropout_probability = p;
  s.dropout = dnn::AttentionDropout::philox;
  const dnn::Graph philox_fwd = dnn::attention_forward_graph(s);
  s.dropout = dnn::AttentionDropout::mask;
  const dnn::Graph mask_fwd = dnn::attention_forward_graph(s);

  const auto n = static_cast<std::size_t>(s.b * s.h * s.tq * s.d);
  const auto probs = static_cast<std::size_t>(s.b * s.h * s.tq * s.tk);
  std::vector<std::uint16_t> values(n);
  for (std::size_t i = 0; i < n; ++i) {
    values[i] = rig::float_to_bfloat16(std::sin(static_cast<float>(i) * 0.37F));
  }
  const DeviceArray<std::uint16_t> q(values), k(values), v(values);
  DeviceArray<std::uint16_t> out(n), keep(probs);
  const DeviceArray<std::uint16_t> ones(
      std::vector<std::uint16_t>(probs, rig::float_to_bfloat16(1.0F)));
  DeviceArray<float> stats(static_cast<std::size_t>(s.b * s.h * s.tq));
  const DeviceArray<std::int64_t> seed(std::vector<std::int64_t>{1234}),
      offset(std::vector<std::int64_t>{0});
  std::size_t workspace_bytes = 0;
  for (const dnn::Graph* g : {&philox_fwd, &mask_fwd}) {
    workspace_bytes = std::max(workspace_bytes, graphs_->workspace_bytes(*g));
  }
  DeviceArray<std::byte> workspace(workspace_bytes);
  const float scale = 1.0F / std::sqrt(static_cast<float>(s.d));
  const float keep_scale = 1.0F / (1.0F - p);
  const std::vector<dnn::Binding> all{
      {dnn::uid::q, q.data()},         {dnn::uid::k, k.data()},
      {dnn::uid::v, v.data()},         {dnn::uid::o, out.data()},
      {dnn::uid::stats, stats.data()}, {dnn::uid::attn_scale, &scale},
      {dnn::uid::seed, seed.data()},   {dnn::uid::offset, offset.data()},
      {dnn::uid::keep, keep.data()},   {dnn::uid::dropout_scale, &keep_scale},
  };
  const auto execute = [&](const dnn::Graph& g) {
    std::vector<dnn::Binding> bound;
    for (const dnn::Binding& b : all) {
      const dnn::TensorDesc* t = g.tensor(b.uid);
      if (t != nullptr && !t->is_virtual) bound.push_back(b);
    }
    graphs_->execute(g, bound, workspace_bytes == 0 ? nullptr : workspace.data(), workspace_bytes,
                     stream_);
  };
  // rig's mask for a step: the dropout kernel over ones, from rig's stream.
  const rig::RandomKey key{42, 0, 0, rig::purpose_id("encoder.layers.0.attention.dropout")};
  const auto make_mask = [&](int step) {
    const auto stream = rig::math::PhiloxStream::of(key.seed, static_cast<std::uint64_t>(step),
                                                    key.rank, key.purpose);
    rig::cuda::run(
        rig::kernels::DropoutForward{stream, rig::math::dropout_threshold(p), 1.0F,
                                     rig::kernels::ElementType::bf16, ones.data(), keep.data(),
                                     nullptr, static_cast<std::int64_t>(probs)},
        stream_);
  };

  const float philox_ms = median_ms([&](int) { execute(philox_fwd); });
  const float mask_ms = median_ms([&](int step) {
    make_mask(step);
    execute(mask_fwd);
  });
  const float mask_kernel_ms = median_ms([&](int step) { make_mask(step); });
  RIG_CUDA_CHECK(cudaStreamSynchronize(stream_));

  // The mask kept about 1 - p of its entries (the kernel ran for real).
  const std::vector<std::uint16_t> kept = keep.to_host();
  const auto count = std::count(kept.begin(), kept.end(), rig::float_to_bfloat16(1.0F));
  const double fraction = static_cast<double>(count) / static_cast<double>(probs);
  EXPECT_NEAR(fraction, 1.0 - p, 0.01);

  std::printf("engines: philox forward %s; mask forward %s\n", graphs_->engine(philox_fwd).c_str(),
              graphs_->engine(mask_fwd).c_str());
  std::printf(
      "attention dropout cost (forward): philox %.3f ms, rig mask %.3f ms (of which the mask "
      "kernel %.3f ms), rig mask / philox %.2f (B 32, H 8, T 256, D 64, bf16, p 0.1, forward "
      "only, median of %d)\n",
      philox_ms, mask_ms, mask_kernel_ms, mask_ms / philox_ms, kRuns);
}
