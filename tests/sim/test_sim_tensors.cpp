// Tensors and ops on the sim device (core/sim): every op, forward and
// backward, gives the CPU's bits when its inputs live in memory the host
// cannot touch; copies between devices; mixing devices is a clear error;
// reading a sim tensor's data from the host faults.
#include <gtest/gtest.h>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fault_death.hpp"
#include "rig/batch.hpp"
#include "rig/ops.hpp"
#include "rig/tensor.hpp"
#include "test_tensor_util.hpp"

namespace rig {
namespace {

// Deterministic values in [-1, 1), different for every (seed, index).
std::vector<float> values(std::int64_t n, std::uint32_t seed) {
  std::vector<float> out(static_cast<std::size_t>(n));
  std::uint32_t state = seed * 2654435761U + 1U;
  for (float& v : out) {
    state = state * 1664525U + 1013904223U;
    v = static_cast<float>(state >> 8U) / static_cast<float>(1U << 23U) - 1.0F;
  }
  return out;
}

std::int64_t numel_of(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

// One op applied to inputs that live on some device; returns the output.
struct OpCase {
  std::string name;
  std::vector<Shape> input_shapes;  // f32 inputs, each differentiated
  std::function<Tensor(const std::vector<Tensor>&, Device)>
      apply;  // may build extra tensors on Device
};

std::vector<std::int64_t> ids(std::vector<std::int64_t> v) {
  return v;
}

std::vector<OpCase> op_cases() {
  const RandomKey key{7, 3, 0, 11};
  return {
      {"matmul", {{3, 4}, {4, 5}}, [](auto& in, Device) { return ops::matmul(in[0], in[1]); }},
      {"matmul_transposed",
       {{4, 3}, {5, 4}},
       [](auto& in, Device) { return ops::matmul(in[0], in[1], true, true); }},
      {"batched_matmul",
       {{2, 3, 4}, {2, 4, 2}},
       [](auto& in, Device) { return ops::matmul(in[0], in[1]); }},
      {"linear_gelu",
       {{6, 4}, {5, 4}, {5}},
       [](auto& in, Device) { return ops::linear(in[0], in[1], in[2], Activation::gelu); }},
      {"linear_relu",
       {{6, 4}, {5, 4}, {5}},
       [](auto& in, Device) { return ops::linear(in[0], in[1], in[2], Activation::relu); }},
      {"broadcast_arithmetic",
       {{3, 1, 4}, {2, 1}, {3, 2, 4}},
       [](auto& in, Device) {
         return ops::div(ops::mul(ops::sub(ops::add(in[0], in[1]), in[2]), in[1]),
                         ops::add_scalar(ops::exp(in[2]), 1.0F));
       }},
      {"unary_chain",
       {{5, 3}},
       [](auto& in, Device) {
         const Tensor positive = ops::add_scalar(ops::mul(in[0], in[0]), 0.5F);
         return ops::add(
             ops::add(ops::tanh(in[0]), ops::sigmoid(in[0])),
             ops::add(ops::mul(ops::log(positive), ops::rsqrt(positive)),
                      ops::add(ops::pow_scalar(positive, 1.5F),
                               ops::add(ops::neg(ops::relu(in[0])), ops::sqrt(positive)))));
       }},
      {"reductions",
       {{2, 3, 4}},
       [](auto& in, Device) {
         return ops::add(ops::sum(in[0], {1}, true),
                         ops::add(ops::mean(in[0], {0, 2}, true), ops::max(in[0], 1, true)));
       }},
      {"softmax_masked",
       {{2, 5}},
       [](auto& in, Device d) {
         const Tensor mask =
             Tensor::from_vector(std::vector<std::uint8_t>{1, 1, 0, 1, 0}, {1, 5}, d);
         return ops::add(ops::softmax(in[0], -1, mask), ops::log_softmax(in[0], 0));
       }},
      {"layer_norm",
       {{4, 6}, {6}, {6}},
       [](auto& in, Device) { return ops::layer_norm(in[0], in[1], in[2]); }},
      {"batch_norm_training",
       {{3, 2, 2, 2}, {2}, {2}},
       [](auto& in, Device d) {
         const Tensor mean = Tensor::zeros({2}, DType::f32, d);
         const Tensor var = Tensor::ones({2}, DType::f32, d);
         const Tensor y = ops::batch_norm(in[0], in[1], in[2], mean, var, true);
         // The running statistics were updated in place: part of the result.
         return ops::add(y, ops::add(mean.reshape({1, 2, 1, 1}), var.reshape({1, 2, 1, 1})));
       }},
      {"embedding_and_index_select",
       {{5, 3}},
       [](auto& in, Device d) {
         const Tensor i = Tensor::from_vector(ids({4, 0, 4, 2}), {2, 2}, d);
         const Tensor k = Tensor::from_vector(ids({1, 3}), {2}, d);
         return ops::add(ops::embedding(in[0], i).reshape({4, 3}),
                         ops::concat({ops::index_select(in[0], 0, k), in[0].slice(0, 0, 2)}, 0));
       }},
      {"dropout", {{4, 8}}, [key](auto& in, Device) { return ops::dropout(in[0], 0.3F, key); }},
      {"attention_causal_dropout",
       {{1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}},
       [key](auto& in, Device d) {
         ops::AttentionOptions options;
         options.mask =
             Tensor::from_vector(std::vector<std::uint8_t>{1, 1, 1, 1, 0}, {1, 1, 1, 5}, d);
         options.causal = true;
         options.dropout_p = 0.2F;
         options.key = key;
         return ops::scaled_dot_product_attention(in[0], in[1], in[2], options);
       }},
      {"conv_pool",
       {{2, 2, 5, 5}, {3, 2, 3, 3}, {3}},
       [](auto& in, Device) {
         ops::Conv2dOptions conv;
         conv.pad_h = conv.pad_w = 1;
         const Tensor y = ops::conv2d(in[0], in[1], in[2], conv);
         ops::Pool2dOptions pool;
         pool.pad_h = pool.pad_w = 1;
         return ops::add(ops::max_pool2d(y, pool), ops::avg_pool2d(y, pool))
             .reshape({2, 27})
             .slice(1, 0, 3)
             .contiguous();
       }},
      {"global_avg_pool",
       {{2, 3, 2, 2}},
       [](auto& in, Device) { return ops::global_avg_pool2d(in[0]); }},
      {"gather_where_masked_fill",
       {{3, 4}, {3, 4}},
       [](auto& in, Device d) {
         const Tensor index = Tensor::from_vector(ids({3, 0, 1, 1, 2, 2}), {3, 2}, d);
         const Tensor condition = ops::less(in[0], in[1]);
         const Tensor picked =
             ops::where(condition, in[0], ops::masked_fill(in[1], condition, 0.5F));
         return ops::add(ops::gather(picked, 1, index),
                         in[0].transpose(0, 1).slice(0, 0, 2).transpose(0, 1));
       }},
      {"cross_entropy",
       {{4, 5}},
       [](auto& in, Device d) {
         return ops::cross_entropy(in[0], Tensor::from_vector(ids({0, 4, 2, 2}), {4}, d), 0.1F);
       }},
      {"padded_cross_entropy",
       {{2, 3, 6}},
       [](auto& in, Device d) {
         const Tensor labels = Tensor::from_vector(ids({1, 5, 0, 2, 0, 0}), {2, 3}, d);
         const Tensor weights =
             Tensor::from_vector(std::vector<float>{1, 1, 0, 1, 0, 0}, {2, 3}, d);
         return ops::padded_cross_entropy(in[0], labels, weights, 0.1F);
       }},
      {"mse", {{3, 3}, {3, 3}}, [](auto& in, Device) { return ops::mse_loss(in[0], in[1]); }},
  };
}

struct OpResult {
  std::vector<float> output;
  std::vector<std::vector<float>> grads;
};

// Runs `op` on `device`: inputs from the same values on every device, the
// output's gradient from a fixed upstream, everything read back through to_host.
OpResult run_case(const OpCase& op, Device device) {
  std::vector<Tensor> inputs;
  std::uint32_t seed = 1;
  for (const Shape& shape : op.input_shapes) {
    Tensor t = Tensor::from_vector(values(numel_of(shape), seed++), shape, device);
    t.set_requires_grad(true);
    inputs.push_back(t);
  }
  const Tensor out = op.apply(inputs, device);
  EXPECT_EQ(out.device(), device) << op.name;
  const Tensor upstream = Tensor::from_vector(values(out.numel(), 99), out.shape(), device);
  ops::sum(ops::mul(out, upstream)).backward();
  OpResult result{out.to_host().to_vector(), {}};
  for (const Tensor& t : inputs) {
    result.grads.push_back(t.grad().defined() ? t.grad().to_host().to_vector()
                                              : std::vector<float>{});
  }
  return result;
}

class SimOps : public testing::TestWithParam<OpCase> {};

TEST_P(SimOps, GiveTheCpusBitsForwardAndBackward) {
  const OpResult cpu = run_case(GetParam(), Device::cpu());
  const OpResult sim = run_case(GetParam(), Device::sim());
  ASSERT_EQ(cpu.output.size(), sim.output.size());
  EXPECT_EQ(0, std::memcmp(cpu.output.data(), sim.output.data(), cpu.output.size() * sizeof(float)))
      << "forward differs";
  ASSERT_EQ(cpu.grads.size(), sim.grads.size());
  for (std::size_t i = 0; i < cpu.grads.size(); ++i) {
    ASSERT_FALSE(cpu.grads[i].empty()) << "input " << i << " got no gradient";
    ASSERT_EQ(cpu.grads[i].size(), sim.grads[i].size());
    EXPECT_EQ(0, std::memcmp(cpu.grads[i].data(), sim.grads[i].data(),
                             cpu.grads[i].size() * sizeof(float)))
        << "gradient of input " << i << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, SimOps, testing::ValuesIn(op_cases()),
                         [](const auto& info) { return info.param.name; });

// The ops with no gradient: selections, comparisons, the optimizer updates
// and the gradient statistics, on both devices from the same values.
std::vector<std::vector<float>> run_updates(Device device) {
  const auto on = [&](std::uint32_t seed, std::int64_t n) {
    return Tensor::from_vector(values(n, seed), {n}, device);
  };
  std::vector<std::vector<float>> out;
  const Tensor x = Tensor::from_vector(values(12, 5), {3, 4}, device);
  const auto [top_values, top_index] = ops::topk(x, 2, 1);
  for (const Tensor& t : {ops::argmax(x, 1), top_values, top_index, ops::equal(x, x.slice(0, 1, 2)),
                          ops::not_equal_scalar(ops::relu(x), 0.0F)}) {
    out.push_back(t.to_host().to_vector());
  }
  const std::int64_t n = 10;
  const std::vector<FlatSlice> slices{{0, 4}, {4, 6}};
  Tensor p = on(1, n), g = on(2, n), m = on(3, n), v = ops::mul(on(4, n), on(4, n)).detach();
  Tensor none;
  ops::adam_update(p, g, m, v, none, AdamUpdate{0.9F, 0.99F, 1e-8F, 0.01F, 1.1F, 0.0F, 0.999F});
  Tensor buffer = Tensor::zeros({n}, DType::f32, device);
  ops::sgd_update(p, g, buffer, SgdUpdate{0.1F, 0.01F, 0.9F, true, true});
  Tensor ema = Tensor::zeros({2}, DType::f32, device);
  ops::novograd_update(p, g, m, ema, slices, NovogradUpdate{0.05F});
  ops::larc_(g, p, slices, LarcOptions{0.01, true, 1e-7, 1e-7, 0.1});
  ops::scale_(g, 0.5F);
  const GradientStats stats = ops::gradient_stats(g, Tensor::scalar(INFINITY, device));
  // Queued into device records and read back together.
  Tensor records = Tensor::zeros({2 * kGradientStatsWords}, DType::i64, device);
  ops::gradient_stats_into(g, Tensor::scalar(INFINITY, device), records, 1);
  ops::gradient_stats_into(m, Tensor::scalar(0.5F, device), records, 0);
  const std::vector<GradientStats> queued = ops::read_gradient_stats(records, 2);
  for (const Tensor& t : {p, g, m, v, buffer, ema}) out.push_back(t.to_host().to_vector());
  for (const GradientStats& s : {stats, queued[0], queued[1]}) {
    out.push_back({static_cast<float>(s.norm), static_cast<float>(s.amax),
                   s.loss_finite ? 1.0F : 0.0F, s.loss});
  }
  EXPECT_FALSE(stats.loss_finite);
  EXPECT_EQ(queued[1].norm, stats.norm);
  EXPECT_FALSE(queued[1].loss_finite);
  EXPECT_TRUE(queued[0].loss_finite);
  EXPECT_EQ(queued[0].loss, 0.5F);
  return out;
}

// ops::read_later: the values as of the call, on the CPU and the sim device
// (both read at once); f32 and contiguous only; collected once.
TEST(SimTensors, ReadLaterGivesTheValuesAsOfTheCall) {
  for (const Device device : {Device::cpu(), Device::sim()}) {
    Tensor t = Tensor::from_vector(std::vector<float>{1.0F, -2.0F, 3.5F, 4.0F}, {2, 2}, device);
    ops::LaterRead read = ops::read_later(t.slice(0, 1, 2));
    EXPECT_TRUE(read.pending());
    t.fill_(0.0F);
    EXPECT_EQ(read.values(), (std::vector<float>{3.5F, 4.0F}));
    EXPECT_FALSE(read.pending());
    EXPECT_THROW(read.values(), std::logic_error);
    EXPECT_THROW(ops::read_later(t.transpose(0, 1)), std::invalid_argument);
    EXPECT_THROW(ops::read_later(Tensor::zeros({2}, DType::i64, device)), std::invalid_argument);
  }
}

TEST(SimTensors, SelectionsComparisonsAndUpdatesGiveTheCpusBits) {
  const auto cpu = run_updates(Device::cpu());
  const auto sim = run_updates(Device::sim());
  ASSERT_EQ(cpu.size(), sim.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].size(), sim[i].size()) << "result " << i;
    EXPECT_EQ(0, std::memcmp(cpu[i].data(), sim[i].data(), cpu[i].size() * sizeof(float)))
        << "result " << i << " differs";
  }
}

TEST(SimTensors, ABatchMovedToSimKeepsTheDataLayersHostTensors) {
  Batch batch;
  batch.tensors["ids"] = Tensor::from_vector(ids({3, 1, 4}), {3});
  batch.num_objects = 3;
  const Batch moved = batch.to(Device::sim());
  EXPECT_EQ(moved.at("ids").device(), Device::sim());
  EXPECT_EQ(moved.num_objects, 3);
  // The host copy is the data layer's own tensor: no device read.
  EXPECT_EQ(moved.host("ids").raw_data(), batch.at("ids").raw_data());
  const Batch back = moved.to(Device::cpu());
  EXPECT_EQ(back.at("ids").raw_data(), batch.at("ids").raw_data());
  EXPECT_TRUE(back.host_tensors.empty());
  // A batch made on the device has no host copy: host() reads it.
  Batch on_sim;
  on_sim.tensors["x"] = Tensor::from_vector(std::vector<float>{2.5F}, {1}, Device::sim());
  EXPECT_EQ(on_sim.host("x").device(), Device::cpu());
  EXPECT_FLOAT_EQ(on_sim.host("x").item(), 2.5F);
  EXPECT_EQ(batch.to(Device::cpu()).at("ids").raw_data(), batch.at("ids").raw_data());
}

TEST(SimTensors, CopiesBetweenDevicesKeepEveryDtype) {
  const Tensor f = Tensor::from_vector(std::vector<float>{1.5F, -2.0F, 3.25F}, {3});
  const Tensor on_sim = f.to(Device::sim());
  EXPECT_EQ(on_sim.device(), Device::sim());
  EXPECT_EQ(on_sim.to_host().to_vector(), f.to_vector());
  EXPECT_EQ(on_sim.to_vector(), f.to_vector());  // to_vector copies through the backend
  EXPECT_FLOAT_EQ(on_sim.slice(0, 2, 3).item(), 3.25F);
  const Tensor i = Tensor::from_vector(ids({7, -3}), {2}, Device::sim());
  EXPECT_EQ(i.to_host().to_vector(), (std::vector<float>{7.0F, -3.0F}));
  const Tensor half = f.to(DType::bf16).to(Device::sim()).to(DType::f32);
  EXPECT_EQ(half.to_vector(), f.to_vector());  // exactly representable in bf16
  // A strided view copies out in logical order.
  const Tensor m = Tensor::from_vector(values(6, 3), {2, 3}, Device::sim());
  const Tensor back = m.transpose(0, 1).to_host();
  EXPECT_EQ(back.to_vector(), m.to_host().transpose(0, 1).contiguous().to_vector());
}

TEST(SimTensors, LikeFactoriesKeepShapeDtypeAndDevice) {
  const Tensor x = Tensor::ones({2, 3}, DType::bf16, Device::sim()).transpose(0, 1);
  for (const Tensor& t : {Tensor::empty_like(x), Tensor::zeros_like(x)}) {
    EXPECT_EQ(t.shape(), (Shape{3, 2}));
    EXPECT_EQ(t.dtype(), DType::bf16);
    EXPECT_EQ(t.device(), Device::sim());
    EXPECT_TRUE(t.is_contiguous());
  }
  EXPECT_EQ(Tensor::zeros_like(x).to_vector(), std::vector<float>(6, 0.0F));
}

TEST(SimTensors, MixingDevicesNamesBoth) {
  const Tensor a = Tensor::ones({2, 2});
  const Tensor b = Tensor::ones({2, 2}, DType::f32, Device::sim());
  const std::string message = rig_test::error_of([&] { ops::add(a, b); });
  EXPECT_TRUE(rig_test::contains(message, "cpu")) << message;
  EXPECT_TRUE(rig_test::contains(message, "sim")) << message;
}

// Reading a sim tensor's data from host code, as a plugin that forgot to copy
// it would, kills the process with SIGSEGV at that line.
void read_from_host(const Tensor& t) {
  sim_test::let_the_fault_kill();
  const volatile float* p = t.data<float>();
  static_cast<void>(p[0]);
}

TEST(SimTensorsDeathTest, HostReadOfASimTensorFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, Device::sim());
  EXPECT_EXIT(read_from_host(t), sim_test::died_of_the_fault, "");
  EXPECT_FLOAT_EQ(t.to_host().to_vector()[1], 2.0F);  // through the backend it is fine
}

}  // namespace
}  // namespace rig
