// cuDNN graphs (core/cuda/dnn) on a GPU against cpu_backend() on the same
// inputs: convolution forward / dgrad / wgrad (f32, no TF32), batch-norm
// training forward and backward, attention forward (bf16 operands, f32
// softmax; causal; rig's dropout mask) and attention backward (dq, dk, dv
// from the GPU forward's out and stats; causal, key and query padding,
// cuDNN's Philox dropout with its keep bits read back through an identity v;
// the backward graph rejects rig's mask). Skips without a GPU, and without
// cuDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/dnn/cudnn_graphs.hpp"
#include "device_array.hpp"
#include "event_timer.hpp"
#include "gpu_test.hpp"
#include "rig/dtype.hpp"
#include "rig/random.hpp"

namespace dnn = rig::cuda::dnn;
using rig_gpu_test::DeviceArray;

namespace {

class CudnnGraphTest : public rig_gpu_test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (!dnn::cudnn_load_error().empty()) GTEST_SKIP() << dnn::cudnn_load_error();
    RIG_CUDA_CHECK(cudaSetDevice(rig_gpu_test::kDevice));
    RIG_CUDA_CHECK(cudaStreamCreate(&stream_));
    graphs_ = std::make_unique<dnn::CudnnGraphs>();
  }
  void TearDown() override {
    graphs_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

 public:
  // Runs `graph` with a workspace of its own.
  void run(const dnn::Graph& graph, const std::vector<dnn::Binding>& bindings) {
    run_on(stream_, graph, bindings);
  }
  void run_on(cudaStream_t stream, const dnn::Graph& graph,
              const std::vector<dnn::Binding>& bindings) {
    const std::size_t bytes = graphs_->workspace_bytes(graph);
    DeviceArray<std::byte> workspace(bytes);
    graphs_->execute(graph, bindings, bytes == 0 ? nullptr : workspace.data(), bytes, stream);
    RIG_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

 protected:
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<dnn::CudnnGraphs> graphs_;
};

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale = 1.0F) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel,
                  float abs, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= abs + rel * std::fabs(want[i]))) {
      if (++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    }
  }
  EXPECT_EQ(bad, 0U) << what;
}

rig::backend::Conv2dShape test_conv() {
  rig::backend::Conv2dShape s;
  s.n = 4;
  s.c_in = 8;
  s.h = s.w = 13;
  s.c_out = 12;
  s.kernel_h = s.kernel_w = 3;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  s.groups = 2;
  s.out_h = s.out_w = (13 + 2 - 3) / 2 + 1;
  return s;
}

