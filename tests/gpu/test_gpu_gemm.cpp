// cuBLASLt products (cuda/runtime/cublaslt_gemm.cuh) against the CPU
// interpreter of cuBLASLt's semantics (cuda/gemm/lt_interpreter.hpp) on the
// same inputs: f32, TF32, f16 and bf16, the bias / relu / GELU (tanh) / aux /
// backward / bias-gradient epilogues, beta = 1 accumulation and strided
// batches (broadcast operands, products side by side in each row).
//
// Tolerances, per element, |got - want| <= u (|want| + 2 k_scale): u = 1e-6
// for f32 (accumulation order), 2e-3 for TF32 (inputs rounded to 10 bits),
// and the output's half-ulp-and-more for f16 (1e-3) and bf16 (8e-3); inputs are
// uniform in [-1, 1], so k_scale = sqrt(k) + 1 bounds the typical |sum|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/gemm/gemm_plan.hpp"
#include "cuda/gemm/lt_interpreter.hpp"
#include "cuda/runtime/cublaslt_gemm.cuh"
#include "gpu_test.hpp"

namespace {

using rig::cuda::EpilogueKind;
using rig::cuda::GemmActivation;
using rig::cuda::GemmRequest;
using rig::cuda::GemmType;
using rig::cuda::LtPlan;
using rig_gpu_test::kDevice;

class GpuGemm : public rig_gpu_test::GpuTest {};

void cuda_ok(cudaError_t code, const char* what) {
  ASSERT_EQ(code, cudaSuccess) << what << ": " << cudaGetErrorString(code);
}

// A host buffer and its device copy, `shift` bytes past an aligned allocation
// (a view at an odd offset).
struct Twin {
  std::vector<std::uint8_t> host;
  void* base = nullptr;
  void* device = nullptr;
  explicit Twin(std::size_t bytes, std::size_t shift = 0) : host(std::max<std::size_t>(bytes, 16)) {
    cuda_ok(cudaMalloc(&base, host.size() + shift), "cudaMalloc");
    device = static_cast<std::uint8_t*>(base) + shift;
  }
  ~Twin() { cudaFree(base); }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;
  void upload() {
    cuda_ok(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), "up");
  }
  std::vector<std::uint8_t> download() const {
    std::vector<std::uint8_t> out(host.size());
    cudaMemcpy(out.data(), device, out.size(), cudaMemcpyDeviceToHost);
    return out;
  }
};

double unit_for(GemmType out, bool tf32) {
  if (tf32) return 2e-3;
  switch (out) {
    case GemmType::f32:
      return 1e-6;
    case GemmType::f16:
      return 1e-3;
    case GemmType::bf16:
      return 8e-3;
  }
  return 0.0;
}

void fill(std::vector<std::uint8_t>& bytes, GemmType type, std::mt19937& rng, double value_or_nan) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const std::int64_t count = static_cast<std::int64_t>(bytes.size() / rig::cuda::size_of(type));
  for (std::int64_t i = 0; i < count; ++i) {
    rig::cuda::store_element(type, bytes.data(), i,
                             std::isnan(value_or_nan) ? value_or_nan : uniform(rng));
  }
}

