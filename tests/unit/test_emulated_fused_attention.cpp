// The emulated device's fused attention (core/cuda/emulated/
// emulated_attention.hpp, RIG_CUDA_EMULATOR_FUSED_ATTENTION=1): the ops'
// fused path (key padding as lengths, the causal mask, cross attention,
// strided heads, dropout drawn from the call's seed) runs without a GPU,
// against the CPU's composed f32 attention on the same values.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bf16_values.hpp"
#include "fresh_process.hpp"
#include "rig/half.hpp"
#include "rig/ops.hpp"
#include "rig/tensor.hpp"

namespace {

using rig::DType;
using rig::Tensor;
using rig::test::bf16_exact_uniform;
using rig::test::leaf;

// The back end reads these when it is first made: each test runs in a
// process of its own (rig_test::in_fresh_process).
rig::Device emulated_cuda_with_fused_attention(const std::string& census) {
  setenv("RIG_CUDA_EMULATOR", "1", 1);
  setenv("RIG_CUDA_EMULATOR_FUSED_ATTENTION", "1", 1);
  setenv("RIG_CUDA_CENSUS", census.c_str(), 1);
  return rig::Device::cuda(0);
}

std::string census_file(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string("rig-fused-attention-") + name + "-" + std::to_string(getpid()) + ".tsv"))
      .string();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// |got - want| <= tol (1 + |want|) everywhere (bf16 outputs: 8 bits).
::testing::AssertionResult close(const Tensor& got, const Tensor& want, float tol) {
  const std::vector<float> g = got.to_host().to(DType::f32).to_vector();
  const std::vector<float> w = want.to_host().to(DType::f32).to_vector();
  if (g.size() != w.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::fabs(g[i] - w[i]) <= tol * (1.0F + std::fabs(w[i])))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Key padding as the ops take it: the mask [B, 1, 1, Tk] and the lengths.
void pad_keys(rig::ops::AttentionOptions& options, const std::vector<std::int64_t>& lengths,
              std::int64_t tk, rig::Device device) {
  const auto b = static_cast<std::int64_t>(lengths.size());
  std::vector<float> seen(static_cast<std::size_t>(b * tk));
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t j = 0; j < tk; ++j) {
      seen[static_cast<std::size_t>(i * tk + j)] = j < lengths[static_cast<std::size_t>(i)] ? 1 : 0;
    }
  }
  options.mask = Tensor::from_vector(seen, {b, 1, 1, tk}).to(DType::u8).to(device);
  options.key_lengths = Tensor::from_vector(std::vector<float>(lengths.begin(), lengths.end()), {b})
                            .to(DType::i64)
                            .to(device);
}

struct Case {
  const char* name;
  std::int64_t tq, tk;
  bool causal, padded;
};