std::size_t count(const std::vector<std::int64_t>& dims) {
  std::size_t n = 1;
  for (std::int64_t d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

}  // namespace

TEST_F(CudnnGraphTest, ConvForwardWithBiasMatchesCpu) {
  rig::backend::Conv2dShape s = test_conv();
  s.bias = true;
  const dnn::Graph g = dnn::conv2d_forward_graph(s);
  const auto x = random_values(count(g.tensor(dnn::uid::x)->dims), 1);
  const auto w = random_values(count(g.tensor(dnn::uid::w)->dims), 2);
  const auto b = random_values(static_cast<std::size_t>(s.c_out), 3);
  std::vector<float> want(count(g.tensor(dnn::uid::y)->dims));
  rig::backend::cpu_backend().conv2d_forward(s, x.data(), w.data(), b.data(), want.data());
  DeviceArray<float> dx(x), dw(w), db(b), dy(want.size());
  run(g, {{dnn::uid::x, dx.data()},
          {dnn::uid::w, dw.data()},
          {dnn::uid::bias, db.data()},
          {dnn::uid::y, dy.data()}});
  expect_close(dy.to_host(), want, 1e-4F, 1e-4F, "y");
  std::printf("engine: %s\n", graphs_->engine(g).c_str());
}

TEST_F(CudnnGraphTest, ConvBackwardDataAndFilterMatchCpu) {
  const rig::backend::Conv2dShape s = test_conv();
  const dnn::Graph dgrad = dnn::conv2d_backward_data_graph(s);
  const dnn::Graph wgrad = dnn::conv2d_backward_filter_graph(s);
  const auto x = random_values(count(dgrad.tensor(dnn::uid::dx)->dims), 4);
  const auto w = random_values(count(dgrad.tensor(dnn::uid::w)->dims), 5);
  const auto gy = random_values(count(dgrad.tensor(dnn::uid::dy)->dims), 6);
  std::vector<float> want_dx(x.size()), want_dw(w.size()),
      want_db(static_cast<std::size_t>(s.c_out));
  rig::backend::cpu_backend().conv2d_backward(s, x.data(), w.data(), gy.data(), want_dx.data(),
                                              want_dw.data(), want_db.data());
  DeviceArray<float> d_x(x), d_w(w), d_gy(gy), d_dx(x.size()), d_dw(w.size());
  run(dgrad, {{dnn::uid::dy, d_gy.data()}, {dnn::uid::w, d_w.data()}, {dnn::uid::dx, d_dx.data()}});
  run(wgrad, {{dnn::uid::x, d_x.data()}, {dnn::uid::dy, d_gy.data()}, {dnn::uid::dw, d_dw.data()}});
  expect_close(d_dx.to_host(), want_dx, 1e-4F, 1e-4F, "dx");
  expect_close(d_dw.to_host(), want_dw, 1e-4F, 1e-3F, "dw");
}

TEST_F(CudnnGraphTest, PlansAreCachedByKey) {
  const rig::backend::Conv2dShape s = test_conv();
  const std::size_t before = graphs_->plans_built();
  graphs_->workspace_bytes(dnn::conv2d_forward_graph(s));
  graphs_->workspace_bytes(dnn::conv2d_forward_graph(s));
  EXPECT_EQ(graphs_->plans_built(), before + 1);
  graphs_->workspace_bytes(dnn::conv2d_backward_data_graph(s));
  EXPECT_EQ(graphs_->plans_built(), before + 2);
}

TEST_F(CudnnGraphTest, AutotunedConvolutionsKeepAWorkingEngineAndMatchCpu) {
  // RIG_CUDNN_AUTOTUNE's path: each convolution's first call times the
  // heuristics' usable engines on its own data and keeps the fastest; later
  // calls reuse it. The results are the CPU's within the usual tolerance.
  rig_gpu_test::EventTimer timer;  // the graphs run on its stream
  graphs_->autotune_with([&timer](const std::function<void()>& work) {
    return timer.median_ms(0, 1, [&work](int) { work(); });
  });
  const rig::backend::Conv2dShape s = test_conv();
  const dnn::Graph fprop = dnn::conv2d_forward_graph(s);
  const dnn::Graph wgrad = dnn::conv2d_backward_filter_graph(s);
  const auto x = random_values(count(fprop.tensor(dnn::uid::x)->dims), 7);
  const auto w = random_values(count(fprop.tensor(dnn::uid::w)->dims), 8);
  const auto gy = random_values(count(fprop.tensor(dnn::uid::y)->dims), 9);
  std::vector<float> want_y(gy.size()), want_dx(x.size()), want_dw(w.size()),
      want_db(static_cast<std::size_t>(s.c_out));
  rig::backend::cpu_backend().conv2d_forward(s, x.data(), w.data(), nullptr, want_y.data());
  rig::backend::cpu_backend().conv2d_backward(s, x.data(), w.data(), gy.data(), want_dx.data(),
                                              want_dw.data(), want_db.data());
  DeviceArray<float> d_x(x), d_w(w), d_gy(gy), d_y(gy.size()), d_dw(w.size());
  for (int call = 0; call < 2; ++call) {
    run_on(timer.stream(), fprop,
           {{dnn::uid::x, d_x.data()}, {dnn::uid::w, d_w.data()}, {dnn::uid::y, d_y.data()}});
    run_on(timer.stream(), wgrad,
           {{dnn::uid::x, d_x.data()}, {dnn::uid::dy, d_gy.data()}, {dnn::uid::dw, d_dw.data()}});
    EXPECT_EQ(graphs_->plans_autotuned(), 2U) << "call " << call;
    expect_close(d_y.to_host(), want_y, 1e-4F, 1e-4F, "y");
    expect_close(d_dw.to_host(), want_dw, 1e-4F, 1e-3F, "dw");
  }
  EXPECT_NE(graphs_->engine(fprop).find("autotuned"), std::string::npos) << graphs_->engine(fprop);
  std::printf("fprop engine: %s\nwgrad engine: %s\n", graphs_->engine(fprop).c_str(),
              graphs_->engine(wgrad).c_str());
}

TEST_F(CudnnGraphTest, AutotunedAccumulatingConvolutionsAddOnce) {
  // A gradient added to the one already there (beta 1) is autotuned too: its
  // candidates run on copies of the output in the workspace, so each call
  // adds its gradient exactly once, the first (timed) call included.
  rig_gpu_test::EventTimer timer;
  graphs_->autotune_with([&timer](const std::function<void()>& work) {
    return timer.median_ms(0, 1, [&work](int) { work(); });
  });
  const rig::backend::Conv2dShape s = test_conv();
  const dnn::Graph wgrad = dnn::conv2d_backward_filter_graph(s, dnn::ConvType::f32, true);
  const dnn::Graph dgrad = dnn::conv2d_backward_data_graph(s, dnn::ConvType::f32, true);
  const auto x = random_values(count(wgrad.tensor(dnn::uid::x)->dims), 11);
  const auto w = random_values(count(wgrad.tensor(dnn::uid::dw)->dims), 12);
  const auto gy = random_values(count(wgrad.tensor(dnn::uid::dy)->dims), 13);
  const auto held_w = random_values(w.size(), 14), held_x = random_values(x.size(), 15);
  std::vector<float> want_dx(x.size()), want_dw(w.size()),
      want_db(static_cast<std::size_t>(s.c_out));
  rig::backend::cpu_backend().conv2d_backward(s, x.data(), w.data(), gy.data(), want_dx.data(),
                                              want_dw.data(), want_db.data());
  DeviceArray<float> d_x(x), d_w(w), d_gy(gy), d_dw(held_w), d_dx(held_x);
  const std::size_t timing_workspace = graphs_->workspace_bytes(wgrad);
  for (int call = 1; call <= 2; ++call) {
    run_on(timer.stream(), wgrad,
           {{dnn::uid::x, d_x.data()}, {dnn::uid::dy, d_gy.data()}, {dnn::uid::dw, d_dw.data()}});
    run_on(timer.stream(), dgrad,
           {{dnn::uid::dy, d_gy.data()}, {dnn::uid::w, d_w.data()}, {dnn::uid::dx, d_dx.data()}});
    std::vector<float> sum_w(w.size()), sum_x(x.size());
    for (std::size_t i = 0; i < w.size(); ++i) sum_w[i] = held_w[i] + call * want_dw[i];
    for (std::size_t i = 0; i < x.size(); ++i) sum_x[i] = held_x[i] + call * want_dx[i];
    expect_close(d_dw.to_host(), sum_w, 1e-4F, 1e-3F, "dw added");
    expect_close(d_dx.to_host(), sum_x, 1e-4F, 1e-4F, "dx added");
    EXPECT_EQ(graphs_->plans_autotuned(), 2U) << "call " << call;
  }
  EXPECT_NE(graphs_->engine(wgrad).find("autotuned"), std::string::npos) << graphs_->engine(wgrad);
  // The copies are needed only while timing.
  EXPECT_LT(graphs_->workspace_bytes(wgrad), timing_workspace);
}

TEST_F(CudnnGraphTest, BatchNormTrainingMatchesCpu) {
  const rig::backend::BatchNormShape s{16, 8, 49};
  const std::size_t n = static_cast<std::size_t>(s.n * s.c * s.inner);
  const auto c = static_cast<std::size_t>(s.c);
  const auto x = random_values(n, 7, 2.0F);
  const auto gamma = random_values(c, 8);
  const auto beta = random_values(c, 9);
  const auto gy = random_values(n, 10);
  std::vector<float> running_mean(c, 0.5F), running_var(c, 2.0F);
  const float eps = 1e-5F, momentum = 0.1F;
  const float count_per_channel = static_cast<float>(s.n * s.inner);
  // The CPU: stats, prepare, apply, backward.
  rig::backend::Backend& cpu = rig::backend::cpu_backend();
  std::vector<float> mean(c), var(c), invstd(c), scale(c), shift(c), y(n);
  std::vector<float> cpu_rm = running_mean, cpu_rv = running_var;
  cpu.batch_norm_stats(s, x.data(), mean.data(), var.data());
  rig::backend::BatchNormPrepare p;
  p.c = s.c;
  p.momentum = momentum;
  p.eps = eps;
  p.unbias = count_per_channel / (count_per_channel - 1.0F);
  p.mean = mean.data();
  p.var = var.data();
  p.running_mean = cpu_rm.data();
  p.running_var = cpu_rv.data();
  p.gamma = gamma.data();
  p.beta = beta.data();
  p.invstd = invstd.data();
  p.scale = scale.data();
  p.shift = shift.data();
  cpu.batch_norm_prepare(p);
  cpu.batch_norm_apply(s, x.data(), scale.data(), shift.data(), y.data());
  std::vector<float> dx(n), dgamma(c), dbeta(c);
  cpu.batch_norm_backward(s, x.data(), gy.data(), mean.data(), invstd.data(), gamma.data(), true,
                          dx.data(), dgamma.data(), dbeta.data());
  // cuDNN.
  const dnn::Graph fwd = dnn::batch_norm_forward_training_graph(s, true);
  DeviceArray<float> d_x(x), d_gamma(gamma), d_beta(beta), d_y(n), d_mean(c), d_inv(c),
      d_rm(running_mean), d_rv(running_var), d_gy(gy), d_dx(n), d_dgamma(c), d_dbeta(c);
  run(fwd, {{dnn::uid::x, d_x.data()},
            {dnn::uid::bn_scale, d_gamma.data()},
            {dnn::uid::bn_bias, d_beta.data()},
            {dnn::uid::bn_epsilon, &eps},
            {dnn::uid::bn_momentum, &momentum},
            {dnn::uid::y, d_y.data()},
            {dnn::uid::bn_mean, d_mean.data()},
            {dnn::uid::bn_inv_variance, d_inv.data()},
            {dnn::uid::bn_running_mean_in, d_rm.data()},
            {dnn::uid::bn_running_var_in, d_rv.data()},
            {dnn::uid::bn_running_mean_out, d_rm.data()},
            {dnn::uid::bn_running_var_out, d_rv.data()}});
  expect_close(d_y.to_host(), y, 1e-4F, 1e-4F, "y");
  expect_close(d_mean.to_host(), mean, 1e-5F, 1e-5F, "mean");
  expect_close(d_inv.to_host(), invstd, 1e-4F, 1e-5F, "inv_variance");
  expect_close(d_rm.to_host(), cpu_rm, 1e-5F, 1e-5F, "running_mean");
  expect_close(d_rv.to_host(), cpu_rv, 1e-4F, 1e-5F, "running_var");
  const dnn::Graph bwd = dnn::batch_norm_backward_graph(s);
  run(bwd, {{dnn::uid::x, d_x.data()},
            {dnn::uid::dy, d_gy.data()},
            {dnn::uid::bn_scale, d_gamma.data()},
            {dnn::uid::bn_mean, d_mean.data()},
            {dnn::uid::bn_inv_variance, d_inv.data()},
            {dnn::uid::dx, d_dx.data()},
            {dnn::uid::bn_dscale, d_dgamma.data()},
            {dnn::uid::bn_dbias, d_dbeta.data()}});
  expect_close(d_dx.to_host(), dx, 1e-3F, 1e-4F, "dx");
  expect_close(d_dgamma.to_host(), dgamma, 1e-4F, 1e-4F, "dgamma");
  expect_close(d_dbeta.to_host(), dbeta, 1e-4F, 1e-4F, "dbeta");
}

namespace {

// bf16 attention against the CPU's f32 attention on the same (bf16-rounded)
// values, with bf16 products as the GPU has them.
void attention_case(CudnnGraphTest& test, bool causal, bool dropout,
                    void (CudnnGraphTest::*run)(const dnn::Graph&,
                                                const std::vector<dnn::Binding>&)) {
  dnn::AttentionGraphShape s = dnn::AttentionGraphShape::packed(2, 4, 64, 64, 64);
  s.type = dnn::ConvType::bf16;
  s.causal = causal;
  s.dropout = dropout ? dnn::AttentionDropout::mask : dnn::AttentionDropout::none;
  const std::size_t n = static_cast<std::size_t>(s.b * s.h * s.tq * s.d);
  const std::size_t probs = static_cast<std::size_t>(s.b * s.h * s.tq * s.tk);
  std::vector<float> q = random_values(n, 11), k = random_values(n, 12), v = random_values(n, 13);
  std::vector<std::uint16_t> qb(n), kb(n), vb(n);
  for (std::size_t i = 0; i < n; ++i) {
    qb[i] = rig::float_to_bfloat16(q[i]);
    kb[i] = rig::float_to_bfloat16(k[i]);
    vb[i] = rig::float_to_bfloat16(v[i]);
    q[i] = rig::bfloat16_to_float(qb[i]);
    k[i] = rig::bfloat16_to_float(kb[i]);
    v[i] = rig::bfloat16_to_float(vb[i]);
  }
  const float p_drop = 0.25F;
  std::vector<std::uint8_t> keep(probs, 1);
  std::vector<std::uint16_t> keep_bf16(probs, rig::float_to_bfloat16(1.0F));
  std::mt19937 gen(14);
  for (std::size_t i = 0; i < probs && dropout; ++i) {
    keep[i] = std::uniform_real_distribution<float>(0.0F, 1.0F)(gen) >= p_drop ? 1 : 0;
    keep_bf16[i] = rig::float_to_bfloat16(static_cast<float>(keep[i]));
  }
  rig::backend::AttentionShape a;
  a.b = s.b;
  a.h = s.h;
  a.tq = s.tq;
  a.tk = s.tk;
  a.d = s.d;
  a.scale = 1.0F / std::sqrt(static_cast<float>(s.d));
  a.causal = causal;
  a.keep = dropout ? keep.data() : nullptr;
  a.keep_scale = 1.0F / (1.0F - p_drop);
  a.bf16_products = true;
  const rig::backend::HeadStrides hs{s.h * s.tq * s.d, s.tq * s.d, s.d};
  std::vector<float> want(n);
  rig::backend::cpu_backend().attention_forward(a, q.data(), hs, k.data(), hs, v.data(), hs,
                                                want.data(), hs, nullptr);
  const dnn::Graph g = dnn::attention_forward_graph(s);
  DeviceArray<std::uint16_t> dq(qb), dk(kb), dv(vb), dout(n), dkeep(keep_bf16);
  DeviceArray<float> stats(static_cast<std::size_t>(s.b * s.h * s.tq));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<dnn::Binding> bindings{
      {dnn::uid::q, dq.data()},        {dnn::uid::k, dk.data()},
      {dnn::uid::v, dv.data()},        {dnn::uid::o, dout.data()},
      {dnn::uid::stats, stats.data()}, {dnn::uid::attn_scale, &a.scale},
      {dnn::uid::neg_inf, &neg_inf}};
  if (dropout) {
    bindings.push_back({dnn::uid::keep, dkeep.data()});
    bindings.push_back({dnn::uid::dropout_scale, &a.keep_scale});
  }
  (test.*run)(g, bindings);
  std::vector<float> got(n);
  const std::vector<std::uint16_t> out = dout.to_host();
  for (std::size_t i = 0; i < n; ++i) got[i] = rig::bfloat16_to_float(out[i]);
  expect_close(got, want, 2e-2F, 2e-2F, "out");
}

}  // namespace

TEST_F(CudnnGraphTest, AttentionForwardMatchesCpu) {
  attention_case(*this, false, false, &CudnnGraphTest::run);
}

TEST_F(CudnnGraphTest, CausalAttentionForwardMatchesCpu) {
  attention_case(*this, true, false, &CudnnGraphTest::run);
}

TEST_F(CudnnGraphTest, AttentionWithRigsDropoutMaskMatchesCpu) {
  attention_case(*this, false, true, &CudnnGraphTest::run);
}

// ---- Attention backward ----------------------------------------------------------------

namespace {

struct BackwardCase {
  bool causal = false;
  bool padding = false;
  dnn::AttentionDropout dropout = dnn::AttentionDropout::none;
  dnn::ConvType type = dnn::ConvType::bf16;
};

// f16 / bf16 bits of x, and x rounded to them.
std::uint16_t to_half_bits(float x, dnn::ConvType type) {
  return type == dnn::ConvType::bf16 ? rig::float_to_bfloat16(x) : rig::float_to_half(x);
}
float from_half_bits(std::uint16_t x, dnn::ConvType type) {
  return type == dnn::ConvType::bf16 ? rig::bfloat16_to_float(x) : rig::half_to_float(x);
}

struct HalfTensor {
  std::vector<float> values;  // rounded
  std::vector<std::uint16_t> bits;
};

HalfTensor half_values(std::vector<float> x, dnn::ConvType type) {
  HalfTensor t;
  t.bits.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    t.bits[i] = to_half_bits(x[i], type);
    x[i] = from_half_bits(t.bits[i], type);
  }
  t.values = std::move(x);
  return t;
}

std::vector<float> to_floats(const std::vector<std::uint16_t>& bits, dnn::ConvType type) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = from_half_bits(bits[i], type);
  return out;
}