// Runs `r` on the device and with the interpreter; compares D, the bias
// gradient and the aux output. A, B and C are `shift` bytes past aligned memory.
void check(const GemmRequest& r, unsigned seed, rig::cuda::CublasLtGemm* shared = nullptr,
           std::size_t shift = 0) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const LtPlan plan = rig::cuda::plan_gemm(r);
  SCOPED_TRACE(plan.describe());
  std::mt19937 rng(seed);
  const auto bytes = [](GemmType t, std::int64_t n) {
    return static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * rig::cuda::size_of(t);
  };
  // A batch spans (count - 1) strides past its first matrix.
  const auto extent = [&](std::int64_t stride, std::int64_t rows, std::int64_t ld) {
    return (r.batch_count > 1 ? (r.batch_count - 1) * stride : 0) + rows * ld;
  };
  Twin a(bytes(r.a_type, extent(r.stride_a, r.trans_a ? r.k : r.m, r.lda)), shift);
  Twin b(bytes(r.b_type, extent(r.stride_b, r.trans_b ? r.n : r.k, r.ldb)), shift);
  Twin c(bytes(r.c_type, extent(r.stride_c, r.m, r.ldc)), shift);
  Twin bias(bytes(r.c_type, std::max(r.m, r.n)));
  Twin aux(static_cast<std::size_t>(std::max<std::int64_t>(plan.aux_bytes(), 16)));
  fill(a.host, r.a_type, rng, 0.0);
  fill(b.host, r.b_type, rng, 0.0);
  fill(c.host, r.c_type, rng, r.beta == 0.0F ? std::numeric_limits<double>::quiet_NaN() : 0.0);
  fill(bias.host, r.c_type, rng, 0.0);
  const bool mask = plan.aux_role == rig::cuda::AuxRole::read_relu_mask ||
                    plan.aux_role == rig::cuda::AuxRole::write_relu_mask;
  if (mask) {
    for (auto& byte : aux.host) byte = static_cast<std::uint8_t>(rng());
  } else {
    fill(aux.host, plan.aux_type, rng, 0.0);
  }
  for (Twin* t : {&a, &b, &c, &bias, &aux}) t->upload();

  // The interpreter on host copies.
  std::vector<std::uint8_t> want_c = c.host, want_bias = bias.host, want_aux = aux.host;
  const auto host_of = [&](rig::cuda::RigOperand o) -> const void* {
    return o == rig::cuda::RigOperand::a ? a.host.data() : b.host.data();
  };
  rig::cuda::interpret_lt_matmul(plan, host_of(plan.a_is), host_of(plan.b_is), want_c.data(),
                                 want_c.data(), want_bias.data(), want_aux.data());
  rig::cuda::interpret_own_work(plan, want_c.data(), want_bias.data(), want_aux.data());

  // cuBLASLt, then the own work (the erf GELU) on the host copy of its output.
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  {
    rig::cuda::CublasLtGemm own(kDevice);
    rig::cuda::CublasLtGemm& gemm = shared != nullptr ? *shared : own;
    const auto device_of = [&](rig::cuda::RigOperand o) -> const void* {
      return o == rig::cuda::RigOperand::a ? a.device : b.device;
    };
    gemm.run(plan, device_of(plan.a_is), device_of(plan.b_is), c.device, c.device, bias.device,
             aux.device, stream);
    cuda_ok(cudaStreamSynchronize(stream), "sync");
  }
  cudaStreamDestroy(stream);
  std::vector<std::uint8_t> got_c = c.download(), got_bias = bias.download(),
                            got_aux = aux.download();
  rig::cuda::interpret_own_work(plan, got_c.data(), got_bias.data(), got_aux.data());

  const double u = unit_for(r.c_type, plan.compute == rig::cuda::GemmCompute::tf32);
  const double k_scale = std::sqrt(static_cast<double>(r.k)) + 1.0;
  int bad = 0;
  const auto near = [&](const char* what, std::int64_t index, double g, double w, double scale) {
    const double tol = u * (std::abs(w) + 2.0 * scale);
    if ((std::isnan(g) && std::isnan(w)) || std::abs(g - w) <= tol) return;
    if (++bad <= 5) {
      ADD_FAILURE() << what << "[" << index << "]: cuBLASLt " << g << ", interpreter " << w
                    << " (tolerance " << tol << ")";
    }
  };
  for (std::int64_t i = 0;
       i < static_cast<std::int64_t>(want_c.size() / rig::cuda::size_of(r.c_type)); ++i) {
    near("D", i, rig::cuda::load_element(r.c_type, got_c.data(), i),
         rig::cuda::load_element(r.c_type, want_c.data(), i), k_scale);
  }
  if (plan.bias_role == rig::cuda::BiasRole::bias_grad) {
    const double sum_scale = k_scale * std::sqrt(static_cast<double>(std::max(plan.n, plan.k)));
    for (std::int64_t i = 0; i < plan.bias_length; ++i) {
      near("bias gradient", i, rig::cuda::load_element(plan.bias_type, got_bias.data(), i),
           rig::cuda::load_element(plan.bias_type, want_bias.data(), i), 4.0 * sum_scale);
    }
  }
  if (plan.aux_role == rig::cuda::AuxRole::write_gelu_input) {
    for (std::int64_t j = 0; j < plan.n; ++j) {
      for (std::int64_t i = 0; i < plan.m; ++i) {
        const std::int64_t x = i + j * plan.aux_ld;
        near("aux", x, rig::cuda::load_element(plan.aux_type, got_aux.data(), x),
             rig::cuda::load_element(plan.aux_type, want_aux.data(), x), k_scale);
      }
    }
  }
  if (plan.aux_role == rig::cuda::AuxRole::write_relu_mask) {
    for (std::int64_t j = 0; j < plan.n; ++j) {
      for (std::int64_t i = 0; i < plan.m; ++i) {
        const std::int64_t x = i + j * plan.aux_ld;
        const bool g = ((got_aux[static_cast<std::size_t>(x / 8)] >> (x % 8)) & 1U) != 0;
        const bool w = ((want_aux[static_cast<std::size_t>(x / 8)] >> (x % 8)) & 1U) != 0;
        // A pre-activation within rounding of 0 may fall either way.
        const double d = rig::cuda::load_element(r.c_type, want_c.data(), i + j * plan.d.ld);
        if (g != w && std::abs(d) > u * 2.0 * k_scale && ++bad <= 5) {
          ADD_FAILURE() << "relu mask bit " << x << ": cuBLASLt " << g << ", interpreter " << w;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

GemmRequest product(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, GemmType in,
                    GemmType out, std::int64_t pad = 0) {
  GemmRequest r;
  r.m = m;
  r.n = n;
  r.k = k;
  r.trans_a = ta;
  r.trans_b = tb;
  r.lda = std::max<std::int64_t>(1, ta ? m : k) + pad;
  r.ldb = std::max<std::int64_t>(1, tb ? k : n) + pad;
  r.ldc = n + pad;
  r.a_type = r.b_type = in;
  r.c_type = out;
  return r;
}

TEST_F(GpuGemm, F32OddShapesEveryTranspose) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      GemmRequest r = product(37, 45, 29, ta, tb, GemmType::f32, GemmType::f32, 3);
      r.alpha = 1.5F;
      check(r, 1);
    }
  }
}

TEST_F(GpuGemm, F32BetaOneAccumulates) {
  GemmRequest r = product(64, 48, 40, true, false, GemmType::f32, GemmType::f32);
  r.beta = 1.0F;
  check(r, 2);
}

TEST_F(GpuGemm, Tf32) {
  GemmRequest r = product(64, 96, 128, false, true, GemmType::f32, GemmType::f32);
  r.allow_tf32 = true;
  check(r, 3);
}

TEST_F(GpuGemm, HalfTypesWithBias) {
  for (const GemmType in : {GemmType::f16, GemmType::bf16}) {
    for (const GemmType out : {in, GemmType::f32}) {
      GemmRequest r = product(32, 64, 48, false, true, in, out);  // y = x W^T + b
      r.epilogue.bias = true;
      check(r, 4);
    }
  }
}

TEST_F(GpuGemm, ReluForwardWithMask) {
  for (const GemmType in : {GemmType::f32, GemmType::bf16}) {
    GemmRequest r = product(40, 56, 32, false, true, in, in);
    r.epilogue = {EpilogueKind::forward, GemmActivation::relu, true, true, 128};
    check(r, 5);
    r.epilogue = {EpilogueKind::forward, GemmActivation::relu, true, false, 0};
    check(r, 6);
  }
}

TEST_F(GpuGemm, GeluTanhForwardWithAux) {
  for (const GemmType in : {GemmType::f16, GemmType::bf16}) {
    GemmRequest r = product(40, 56, 32, false, true, in, in);
    r.epilogue = {EpilogueKind::forward, GemmActivation::gelu_tanh, true, true, 64};
    check(r, 7);
    r.epilogue = {EpilogueKind::forward, GemmActivation::gelu_tanh, false, false, 0};
    check(r, 8);
  }
}

// cuBLASLt's GELU is the tanh form, not rig's default erf form: D, read
// against the saved pre-activation, is nearer to the tanh GELU by far.
TEST_F(GpuGemm, CuBlasLtsGeluIsTheTanhForm) {
  GemmRequest r = product(64, 64, 64, false, true, GemmType::f32, GemmType::f32);
  r.alpha = 2.0F;  // pre-activations spread over [-8, 8], where the forms differ
  r.epilogue = {EpilogueKind::forward, GemmActivation::gelu_tanh, false, true, 64};
  const LtPlan plan = rig::cuda::plan_gemm(r);
  std::mt19937 rng(20);
  Twin a(static_cast<std::size_t>(r.m * r.lda) * 4), b(static_cast<std::size_t>(r.n * r.ldb) * 4);
  Twin c(static_cast<std::size_t>(r.m * r.ldc) * 4),
      aux(static_cast<std::size_t>(plan.aux_bytes()));
  fill(a.host, GemmType::f32, rng, 0.0);
  fill(b.host, GemmType::f32, rng, 0.0);
  a.upload();
  b.upload();
  {
    rig::cuda::CublasLtGemm gemm(kDevice);
    gemm.run(plan, b.device, a.device, c.device, c.device, nullptr, aux.device, nullptr);
    cuda_ok(cudaDeviceSynchronize(), "sync");
  }
  const std::vector<std::uint8_t> d = c.download(), pre = aux.download();
  double from_tanh = 0.0, from_erf = 0.0;
  for (std::int64_t j = 0; j < plan.n; ++j) {
    for (std::int64_t i = 0; i < plan.m; ++i) {
      const double x = rig::cuda::load_element(GemmType::f32, pre.data(), i + j * plan.aux_ld);
      const double y = rig::cuda::load_element(GemmType::f32, d.data(), i + j * plan.d.ld);
      from_tanh = std::max(from_tanh, std::abs(y - rig::cuda::gelu_tanh(x)));
      from_erf = std::max(from_erf, std::abs(y - rig::cuda::gelu_erf(x)));
    }
  }
  std::printf("cuBLASLt GELU: max |D - gelu_tanh(aux)| %.3g, max |D - gelu_erf(aux)| %.3g\n",
              from_tanh, from_erf);
  EXPECT_LT(from_tanh * 10.0, from_erf);
}

TEST_F(GpuGemm, GeluErfForwardLeavesTheActivationToRig) {
  GemmRequest r = product(24, 40, 16, false, true, GemmType::f32, GemmType::f32);
  r.epilogue = {EpilogueKind::forward, GemmActivation::gelu_erf, true, true, 40};
  check(r, 9);
}

TEST_F(GpuGemm, ReluAndGeluBackwardWithBiasGradient) {
  GemmRequest r = product(48, 32, 64, false, false, GemmType::f16, GemmType::f16);  // dY W
  r.epilogue = {EpilogueKind::backward, GemmActivation::relu, true, true, 128};
  check(r, 10);
  r.epilogue = {EpilogueKind::backward, GemmActivation::relu, false, true, 128};
  check(r, 11);
  r = product(48, 32, 64, false, false, GemmType::bf16, GemmType::bf16);
  r.epilogue = {EpilogueKind::backward, GemmActivation::gelu_tanh, true, true, 32};
  check(r, 12);
  r.epilogue = {EpilogueKind::backward, GemmActivation::gelu_erf, true, true, 32};
  check(r, 13);
}

TEST_F(GpuGemm, WeightGradientBiasGradientsAccumulating) {
  // dW += dY^T X (BGRADB gives db) and dW += X^T dY (BGRADA).
  GemmRequest r = product(48, 40, 64, true, false, GemmType::f32, GemmType::f32);
  r.beta = 1.0F;
  r.epilogue.kind = EpilogueKind::bias_grad_a;
  check(r, 14);
  r = product(40, 48, 64, true, false, GemmType::f16, GemmType::f16);
  r.beta = 1.0F;
  r.epilogue.kind = EpilogueKind::bias_grad_b;
  check(r, 15);
}

TEST_F(GpuGemm, EmptyProducts) {
  GemmRequest r = product(16, 24, 0, false, false, GemmType::f32, GemmType::f32);
  r.beta = 0.5F;
  check(r, 16);
  r = product(0, 24, 8, false, false, GemmType::f32, GemmType::f32);
  r.ldc = 24;
  check(r, 17);
}

// Strided batches: attention's per-head products with the heads of
// [seq, heads, dim] side by side (Q K^T into stacked scores, then P V back
// into the heads' columns), a broadcast operand, and a batch accumulating
// with ldc > n; all compared element by element, gaps included.
TEST_F(GpuGemm, StridedBatches) {
  const std::int64_t seq = 33, heads = 4, dim = 16;
  for (const GemmType in : {GemmType::f32, GemmType::bf16}) {
    GemmRequest scores = product(seq, seq, dim, false, true, in, in);  // Q K^T
    scores.lda = scores.ldb = heads * dim;
    scores.batch_count = heads;
    scores.stride_a = scores.stride_b = dim;
    scores.stride_c = seq * seq;
    scores.alpha = 0.25F;
    check(scores, 21);
    GemmRequest context = product(seq, dim, seq, false, false, in, in);  // P V
    context.ldb = context.ldc = heads * dim;
    context.batch_count = heads;
    context.stride_a = seq * seq;
    context.stride_b = context.stride_c = dim;
    check(context, 22);
  }
  // Leading dimensions and gaps of 8 elements keep every f16 matrix 16-byte aligned.
  GemmRequest shared = product(24, 40, 32, true, false, GemmType::f16, GemmType::f32, 8);
  shared.batch_count = 5;
  shared.stride_a = 0;  // one A for every product
  shared.stride_b = 32 * shared.ldb + 8;
  shared.stride_c = 24 * shared.ldc;
  shared.beta = 1.0F;
  shared.epilogue.activation = GemmActivation::relu;
  check(shared, 23);
  shared.stride_a = 32 * shared.lda;
  shared.stride_b = 0;  // one B for every product
  shared.allow_tf32 = true;
  shared.a_type = shared.b_type = GemmType::f32;
  check(shared, 24);
  shared.batch_count = 0;  // nothing queued, C untouched
  check(shared, 25);
}

// Operands at odd offsets (2-byte aligned bf16, 4-byte aligned f32: views
// into a flat buffer after a parameter of odd size): the heuristic is told
// their alignment, so the algorithm it picks runs on them.
TEST_F(GpuGemm, OperandsAtOddOffsets) {
  check(product(96, 80, 64, false, true, GemmType::bf16, GemmType::bf16, 1), 50, nullptr, 2);
  GemmRequest adds = product(64, 64, 256, true, false, GemmType::bf16, GemmType::bf16, 1);
  adds.beta = 1.0F;
  check(adds, 51, nullptr, 2);
  check(product(72, 40, 56, false, false, GemmType::f32, GemmType::f32, 1), 52, nullptr, 4);
}

// Autotuning (RIG_GEMM_AUTOTUNE) times the heuristic's candidates on a
// plan's first call: every result is still the interpreter's within
// rounding, a product that adds into D (beta 1) adds once though its
// candidates ran several times, and a second call reuses the choice.
TEST_F(GpuGemm, AutotunedProductsAreTheInterpretersAndAddOnce) {
  rig::cuda::CublasLtGemm gemm(kDevice);
  gemm.set_autotune(true);
  GemmRequest adds = product(384, 512, 1024, true, false, GemmType::bf16, GemmType::bf16);
  adds.beta = 1.0F;  // a weight gradient added into .grad
  check(adds, 40, &gemm);
  GemmRequest wide = product(256, 320, 512, false, true, GemmType::f32, GemmType::f32);
  wide.beta = 1.0F;
  wide.allow_tf32 = true;
  check(wide, 41, &gemm);
  GemmRequest biased = product(512, 256, 256, false, false, GemmType::bf16, GemmType::bf16);
  biased.epilogue.bias = true;
  biased.epilogue.activation = GemmActivation::relu;
  check(biased, 42, &gemm);
  const std::int64_t seq = 48, heads = 8, dim = 64;
  GemmRequest scores = product(seq, seq, dim, false, true, GemmType::bf16, GemmType::f32);
  scores.lda = scores.ldb = heads * dim;
  scores.batch_count = heads;
  scores.stride_a = scores.stride_b = dim;
  scores.stride_c = seq * seq;
  check(scores, 43, &gemm);
  EXPECT_GE(gemm.tuned_plans(), 1U) << "no plan had more than one candidate to time";
  std::printf(
      "gemm autotuning: %zu of 4 plans timed, %zu chose another than the heuristic's "
      "first\n",
      gemm.tuned_plans(), gemm.retuned_plans());
  check(adds, 44, &gemm);
  EXPECT_EQ(gemm.heuristic_queries(), 4U) << "a tuned plan was tuned again";
}

TEST_F(GpuGemm, TheAlgorithmIsChosenOncePerPlan) {
  rig::cuda::CublasLtGemm gemm(kDevice);
  const GemmRequest r = product(32, 32, 32, false, false, GemmType::f32, GemmType::f32);
  check(r, 18, &gemm);
  check(r, 19, &gemm);
  EXPECT_EQ(gemm.heuristic_queries(), 1U);
}

}  // namespace