void matches_the_cpus_composed_attention() {
  const std::string census = census_file("match");
  const rig::Device dev = emulated_cuda_with_fused_attention(census);
  const rig::Device cpu = rig::Device::cpu();
  const std::int64_t b = 2, h = 3, d = 8;
  for (const Case& c :
       {Case{"self, padded keys", 5, 5, false, true}, Case{"causal", 6, 6, true, false},
        Case{"cross, padded keys", 4, 7, false, true}}) {
    SCOPED_TRACE(c.name);
    // q, k, v as the layers make them: heads split out of [B, T, H * D] (strided views).
    const Tensor q0 = bf16_exact_uniform({b, c.tq, h * d}, 1),
                 k0 = bf16_exact_uniform({b, c.tk, h * d}, 2),
                 v0 = bf16_exact_uniform({b, c.tk, h * d}, 3),
                 up = bf16_exact_uniform({b, h, c.tq, d}, 4);
    const auto heads = [&](const Tensor& x) {
      return x.view({x.size(0), x.size(1), h, d}).transpose(1, 2);
    };
    rig::ops::AttentionOptions on_gpu, on_cpu;
    on_gpu.causal = on_cpu.causal = c.causal;
    if (c.padded) {
      pad_keys(on_gpu, {c.tk, c.tk - 3}, c.tk, dev);
      pad_keys(on_cpu, {c.tk, c.tk - 3}, c.tk, cpu);
    }
    Tensor q16 = leaf(q0, DType::bf16, dev), k16 = leaf(k0, DType::bf16, dev),
           v16 = leaf(v0, DType::bf16, dev);
    const Tensor out16 =
        rig::ops::scaled_dot_product_attention(heads(q16), heads(k16), heads(v16), on_gpu);
    rig::ops::sum(rig::ops::mul(out16, up.to(dev).to(DType::bf16))).backward();
    Tensor q32 = leaf(q0, DType::f32, cpu), k32 = leaf(k0, DType::f32, cpu),
           v32 = leaf(v0, DType::f32, cpu);
    const Tensor out32 =
        rig::ops::scaled_dot_product_attention(heads(q32), heads(k32), heads(v32), on_cpu);
    rig::ops::sum(rig::ops::mul(out32, up)).backward();
    EXPECT_EQ(out16.dtype(), DType::bf16);
    EXPECT_TRUE(close(out16.detach(), out32.detach(), 1e-2F)) << "out";
    EXPECT_TRUE(close(q16.grad(), q32.grad(), 2e-2F)) << "dq";
    EXPECT_TRUE(close(k16.grad(), k32.grad(), 2e-2F)) << "dk";
    EXPECT_TRUE(close(v16.grad(), v32.grad(), 2e-2F)) << "dv";
  }
  // The device ran its fused attention, not the composed kernels.
  const std::string counted = read_all(census);
  std::filesystem::remove(census);
  EXPECT_NE(counted.find("fused attention forward"), std::string::npos) << counted;
  EXPECT_NE(counted.find("fused attention backward"), std::string::npos) << counted;
  EXPECT_EQ(counted.find("SoftmaxForward"), std::string::npos) << counted;
}

void dropout_uses_one_mask_drawn_from_the_key() {
  const std::string census = census_file("dropout");
  const rig::Device dev = emulated_cuda_with_fused_attention(census);
  const Tensor q0 = bf16_exact_uniform({2, 2, 9, 8}, 11), k0 = bf16_exact_uniform({2, 2, 9, 8}, 12),
               v0 = bf16_exact_uniform({2, 2, 9, 8}, 13);
  rig::ops::AttentionOptions options;
  options.dropout_p = 0.3F;
  options.key = rig::RandomKey{5, 1, 0, 77};
  Tensor q = leaf(q0, DType::bf16, dev), k = leaf(k0, DType::bf16, dev),
         v = leaf(v0, DType::bf16, dev);
  const Tensor out = rig::ops::scaled_dot_product_attention(q, k, v, options);
  // out = dropped(P) v is linear in v, so with dout = out: <out, out> = <v, dv>,
  // which holds only where the backward drops the forward's weights.
  const Tensor dout = out.detach();
  rig::ops::sum(rig::ops::mul(out, dout)).backward();
  const auto dot = [](const Tensor& a, const Tensor& b) {
    const std::vector<float> x = a.to_host().to(DType::f32).to_vector();
    const std::vector<float> y = b.to_host().to(DType::f32).to_vector();
    double s = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) s += static_cast<double>(x[i]) * y[i];
    return s;
  };
  const double out_out = dot(out.detach(), dout), v_dv = dot(v.detach(), v.grad());
  EXPECT_NEAR(v_dv, out_out, 2e-2 * out_out);
  // The same key draws the same mask; another key another one.
  const rig::NoGradGuard no_grad;
  const Tensor again = rig::ops::scaled_dot_product_attention(q, k, v, options);
  EXPECT_EQ(again.to_host().to(DType::f32).to_vector(),
            out.detach().to_host().to(DType::f32).to_vector());
  options.key = rig::RandomKey{5, 2, 0, 77};
  const Tensor other = rig::ops::scaled_dot_product_attention(q, k, v, options);
  EXPECT_NE(other.to_host().to(DType::f32).to_vector(),
            out.detach().to_host().to(DType::f32).to_vector());
  std::filesystem::remove(census);
}

TEST(EmulatedFusedAttention, MatchesTheCpusComposedAttentionForwardAndBackward) {
  rig_test::in_fresh_process(matches_the_cpus_composed_attention);
}

TEST(EmulatedFusedAttention, DropoutUsesOneMaskForwardAndBackwardDrawnFromTheKey) {
  rig_test::in_fresh_process(dropout_uses_one_mask_drawn_from_the_key);
}

}  // namespace