// Compares [B, H, T, D] tensors on the rows t < valid[b]; the tolerance's
// absolute part is relative to the largest |want|.
void expect_rows_close(const std::vector<float>& got, const std::vector<float>& want,
                       std::int64_t b_count, std::int64_t h_count, std::int64_t t_count,
                       std::int64_t d_count, const std::vector<std::int32_t>& valid, float rel,
                       float abs_of_max, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float max = 0.0F;
  for (float w : want) max = std::max(max, std::fabs(w));
  const float abs = abs_of_max * max;
  std::size_t bad = 0, compared = 0;
  // The largest error and where, printed for every tensor (pass or fail): a
  // forward that is off shows in `out` before it shows in the gradients.
  float worst = -1.0F;
  std::string worst_at;
  for (std::int64_t b = 0; b < b_count; ++b) {
    for (std::int64_t h = 0; h < h_count; ++h) {
      for (std::int64_t t = 0; t < valid[static_cast<std::size_t>(b)]; ++t) {
        for (std::int64_t d = 0; d < d_count; ++d) {
          const auto i = static_cast<std::size_t>(((b * h_count + h) * t_count + t) * d_count + d);
          ++compared;
          if (std::fabs(got[i] - want[i]) > worst) {
            worst = std::fabs(got[i] - want[i]);
            worst_at = "b " + std::to_string(b) + " h " + std::to_string(h) + " t " +
                       std::to_string(t) + " d " + std::to_string(d) + ": " +
                       std::to_string(got[i]) + " vs " + std::to_string(want[i]);
          }
          if (!(std::fabs(got[i] - want[i]) <= abs + rel * std::fabs(want[i]))) {
            if (++bad <= 5) {
              ADD_FAILURE() << what << "[b " << b << " h " << h << " t " << t << " d " << d
                            << "]: " << got[i] << " vs " << want[i] << " (max |want| " << max
                            << ")";
            }
          }
        }
      }
    }
  }
  std::printf("%s: %zu of %zu values off; largest error %g at [%s] (max |want| %g)\n", what, bad,
              compared, static_cast<double>(worst), worst_at.c_str(), static_cast<double>(max));
  EXPECT_EQ(bad, 0U) << what << ": " << bad << " of " << compared << " values off";
  EXPECT_GT(max, 0.0F) << what << " is all zeros";
}

