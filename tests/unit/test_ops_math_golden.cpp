// The core math ops against PyTorch (tests/golden/ops_math.json, written by
// tests/golden/gen_ops_math.py): forward values and the gradients of
// sum(out * upstream) for every case.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "cpu/simd.hpp"
#include "golden.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace {

using rig::Tensor;
using rig_test::GoldenCase;
using rig_test::tensors_close;
namespace ops = rig::ops;
using json = nlohmann::json;

// "transpose" (last two axes) or "slice" (every second element of the last axis).
Tensor view_of(const Tensor& t, const json& params, const std::string& key) {
  if (!params.contains(key) || params.at(key).is_null()) return t;
  const std::string view = params.at(key).get<std::string>();
  if (view == "transpose") return t.transpose(-1, -2);
  if (view == "slice") return t.slice(-1, 0, t.size(-1), 2);
  ADD_FAILURE() << "unknown view " << view;
  return t;
}

ops::Activation activation_of(const std::string& name) {
  if (name == "relu") return ops::Activation::relu;
  if (name == "gelu") return ops::Activation::gelu;
  if (name == "tanh") return ops::Activation::tanh;
  if (name == "sigmoid") return ops::Activation::sigmoid;
  return ops::Activation::none;
}

struct CaseRun {
  std::map<std::string, Tensor> leaves;  // inputs that get gradients
  Tensor out;
};

Tensor input_or_leaf(const GoldenCase& c, CaseRun& run, const std::string& name) {
  if (!c.inputs.count(name)) return {};
  if (!c.grads.count(name)) return c.input(name);
  Tensor t = c.input(name).clone();
  t.set_requires_grad(true);
  run.leaves[name] = t;
  return t;
}

Tensor compute(const GoldenCase& c, CaseRun& run) {
  const json& p = c.params;
  const std::string op = p.at("op").get<std::string>();
  auto in = [&](const std::string& name) { return input_or_leaf(c, run, name); };
  if (op == "matmul") {
    return ops::matmul(view_of(in("a"), p, "view_a"), view_of(in("b"), p, "view_b"),
                       p.at("transpose_a").get<bool>(), p.at("transpose_b").get<bool>());
  }
  if (op == "linear") {
    return ops::linear(in("x"), in("weight"), in("bias"),
                       activation_of(p.at("activation").get<std::string>()));
  }
  if (op == "add" || op == "sub" || op == "mul" || op == "div") {
    const Tensor a = view_of(in("a"), p, "view_a");
    const Tensor b = view_of(in("b"), p, "view_b");
    if (op == "add") return ops::add(a, b);
    if (op == "sub") return ops::sub(a, b);
    if (op == "mul") return ops::mul(a, b);
    return ops::div(a, b);
  }
  const float scalar = p.contains("scalar") ? p.at("scalar").get<float>() : 0.0F;
  if (op == "add_scalar") return ops::add_scalar(in("x"), scalar);
  if (op == "mul_scalar") return ops::mul_scalar(in("x"), scalar);
  if (op == "pow_scalar") return ops::pow_scalar(in("x"), scalar);
  if (op == "neg") return ops::neg(in("x"));
  if (op == "exp") return ops::exp(in("x"));
  if (op == "log") return ops::log(in("x"));
  if (op == "sqrt") return ops::sqrt(in("x"));
  if (op == "rsqrt") return ops::rsqrt(in("x"));
  if (op == "relu") return ops::relu(in("x"));
  if (op == "gelu") return ops::gelu(in("x"));
  if (op == "gelu_tanh") return ops::gelu(in("x"), true);
  if (op == "tanh") return ops::tanh(in("x"));
  if (op == "sigmoid") return ops::sigmoid(in("x"));
  if (op == "sum" || op == "mean") {
    const bool mean = op == "mean";
    if (p.at("axes").is_null()) return mean ? ops::mean(in("x")) : ops::sum(in("x"));
    const auto axes = p.at("axes").get<std::vector<std::int64_t>>();
    const bool keepdim = p.at("keepdim").get<bool>();
    return mean ? ops::mean(in("x"), axes, keepdim) : ops::sum(in("x"), axes, keepdim);
  }
  if (op == "max") {
    return ops::max(in("x"), p.at("axis").get<std::int64_t>(), p.at("keepdim").get<bool>());
  }
  if (op == "softmax" || op == "log_softmax") {
    const auto axis = p.at("axis").get<std::int64_t>();
    return op == "softmax" ? ops::softmax(in("x"), axis, in("mask"))
                           : ops::log_softmax(in("x"), axis, in("mask"));
  }
  if (op == "layer_norm") {
    return ops::layer_norm(in("x"), in("gamma"), in("beta"), p.at("eps").get<float>());
  }
  if (op == "mse_loss") return ops::mse_loss(in("prediction"), in("target"));
  const float smoothing = p.contains("label_smoothing") ? p.at("label_smoothing").get<float>() : 0;
  if (op == "cross_entropy") return ops::cross_entropy(in("logits"), in("labels"), smoothing);
  if (op == "padded_cross_entropy") {
    return ops::padded_cross_entropy(in("logits"), in("labels"), in("weights"), smoothing);
  }
  if (op == "equal") return ops::equal(in("a"), in("b"));
  if (op == "not_equal_scalar") return ops::not_equal_scalar(in("x"), scalar);
  ADD_FAILURE() << "unknown op " << op;
  return {};
}