class AttentionBackwardTest : public CudnnGraphTest {
 protected:
  // Runs forward then backward on the GPU and compares dq, dk, dv with the
  // CPU's attention_backward from the same inputs (and, for Philox, the
  // keep bits cuDNN drew).
  void check(const BackwardCase& c) {
    dnn::AttentionGraphShape s = dnn::AttentionGraphShape::packed(2, 4, 64, 64, 64);
    s.type = c.type;
    s.causal = c.causal;
    s.padding = c.padding;
    s.dropout = c.dropout;
    const float p_drop = c.dropout == dnn::AttentionDropout::none ? 0.0F : 0.25F;
    s.dropout_probability = p_drop;
    const std::size_t n = static_cast<std::size_t>(s.b * s.h * s.tq * s.d);
    const std::size_t probs = static_cast<std::size_t>(s.b * s.h * s.tq * s.tk);
    const std::vector<std::int32_t> len_q =
        c.padding ? std::vector<std::int32_t>{64, 41} : std::vector<std::int32_t>{64, 64};
    const std::vector<std::int32_t> len_kv =
        c.padding ? std::vector<std::int32_t>{64, 29} : std::vector<std::int32_t>{64, 64};
    const HalfTensor q = half_values(random_values(n, 21), c.type);
    const HalfTensor k = half_values(random_values(n, 22), c.type);
    const HalfTensor v = half_values(random_values(n, 23), c.type);
    std::vector<float> g = random_values(n, 24);
    for (std::int64_t b = 0; b < s.b; ++b) {  // no gradient into padded query rows
      for (std::int64_t h = 0; h < s.h; ++h) {
        for (std::int64_t i = len_q[static_cast<std::size_t>(b)]; i < s.tq; ++i) {
          for (std::int64_t d = 0; d < s.d; ++d) {
            g[static_cast<std::size_t>(((b * s.h + h) * s.tq + i) * s.d + d)] = 0.0F;
          }
        }
      }
    }
    const HalfTensor dout = half_values(g, c.type);
    // Dropout: cuDNN's Philox bits (read back below). The backward graph
    // rejects rig's keep mask (see attention_backward_graph).
    std::vector<std::uint8_t> keep(probs, 1);
    const float scale = 1.0F / std::sqrt(static_cast<float>(s.d));
    const float keep_scale = 1.0F / (1.0F - p_drop);
    const float keep_scale_inv = 1.0F - p_drop;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const std::vector<std::int64_t> seed{12345}, offset{678};
    DeviceArray<std::uint16_t> d_q(q.bits), d_k(k.bits), d_v(v.bits), d_out(n), d_dout(dout.bits),
        d_dq(n), d_dk(n), d_dv(n);
    DeviceArray<float> d_stats(static_cast<std::size_t>(s.b * s.h * s.tq));
    DeviceArray<std::int32_t> d_len_q(len_q), d_len_kv(len_kv);
    DeviceArray<std::int64_t> d_seed(seed), d_offset(offset);
    std::vector<dnn::Binding> common{{dnn::uid::q, d_q.data()},
                                     {dnn::uid::k, d_k.data()},
                                     {dnn::uid::o, d_out.data()},
                                     {dnn::uid::stats, d_stats.data()},
                                     {dnn::uid::attn_scale, &scale},
                                     {dnn::uid::neg_inf, &neg_inf},
                                     {dnn::uid::seq_len_q, d_len_q.data()},
                                     {dnn::uid::seq_len_kv, d_len_kv.data()},
                                     {dnn::uid::seed, d_seed.data()},
                                     {dnn::uid::offset, d_offset.data()},
                                     {dnn::uid::dropout_scale, &keep_scale},
                                     {dnn::uid::dropout_scale_inv, &keep_scale_inv}};
    const auto with = [&](std::vector<dnn::Binding> extra) {
      std::vector<dnn::Binding> all = common;
      all.insert(all.end(), extra.begin(), extra.end());
      return all;  // run_bound passes on what the graph declares
    };
    const dnn::Graph fwd = dnn::attention_forward_graph(s);
    const dnn::Graph bwd = dnn::attention_backward_graph(s);
    if (c.dropout == dnn::AttentionDropout::philox) {
      // cuDNN's keep bits: with v = I (tk == d) out is the dropped weights,
      // zero exactly where dropped. Same seed and offset: the same bits.
      std::vector<float> eye(n, 0.0F);
      for (std::int64_t bh = 0; bh < s.b * s.h; ++bh) {
        for (std::int64_t j = 0; j < s.tk; ++j) {
          eye[static_cast<std::size_t>((bh * s.tk + j) * s.d + j)] = 1.0F;
        }
      }
      const HalfTensor identity = half_values(eye, c.type);
      DeviceArray<std::uint16_t> d_eye(identity.bits);
      run_bound(fwd, with({{dnn::uid::v, d_eye.data()}}));
      const std::vector<float> weights = to_floats(d_out.to_host(), c.type);
      for (std::size_t i = 0; i < probs; ++i) keep[i] = weights[i] != 0.0F ? 1 : 0;
    }
    run_bound(fwd, with({{dnn::uid::v, d_v.data()}}));
    const std::vector<dnn::Binding> backward_bindings = with({{dnn::uid::v, d_v.data()},
                                                              {dnn::uid::d_o, d_dout.data()},
                                                              {dnn::uid::dq, d_dq.data()},
                                                              {dnn::uid::dk, d_dk.data()},
                                                              {dnn::uid::dv, d_dv.data()}});
    run_bound(bwd, backward_bindings);
    const std::vector<std::uint16_t> dq_bits = d_dq.to_host(), dk_bits = d_dk.to_host(),
                                     dv_bits = d_dv.to_host();
    // Deterministic: a second run gives the same bits.
    run_bound(bwd, backward_bindings);
    EXPECT_TRUE(d_dq.to_host() == dq_bits) << "dq differs between two runs";
    EXPECT_TRUE(d_dk.to_host() == dk_bits) << "dk differs between two runs";
    EXPECT_TRUE(d_dv.to_host() == dv_bits) << "dv differs between two runs";
    std::printf("attention backward engine: %s, workspace %zu bytes\n",
                graphs_->engine(bwd).c_str(), graphs_->workspace_bytes(bwd));

    // The CPU from the same inputs: mask [B, 1, Tq, Tk] for the padding.
    std::vector<std::uint8_t> allowed(static_cast<std::size_t>(s.b * s.tq * s.tk));
    for (std::int64_t b = 0; b < s.b; ++b) {
      for (std::int64_t i = 0; i < s.tq; ++i) {
        for (std::int64_t j = 0; j < s.tk; ++j) {
          allowed[static_cast<std::size_t>((b * s.tq + i) * s.tk + j)] =
              i < len_q[static_cast<std::size_t>(b)] && j < len_kv[static_cast<std::size_t>(b)];
        }
      }
    }
    rig::backend::AttentionShape a;
    a.b = s.b;
    a.h = s.h;
    a.tq = s.tq;
    a.tk = s.tk;
    a.d = s.d;
    a.scale = scale;
    a.causal = c.causal;
    if (c.padding) {
      a.mask = allowed.data();
      a.mask_strides = {s.tq * s.tk, 0, s.tk, 1};
    }
    if (c.dropout != dnn::AttentionDropout::none) {
      a.keep = keep.data();
      a.keep_scale = keep_scale;
    }
    a.bf16_products = c.type == dnn::ConvType::bf16;
    const rig::backend::HeadStrides hs{s.h * s.tq * s.d, s.tq * s.d, s.d};
    std::vector<float> out(n), p(probs), dq(n), dk(n), dv(n);
    rig::backend::Backend& cpu = rig::backend::cpu_backend();
    cpu.attention_forward(a, q.values.data(), hs, k.values.data(), hs, v.values.data(), hs,
                          out.data(), hs, p.data());
    cpu.attention_backward(a, q.values.data(), hs, k.values.data(), hs, v.values.data(), hs,
                           p.data(), dout.values.data(), hs, dq.data(), hs, dk.data(), hs,
                           dv.data(), hs);
    expect_rows_close(to_floats(d_out.to_host(), c.type), out, s.b, s.h, s.tq, s.d, len_q, 3e-2F,
                      2e-2F, "out");
    expect_rows_close(to_floats(dq_bits, c.type), dq, s.b, s.h, s.tq, s.d, len_q, 5e-2F, 2e-2F,
                      "dq");
    expect_rows_close(to_floats(dk_bits, c.type), dk, s.b, s.h, s.tk, s.d, len_kv, 5e-2F, 2e-2F,
                      "dk");
    expect_rows_close(to_floats(dv_bits, c.type), dv, s.b, s.h, s.tk, s.d, len_kv, 5e-2F, 2e-2F,
                      "dv");
  }

  // run() with only the bindings the graph declares.
  void run_bound(const dnn::Graph& graph, const std::vector<dnn::Binding>& all) {
    std::vector<dnn::Binding> bound;
    for (const dnn::Binding& b : all) {
      const dnn::TensorDesc* t = graph.tensor(b.uid);
      if (t != nullptr && !t->is_virtual) bound.push_back(b);
    }
    run(graph, bound);
  }
};

}  // namespace

TEST_F(AttentionBackwardTest, PlainMatchesCpu) {
  check({});
}

TEST_F(AttentionBackwardTest, CausalMatchesCpu) {
  check({.causal = true});
}

TEST_F(AttentionBackwardTest, PaddingMatchesCpuOnValidRows) {
  check({.padding = true});
}

TEST_F(AttentionBackwardTest, CausalPaddingF16MatchesCpuOnValidRows) {
  check({.causal = true, .padding = true, .type = dnn::ConvType::f16});
}

TEST_F(AttentionBackwardTest, PhiloxDropoutMatchesCpuWithCudnnsBits) {
  check({.padding = true, .dropout = dnn::AttentionDropout::philox});
}