// Tolerances: the approximations of exp/tanh/erf are good to a few ulp; the
// reductions in f32 to about 1e-6 relative.
constexpr double kRtol = 2e-5;
constexpr double kAtol = 2e-6;

void check_case(const GoldenCase& c) {
  SCOPED_TRACE(c.name);
  CaseRun run;
  const Tensor out = compute(c, run);
  ASSERT_TRUE(out.defined());
  const Tensor& expected = c.output("out");
  if (c.params.contains("neg_inf_sentinel")) {
    // -inf was stored as a sentinel (JSON has no infinities): check those
    // elements are -inf, then compare the rest.
    const float sentinel = c.params.at("neg_inf_sentinel").get<float>();
    std::vector<float> want = expected.to_vector();
    std::vector<float> got = out.to_vector();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (want[i] != sentinel) continue;
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "element " << i << ": " << got[i];
      want[i] = got[i] = 0.0F;
    }
    EXPECT_TRUE(tensors_close(Tensor::from_vector(got, out.shape()),
                              Tensor::from_vector(want, expected.shape()), kRtol, kAtol));
  } else if (expected.dtype() == rig::DType::u8) {
    EXPECT_EQ(out.dtype(), rig::DType::u8);
    EXPECT_EQ(out.shape(), expected.shape());
    EXPECT_EQ(out.to_int_vector(), expected.to_int_vector());
  } else {
    EXPECT_TRUE(tensors_close(out, expected, kRtol, kAtol));
  }
  if (c.grads.empty()) return;
  ops::sum(ops::mul(out, c.input("upstream"))).backward();
  for (const auto& [name, grad] : c.grads) {
    SCOPED_TRACE("grad of " + name);
    ASSERT_TRUE(run.leaves.count(name));
    const Tensor actual = run.leaves[name].grad();
    ASSERT_TRUE(actual.defined());
    EXPECT_TRUE(tensors_close(actual, grad, kRtol, kAtol));
  }
}

TEST(OpsMathGolden, EveryCaseMatchesTorch) {
  const auto cases = rig_test::load_golden("ops_math");
  ASSERT_GE(cases.size(), 90U);
  for (const auto& c : cases) check_case(c);
}

// The SIMD kernels exist in 4-, 8- and 16-lane versions; the machine runs the
// widest it has, so the others are checked here explicitly.
TEST(OpsMathGolden, EveryCaseMatchesTorchAtEverySimdWidth) {
  namespace simd = rig::cpu::simd;
  const auto cases = rig_test::load_golden("ops_math");
  const int saved = simd::simd_width();
  for (int width : {4, 8, 16}) {
    if (width > simd::max_simd_width()) continue;
    SCOPED_TRACE("simd width " + std::to_string(width));
    ASSERT_EQ(simd::set_simd_width(width), width);
    for (const auto& c : cases) check_case(c);
  }
  simd::set_simd_width(saved);
}

}  // namespace
