// plan_gemm against a CPU interpreter of cuBLASLt's semantics: for random
// shapes, leading dimensions, transposes, types, alpha / beta and every
// epilogue, rig's row-major product computed directly from the GemmRequest
// must equal interpret_lt_matmul (+ interpret_own_work) run on the plan, which
// knows only cuBLASLt's column-major terms. Inputs are small integers, so f32
// results without GELU are exact; f16 / bf16 / GELU results have tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/gemm/gemm_plan.hpp"
#include "cuda/gemm/lt_interpreter.hpp"

namespace {

using rig::cuda::EpilogueKind;
using rig::cuda::GemmActivation;
using rig::cuda::GemmRequest;
using rig::cuda::GemmType;
using rig::cuda::load_element;
using rig::cuda::LtEpilogue;
using rig::cuda::LtPlan;
using rig::cuda::OwnWork;
using rig::cuda::plan_gemm;
using rig::cuda::RigOperand;
using rig::cuda::store_element;

// A buffer of `count` elements of `type`.
struct Buffer {
  GemmType type = GemmType::f32;
  std::vector<std::uint8_t> bytes;
  Buffer() = default;
  Buffer(GemmType t, std::int64_t count)
      : type(t),
        bytes(static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * rig::cuda::size_of(t)) {}
  std::int64_t size() const {
    return static_cast<std::int64_t>(bytes.size() / rig::cuda::size_of(type));
  }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  double get(std::int64_t i) const { return load_element(type, data(), i); }
  void set(std::int64_t i, double v) { store_element(type, data(), i, v); }
};

bool bit(const std::vector<std::uint8_t>& mask, std::int64_t b) {
  return ((mask[static_cast<std::size_t>(b / 8)] >> (b % 8)) & 1U) != 0;
}
void set_bit(std::vector<std::uint8_t>& mask, std::int64_t b, bool v) {
  auto& byte = mask[static_cast<std::size_t>(b / 8)];
  const auto flag = static_cast<std::uint8_t>(1U << (b % 8));
  byte = static_cast<std::uint8_t>(v ? byte | flag : byte & ~flag);
}

bool is_relu(const GemmRequest& r) {
  return r.epilogue.activation == GemmActivation::relu;
}
bool uses_aux(const GemmRequest& r) {
  return r.epilogue.aux || r.epilogue.kind == EpilogueKind::backward;
}
std::int64_t bias_length(const GemmRequest& r) {
  return r.epilogue.kind == EpilogueKind::bias_grad_a ? r.m : r.n;
}

// Every buffer of one product, in rig's row-major terms.
struct Operands {
  Buffer a, b, c, bias;
  Buffer aux;                      // GELU pre-activation
  std::vector<std::uint8_t> mask;  // relu bit mask
};

Operands make_operands(const GemmRequest& r, std::mt19937& rng) {
  std::uniform_int_distribution<int> small(-3, 3);
  Operands o;
  o.a = Buffer(r.a_type, (r.trans_a ? r.k : r.m) * r.lda);
  o.b = Buffer(r.b_type, (r.trans_b ? r.n : r.k) * r.ldb);
  o.c = Buffer(r.c_type, r.m * r.ldc);
  for (std::int64_t i = 0; i < o.a.size(); ++i) o.a.set(i, small(rng));
  for (std::int64_t i = 0; i < o.b.size(); ++i) o.b.set(i, small(rng));
  // beta == 0: C must not be read, so it holds NaN (padding included).
  for (std::int64_t i = 0; i < o.c.size(); ++i) {
    o.c.set(i, r.beta == 0.0F ? std::numeric_limits<double>::quiet_NaN() : small(rng));
  }
  o.bias = Buffer(r.c_type, bias_length(r));
  for (std::int64_t i = 0; i < o.bias.size(); ++i) {
    o.bias.set(i, r.epilogue.kind == EpilogueKind::forward ? small(rng) : -77.0);
  }
  if (uses_aux(r)) {
    const std::int64_t count = r.m * r.epilogue.aux_ld;
    o.mask.assign(static_cast<std::size_t>((count + 7) / 8 + 1), 0);
    for (auto& byte : o.mask) byte = static_cast<std::uint8_t>(rng());
    o.aux = Buffer(r.c_type, count);
    for (std::int64_t i = 0; i < o.aux.size(); ++i) o.aux.set(i, 0.25 * small(rng) + 0.125);
  }
  return o;
}

double activate(GemmActivation act, double v) {
  switch (act) {
    case GemmActivation::none:
      return v;
    case GemmActivation::relu:
      return v > 0.0 ? v : 0.0;
    case GemmActivation::gelu_erf:
      return rig::cuda::gelu_erf(v);
    case GemmActivation::gelu_tanh:
      return rig::cuda::gelu_tanh(v);
  }
  return v;
}

// rig's row-major semantics, straight from the request (see gemm_plan.hpp).
void reference(const GemmRequest& r, Operands& o) {
  const auto op_a = [&](std::int64_t i, std::int64_t l) {
    return r.trans_a ? o.a.get(l * r.lda + i) : o.a.get(i * r.lda + l);
  };
  const auto op_b = [&](std::int64_t l, std::int64_t j) {
    return r.trans_b ? o.b.get(j * r.ldb + l) : o.b.get(l * r.ldb + j);
  };
  const auto& e = r.epilogue;
  std::vector<double> column_sums(static_cast<std::size_t>(r.n), 0.0);
  for (std::int64_t i = 0; i < r.m; ++i) {
    for (std::int64_t j = 0; j < r.n; ++j) {
      double sum = 0.0;
      for (std::int64_t l = 0; l < r.k; ++l) sum += op_a(i, l) * op_b(l, j);
      double v = r.alpha * sum;
      if (r.beta != 0.0F) v += r.beta * o.c.get(i * r.ldc + j);
      const std::int64_t x = i * e.aux_ld + j;
      if (e.kind == EpilogueKind::forward) {
        if (e.bias) v += o.bias.get(j);
        if (e.aux && is_relu(r)) set_bit(o.mask, x, v > 0.0);
        if (e.aux && !is_relu(r)) o.aux.set(x, v);
        v = activate(e.activation, v);
      } else if (e.kind == EpilogueKind::backward) {
        if (is_relu(r)) {
          v = bit(o.mask, x) ? v : 0.0;
        } else {
          const double pre = o.aux.get(x);
          v *= e.activation == GemmActivation::gelu_erf ? rig::cuda::gelu_erf_grad(pre)
                                                        : rig::cuda::gelu_tanh_grad(pre);
        }
        column_sums[static_cast<std::size_t>(j)] += v;
      }
      o.c.set(i * r.ldc + j, v);
    }
  }
  if (e.kind == EpilogueKind::backward && e.bias) {
    for (std::int64_t j = 0; j < r.n; ++j) o.bias.set(j, column_sums[static_cast<std::size_t>(j)]);
  }
  if (e.kind == EpilogueKind::bias_grad_a) {
    for (std::int64_t i = 0; i < r.m; ++i) {
      double sum = 0.0;
      for (std::int64_t l = 0; l < r.k; ++l) sum += op_a(i, l);
      o.bias.set(i, sum);
    }
  }
  if (e.kind == EpilogueKind::bias_grad_b) {
    for (std::int64_t j = 0; j < r.n; ++j) {
      double sum = 0.0;
      for (std::int64_t l = 0; l < r.k; ++l) sum += op_b(l, j);
      o.bias.set(j, sum);
    }
  }
}

// The plan run by the interpreter: cuBLASLt's A and B are whichever rig
// operands the plan names, C and D are rig's C.
void run_plan(const LtPlan& plan, Operands& o) {
  const void* lt_a = plan.a_is == RigOperand::a ? o.a.data() : o.b.data();
  const void* lt_b = plan.b_is == RigOperand::a ? o.a.data() : o.b.data();
  const bool relu_aux = plan.aux_role == rig::cuda::AuxRole::write_relu_mask ||
                        plan.aux_role == rig::cuda::AuxRole::read_relu_mask;
  void* aux =
      relu_aux ? static_cast<void*>(o.mask.data()) : (o.aux.bytes.empty() ? nullptr : o.aux.data());
  rig::cuda::interpret_lt_matmul(plan, lt_a, lt_b, o.c.data(), o.c.data(), o.bias.data(), aux);
  rig::cuda::interpret_own_work(plan, o.c.data(), o.bias.data(), aux);
}

// The tolerance of one output element: exact in f32 without GELU (small
// integers), else a few units in the last place of the output type, scaled by
// the size of what was summed.
double tolerance(const GemmRequest& r, GemmType type, double scale) {
  const bool gelu = r.epilogue.activation == GemmActivation::gelu_erf ||
                    r.epilogue.activation == GemmActivation::gelu_tanh;
  switch (type) {
    case GemmType::f32:
      return gelu ? 1e-5 * scale : 0.0;
    case GemmType::f16:
      return 2e-3 * scale;
    case GemmType::bf16:
      return 1.6e-2 * scale;
  }
  return 0.0;
}

std::string describe(const GemmRequest& r) {
  return "m " + std::to_string(r.m) + " n " + std::to_string(r.n) + " k " + std::to_string(r.k) +
         " trans " + std::to_string(r.trans_a) + std::to_string(r.trans_b) + " ld " +
         std::to_string(r.lda) + "," + std::to_string(r.ldb) + "," + std::to_string(r.ldc) +
         " types " + rig::cuda::name_of(r.a_type) + "->" + rig::cuda::name_of(r.c_type) +
         " alpha " + std::to_string(r.alpha) + " beta " + std::to_string(r.beta) + " kind " +
         std::to_string(static_cast<int>(r.epilogue.kind)) + " act " +
         std::to_string(static_cast<int>(r.epilogue.activation)) + " bias " +
         std::to_string(r.epilogue.bias) + " aux " + std::to_string(r.epilogue.aux) + " aux_ld " +
         std::to_string(r.epilogue.aux_ld);
}

// Whether the plan, interpreted, gives rig's product; failures are reported
// (as a count, with the first few elements), so a test can also expect a
// wrong plan to fail.
int mismatches(const GemmRequest& r, const LtPlan& plan, std::mt19937& rng, bool report) {
  const Operands inputs = make_operands(r, rng);
  Operands want = inputs;
  Operands got = inputs;
  reference(r, want);
  run_plan(plan, got);
  int bad = 0;
  const double scale = 1.0 + std::abs(r.alpha) * 9.0 * static_cast<double>(r.k) + 3.0;
  const auto check = [&](const char* what, double g, double w, double tol) {
    const bool same = (std::isnan(g) && std::isnan(w)) || std::abs(g - w) <= tol;
    if (!same && ++bad <= 3 && report) {
      ADD_FAILURE() << what << ": got " << g << ", want " << w << " (tolerance " << tol << ") for "
                    << describe(r) << "\n  plan " << plan.describe();
    }
  };
  for (std::int64_t i = 0; i < want.c.size(); ++i) {  // padding included: it must stay NaN / C
    check("C", got.c.get(i), want.c.get(i), tolerance(r, r.c_type, scale));
  }
  const bool bias_out = r.epilogue.kind != EpilogueKind::forward &&
                        (r.epilogue.bias || r.epilogue.kind != EpilogueKind::backward);
  if (bias_out) {
    for (std::int64_t i = 0; i < want.bias.size(); ++i) {
      check("bias gradient", got.bias.get(i), want.bias.get(i),
            tolerance(r, r.c_type, scale * static_cast<double>(std::max(r.m, r.n))));
    }
  }
  if (r.epilogue.aux && r.epilogue.kind == EpilogueKind::forward) {
    for (std::int64_t i = 0; i < r.m; ++i) {
      for (std::int64_t j = 0; j < r.n; ++j) {
        const std::int64_t x = i * r.epilogue.aux_ld + j;
        if (is_relu(r)) {
          check("relu mask", bit(got.mask, x), bit(want.mask, x), 0.0);
        } else {
          check("aux", got.aux.get(x), want.aux.get(x), tolerance(r, r.c_type, scale));
        }
      }
    }
  }
  return bad;
}

std::int64_t round_up(std::int64_t x, std::int64_t multiple) {
  return (std::max<std::int64_t>(x, 1) + multiple - 1) / multiple * multiple;
}

std::vector<rig::cuda::Epilogue> every_epilogue() {
  std::vector<rig::cuda::Epilogue> all;
  const GemmActivation acts[] = {GemmActivation::none, GemmActivation::relu,
                                 GemmActivation::gelu_tanh, GemmActivation::gelu_erf};
  for (const GemmActivation act : acts) {
    for (const bool bias : {false, true}) {
      for (const bool aux : {false, true}) {
        if (aux && act == GemmActivation::none) continue;
        all.push_back({EpilogueKind::forward, act, bias, aux, 0});
      }
      if (act != GemmActivation::none) all.push_back({EpilogueKind::backward, act, bias, true, 0});
    }
  }
  all.push_back({EpilogueKind::bias_grad_a, GemmActivation::none, false, false, 0});
  all.push_back({EpilogueKind::bias_grad_b, GemmActivation::none, false, false, 0});
  return all;
}

GemmRequest random_request(std::mt19937& rng, GemmType in, GemmType out,
                           const rig::cuda::Epilogue& epilogue, bool trans_a, bool trans_b) {
  const std::int64_t sizes[] = {1, 1, 2, 3, 4, 5, 7, 8, 9, 13, 17, 33};
  const auto pick = [&] { return sizes[rng() % std::size(sizes)]; };
  const float alphas[] = {1.0F, 2.0F, 0.5F, -1.0F};
  const float betas[] = {0.0F, 1.0F, 0.5F, -2.0F};
  GemmRequest r;
  r.m = pick();
  r.n = pick();
  r.k = rng() % 8 == 0 ? 0 : pick();
  r.trans_a = trans_a;
  r.trans_b = trans_b;
  const std::int64_t pads[] = {0, 0, 1, 3};
  r.lda = std::max<std::int64_t>(1, trans_a ? r.m : r.k) + pads[rng() % 4];
  r.ldb = std::max<std::int64_t>(1, trans_b ? r.k : r.n) + pads[rng() % 4];
  r.ldc = r.n + pads[rng() % 4];
  r.a_type = r.b_type = in;
  r.c_type = out;
  r.alpha = alphas[rng() % 4];
  r.beta = betas[rng() % 4];
  r.allow_tf32 = rng() % 2 == 0;
  r.epilogue = epilogue;
  if (epilogue.kind == EpilogueKind::backward) r.beta = 0.0F;
  if (epilogue.kind != EpilogueKind::forward) r.alpha = 1.0F;
  if (epilogue.kind == EpilogueKind::backward && !epilogue.bias) r.alpha = alphas[rng() % 4];
  if (uses_aux(r)) {
    const std::int64_t multiple = epilogue.activation == GemmActivation::relu ? 128 : 8;
    r.epilogue.aux_ld = round_up(r.n, multiple) + (rng() % 2 == 0 ? 0 : multiple);
  }
  return r;
}

struct TypeCase {
  GemmType in, out;
};
const TypeCase kTypes[] = {{GemmType::f32, GemmType::f32},
                           {GemmType::f16, GemmType::f16},
                           {GemmType::f16, GemmType::f32},
                           {GemmType::bf16, GemmType::bf16},
                           {GemmType::bf16, GemmType::f32}};

TEST(GemmPlan, EveryEpilogueTypeAndTransposeMatchesRowMajorReference) {
  std::mt19937 rng(20240611);
  int cases = 0;
  for (const TypeCase types : kTypes) {
    for (const rig::cuda::Epilogue& epilogue : every_epilogue()) {
      for (const bool trans_a : {false, true}) {
        for (const bool trans_b : {false, true}) {
          for (int repeat = 0; repeat < 4; ++repeat) {
            const GemmRequest r =
                random_request(rng, types.in, types.out, epilogue, trans_a, trans_b);
            const LtPlan plan = plan_gemm(r);
            ASSERT_EQ(mismatches(r, plan, rng, true), 0) << describe(r);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(GemmPlan, BetaOneAccumulatesIntoTheGradientBuffer) {
  // dW += dY^T X with db from BGRADB: the weight gradient of y = x W^T + b.
  std::mt19937 rng(7);
  GemmRequest r;
  r.m = 5;   // out features
  r.n = 3;   // in features
  r.k = 11;  // batch
  r.trans_a = true;
  r.lda = r.m;  // dY [batch, out]
  r.ldb = r.n;  // X [batch, in]
  r.ldc = r.n;  // dW [out, in]
  r.beta = 1.0F;
  r.epilogue.kind = EpilogueKind::bias_grad_a;
  const LtPlan plan = plan_gemm(r);
  EXPECT_EQ(plan.epilogue, LtEpilogue::bgradb);
  EXPECT_EQ(plan.bias_length, 5);
  EXPECT_EQ(plan.beta, 1.0F);
  EXPECT_EQ(mismatches(r, plan, rng, true), 0);
}

// The ops of a linear layer y = act(x W^T + b), x [batch, in], W [out, in],
// mapped onto cuBLASLt: the exact arguments.
TEST(GemmPlan, LinearLayerForwardAndBackwardArguments) {
  const std::int64_t batch = 6, in = 4, out = 5;
  GemmRequest fwd;
  fwd.m = batch;
  fwd.n = out;
  fwd.k = in;
  fwd.trans_b = true;  // W^T
  fwd.lda = in;
  fwd.ldb = in;
  fwd.ldc = out;
  fwd.c_type = fwd.a_type = fwd.b_type = GemmType::bf16;
  fwd.epilogue = {EpilogueKind::forward, GemmActivation::gelu_tanh, true, true, 8};
  LtPlan p = plan_gemm(fwd);
  EXPECT_EQ(p.a_is, RigOperand::b);  // W
  EXPECT_EQ(p.b_is, RigOperand::a);  // x
  EXPECT_TRUE(p.transa);
  EXPECT_FALSE(p.transb);
  EXPECT_EQ(p.m, out);
  EXPECT_EQ(p.n, batch);
  EXPECT_EQ(p.k, in);
  EXPECT_EQ(p.a.rows, in);  // W stored as the column-major [in, out]
  EXPECT_EQ(p.a.cols, out);
  EXPECT_EQ(p.a.ld, in);
  EXPECT_EQ(p.b.rows, in);  // x as the column-major [in, batch]
  EXPECT_EQ(p.b.ld, in);
  EXPECT_EQ(p.d.rows, out);
  EXPECT_EQ(p.d.ld, out);
  EXPECT_EQ(p.epilogue, LtEpilogue::gelu_aux_bias);
  EXPECT_EQ(p.bias_role, rig::cuda::BiasRole::bias);
  EXPECT_EQ(p.bias_type, GemmType::bf16);
  EXPECT_EQ(p.bias_length, out);
  EXPECT_EQ(p.aux_role, rig::cuda::AuxRole::write_gelu_input);
  EXPECT_EQ(p.aux_ld, 8);
  EXPECT_EQ(p.aux_bytes(), 8 * batch * 2);
  EXPECT_FALSE(p.needs_own_activation());

  // dX = dY W, times relu'(pre) of the layer below (its saved mask), and that
  // layer's bias gradient: DRELU_BGRAD.
  GemmRequest dx;
  dx.m = batch;
  dx.n = in;
  dx.k = out;
  dx.lda = out;  // dY [batch, out]
  dx.ldb = in;   // W [out, in]
  dx.ldc = in;
  dx.epilogue = {EpilogueKind::backward, GemmActivation::relu, true, true, 128};
  p = plan_gemm(dx);
  EXPECT_FALSE(p.transa);
  EXPECT_FALSE(p.transb);
  EXPECT_EQ(p.m, in);
  EXPECT_EQ(p.n, batch);
  EXPECT_EQ(p.epilogue, LtEpilogue::drelu_bgrad);
  EXPECT_EQ(p.aux_role, rig::cuda::AuxRole::read_relu_mask);
  EXPECT_EQ(p.bias_role, rig::cuda::BiasRole::bias_grad);
  EXPECT_EQ(p.bias_length, in);
  EXPECT_EQ(p.aux_bytes(), 128 * batch / 8);

  // dW += dY^T x and db, accumulating.
  GemmRequest dw;
  dw.m = out;
  dw.n = in;
  dw.k = batch;
  dw.trans_a = true;
  dw.lda = out;
  dw.ldb = in;
  dw.ldc = in;
  dw.beta = 1.0F;
  dw.allow_tf32 = true;
  dw.epilogue.kind = EpilogueKind::bias_grad_a;
  p = plan_gemm(dw);
  EXPECT_FALSE(p.transa);
  EXPECT_TRUE(p.transb);
  EXPECT_EQ(p.m, in);
  EXPECT_EQ(p.n, out);
  EXPECT_EQ(p.k, batch);
  EXPECT_EQ(p.compute, rig::cuda::GemmCompute::tf32);
  EXPECT_EQ(p.epilogue, LtEpilogue::bgradb);
  EXPECT_EQ(p.bias_length, out);
}

TEST(GemmPlan, TheErfGeluIsNeverCuBlasLtsTanhGelu) {
  for (const TypeCase types : kTypes) {
    for (rig::cuda::Epilogue e : every_epilogue()) {
      if (e.activation != GemmActivation::gelu_erf) continue;
      GemmRequest r;
      r.m = 3;
      r.n = 5;
      r.k = 2;
      r.lda = 2;
      r.ldb = 5;
      r.ldc = 5;
      r.a_type = r.b_type = types.in;
      r.c_type = types.out;
      e.aux_ld = 8;
      r.epilogue = e;
      const LtPlan p = plan_gemm(r);
      const auto bits = static_cast<std::uint32_t>(p.epilogue);
      EXPECT_EQ(bits & (32U | 64U), 0U) << rig::cuda::name_of(p.epilogue);
      EXPECT_TRUE(p.needs_own_activation());
      EXPECT_EQ(p.own_work, e.kind == EpilogueKind::forward ? OwnWork::gelu_erf_forward
                                                            : OwnWork::gelu_erf_backward);
      if (e.kind == EpilogueKind::forward) {
        EXPECT_EQ(p.epilogue, e.bias ? LtEpilogue::bias : LtEpilogue::default_);
        EXPECT_EQ(p.own_writes_aux, e.aux);
      } else {
        EXPECT_EQ(p.epilogue, LtEpilogue::default_);  // bgrad must follow the derivative
        EXPECT_EQ(p.own_bias_grad, e.bias);
      }
    }
  }
}

TEST(GemmPlan, TF32OnlyWhenAllowedAndF32) {
  GemmRequest r;
  r.m = r.n = r.k = r.lda = r.ldb = r.ldc = 2;
  EXPECT_EQ(plan_gemm(r).compute, rig::cuda::GemmCompute::f32);
  r.allow_tf32 = true;
  EXPECT_EQ(plan_gemm(r).compute, rig::cuda::GemmCompute::tf32);
  r.a_type = r.b_type = GemmType::bf16;
  EXPECT_EQ(plan_gemm(r).compute, rig::cuda::GemmCompute::f32);
  EXPECT_EQ(plan_gemm(r).scale_type, GemmType::f32);
}

// The interpreter itself, on a product worked by hand in column-major terms.
TEST(LtInterpreter, ColumnMajorProductBiasPerRowAndBiasGradients) {
  LtPlan p;
  p.m = 2;
  p.n = 3;
  p.k = 2;
  p.a = {GemmType::f32, 2, 2, 2};  // A = [1 3; 2 4]
  p.b = {GemmType::f32, 2, 3, 2};  // B = [1 0 1; 0 1 1]
  p.c = p.d = {GemmType::f32, 2, 3, 2};
  const float a[] = {1, 2, 3, 4};
  const float b[] = {1, 0, 0, 1, 1, 1};
  float d[6] = {};
  float bias[3] = {10, 20, 0};
  p.epilogue = LtEpilogue::bias;
  rig::cuda::interpret_lt_matmul(p, a, b, d, d, bias, nullptr);
  // AB = [1 3 4; 2 4 6], + bias per row.
  const float want[] = {11, 22, 13, 24, 14, 26};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d[i], want[i]) << i;
  p.epilogue = LtEpilogue::bgrada;
  rig::cuda::interpret_lt_matmul(p, a, b, d, d, bias, nullptr);
  EXPECT_EQ(bias[0], 4);  // row sums of A
  EXPECT_EQ(bias[1], 6);
  p.epilogue = LtEpilogue::bgradb;
  rig::cuda::interpret_lt_matmul(p, a, b, d, d, bias, nullptr);
  EXPECT_EQ(bias[0], 1);  // column sums of B
  EXPECT_EQ(bias[1], 1);
  EXPECT_EQ(bias[2], 2);
  // RELU_AUX: bit i + j * 128 of the mask.
  const float neg_a[] = {-1, 2, -3, 4};
  std::uint8_t mask[16 * 3] = {};
  p.epilogue = LtEpilogue::relu_aux;
  p.aux_ld = 128;
  rig::cuda::interpret_lt_matmul(p, neg_a, b, d, d, nullptr, mask);
  // AB = [-1 -3 -4; 2 4 6]: row 0 negative, row 1 positive.
  EXPECT_EQ(mask[0], 2U);
  EXPECT_EQ(mask[16], 2U);
  EXPECT_EQ(mask[32], 2U);
  EXPECT_EQ(d[0], 0.0F);
  EXPECT_EQ(d[1], 2.0F);
}

// A wrong plan must fail the comparison: the test can tell.
TEST(GemmPlan, TheComparisonCatchesAWrongPlan) {
  std::mt19937 rng(3);
  GemmRequest r;
  r.m = 3;  // m == n: the wrong bias gradient has the right length
  r.n = 3;
  r.k = 5;
  r.lda = 5;
  r.ldb = 3;
  r.ldc = 3;
  r.epilogue.kind = EpilogueKind::bias_grad_b;
  LtPlan plan = plan_gemm(r);
  plan.epilogue = LtEpilogue::bgradb;  // the other operand's sums
  EXPECT_GT(mismatches(r, plan, rng, false), 0);
  // Square, so that the operands' layouts fit either way: C instead of C^T.
  r.m = r.n = r.k = r.lda = r.ldb = r.ldc = 4;
  r.epilogue = {};
  r.epilogue.bias = true;
  plan = plan_gemm(r);
  std::swap(plan.a_is, plan.b_is);
  std::swap(plan.a, plan.b);
  std::swap(plan.transa, plan.transb);
  EXPECT_GT(mismatches(r, plan, rng, false), 0);
}

void expect_invalid(const GemmRequest& r, const std::string& needle) {
  try {
    plan_gemm(r);
    ADD_FAILURE() << "no exception, expected one naming " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GemmPlan, RejectsBadRequestsNamingTheValue) {
  GemmRequest good;
  good.m = 4;
  good.n = 6;
  good.k = 5;
  good.lda = 5;
  good.ldb = 6;
  good.ldc = 6;
  EXPECT_NO_THROW(plan_gemm(good));
  GemmRequest r = good;
  r.lda = 4;
  expect_invalid(r, "lda = 4 is below 5");
  r = good;
  r.trans_a = true;  // A is [k, m]: rows of m = 4
  r.lda = 4;
  EXPECT_NO_THROW(plan_gemm(r));
  r.lda = 3;
  expect_invalid(r, "lda = 3 is below 4");
  r = good;
  r.ldb = 5;
  expect_invalid(r, "ldb = 5");
  r = good;
  r.ldc = 0;
  expect_invalid(r, "ldc = 0");
  r = good;
  r.m = -1;
  expect_invalid(r, "expected sizes >= 0");
  r = good;
  r.b_type = GemmType::f16;
  expect_invalid(r, "b_type f16");
  r = good;
  r.a_type = r.b_type = GemmType::f16;
  r.c_type = GemmType::bf16;
  expect_invalid(r, "c_type bf16");
  r = good;
  r.epilogue = {EpilogueKind::forward, GemmActivation::relu, true, true, 64};
  expect_invalid(r, "aux_ld = 64: expected a multiple of 128 bits");
  r.epilogue.aux_ld = 128;
  EXPECT_NO_THROW(plan_gemm(r));
  r.epilogue = {EpilogueKind::forward, GemmActivation::gelu_tanh, false, true, 12};
  expect_invalid(r, "aux_ld = 12: expected a multiple of 8 elements");
  r.epilogue.aux_ld = 0;
  expect_invalid(r, "aux_ld = 0");
  r.n = 9;
  r.ldc = 9;
  r.ldb = 9;
  r.epilogue.aux_ld = 8;
  expect_invalid(r, ">= n = 9");
  r = good;
  r.epilogue = {EpilogueKind::forward, GemmActivation::none, false, true, 8};
  expect_invalid(r, "aux without an activation");
  r = good;
  r.beta = 1.0F;
  r.epilogue = {EpilogueKind::backward, GemmActivation::gelu_tanh, false, true, 8};
  expect_invalid(r, "beta = 1");
  r.beta = 0.0F;
  r.epilogue.activation = GemmActivation::none;
  expect_invalid(r, "activation none");
  r = good;
  r.alpha = 2.0F;
  r.epilogue.kind = EpilogueKind::bias_grad_a;
  expect_invalid(r, "alpha = 2");
  r.alpha = 1.0F;
  r.epilogue.bias = true;
  expect_invalid(r, "bias-gradient epilogue");
}

// ---- Strided batches -------------------------------------------------------------

// Elements a batch of `count` matrices of `rows` rows of ld spans, `stride` apart.
std::int64_t extent(std::int64_t count, std::int64_t stride, std::int64_t rows, std::int64_t ld) {
  if (count == 0) return 0;
  return (count - 1) * stride + rows * ld;
}

// Buffers of a batch in rig's row-major terms.
struct BatchOperands {
  Buffer a, b, c;
};

BatchOperands make_batch_operands(const GemmRequest& r, std::mt19937& rng) {
  std::uniform_int_distribution<int> small(-3, 3);
  BatchOperands o;
  // A and B are padded by a batch's largest stride: a plan with the wrong
  // batch offsets (the mutation tests) then reads wrong elements, never past
  // the buffers.
  const std::int64_t pad =
      std::max(r.stride_a, r.stride_b) * std::max<std::int64_t>(r.batch_count, 1);
  o.a = Buffer(r.a_type, extent(r.batch_count, r.stride_a, r.trans_a ? r.k : r.m, r.lda) + pad);
  o.b = Buffer(r.b_type, extent(r.batch_count, r.stride_b, r.trans_b ? r.n : r.k, r.ldb) + pad);
  o.c = Buffer(r.c_type, extent(r.batch_count, r.stride_c, r.m, r.ldc));
  for (std::int64_t i = 0; i < o.a.size(); ++i) o.a.set(i, small(rng));
  for (std::int64_t i = 0; i < o.b.size(); ++i) o.b.set(i, small(rng));
  // beta == 0: C must not be read, so it holds NaN (padding and gaps included).
  for (std::int64_t i = 0; i < o.c.size(); ++i) {
    o.c.set(i, r.beta == 0.0F ? std::numeric_limits<double>::quiet_NaN() : small(rng));
  }
  return o;
}

// rig's row-major semantics of a batch, straight from the request.
void batch_reference(const GemmRequest& r, BatchOperands& o) {
  for (std::int64_t batch = 0; batch < r.batch_count; ++batch) {
    const std::int64_t a0 = batch * r.stride_a, b0 = batch * r.stride_b, c0 = batch * r.stride_c;
    for (std::int64_t i = 0; i < r.m; ++i) {
      for (std::int64_t j = 0; j < r.n; ++j) {
        double sum = 0.0;
        for (std::int64_t l = 0; l < r.k; ++l) {
          const double av = o.a.get(a0 + (r.trans_a ? l * r.lda + i : i * r.lda + l));
          const double bv = o.b.get(b0 + (r.trans_b ? j * r.ldb + l : l * r.ldb + j));
          sum += av * bv;
        }
        double v = r.alpha * sum;
        if (r.beta != 0.0F) v += r.beta * o.c.get(c0 + i * r.ldc + j);
        o.c.set(c0 + i * r.ldc + j, activate(r.epilogue.activation, v));
      }
    }
  }
}

// The batched plan run once by the interpreter.
void run_batch_plan(const LtPlan& plan, BatchOperands& o) {
  const void* lt_a = plan.a_is == RigOperand::a ? o.a.data() : o.b.data();
  const void* lt_b = plan.b_is == RigOperand::a ? o.a.data() : o.b.data();
  rig::cuda::interpret_lt_matmul(plan, lt_a, lt_b, o.c.data(), o.c.data(), nullptr, nullptr);
}

// The naive batch: one unbatched plan per product, on the operands' offsets.
void run_unbatched_loop(const GemmRequest& r, BatchOperands& o) {
  GemmRequest one = r;
  one.batch_count = 1;
  one.stride_a = one.stride_b = one.stride_c = 0;
  const LtPlan plan = plan_gemm(one);
  ASSERT_EQ(plan.batch_count(), 1);
  const auto element = [](Buffer& buffer, std::int64_t index) {
    return buffer.bytes.data() + index * static_cast<std::int64_t>(rig::cuda::size_of(buffer.type));
  };
  for (std::int64_t batch = 0; batch < r.batch_count; ++batch) {
    void* a = element(o.a, batch * r.stride_a);
    void* b = element(o.b, batch * r.stride_b);
    void* c = element(o.c, batch * r.stride_c);
    rig::cuda::interpret_lt_matmul(plan, plan.a_is == RigOperand::a ? a : b,
                                   plan.b_is == RigOperand::a ? a : b, c, c, nullptr, nullptr);
  }
}

std::string describe_batch(const GemmRequest& r) {
  return describe(r) + " batch " + std::to_string(r.batch_count) + " strides " +
         std::to_string(r.stride_a) + "," + std::to_string(r.stride_b) + "," +
         std::to_string(r.stride_c);
}

// Mismatches of the plan, interpreted, against rig's batched reference (every
// element of C, padding and gaps between batches included).
int batch_mismatches(const GemmRequest& r, const LtPlan& plan, std::mt19937& rng, bool report) {
  const BatchOperands inputs = make_batch_operands(r, rng);
  BatchOperands want = inputs;
  BatchOperands got = inputs;
  batch_reference(r, want);
  run_batch_plan(plan, got);
  const double scale = 1.0 + std::abs(r.alpha) * 9.0 * static_cast<double>(r.k) + 3.0;
  const double tol = tolerance(r, r.c_type, scale);
  int bad = 0;
  for (std::int64_t i = 0; i < want.c.size(); ++i) {
    const double g = got.c.get(i), w = want.c.get(i);
    const bool same = (std::isnan(g) && std::isnan(w)) || std::abs(g - w) <= tol;
    if (!same && ++bad <= 3 && report) {
      ADD_FAILURE() << "C[" << i << "]: got " << g << ", want " << w << " (tolerance " << tol
                    << ") for " << describe_batch(r) << "\n  plan " << plan.describe();
    }
  }
  return bad;
}

// How a batch's operand is laid out: the same matrix for every product
// (stride 0), one after another (dense or with a gap), or side by side in
// each row (ld grows to hold every product's columns, as heads in [batch,
// seq, heads, dim]).
enum class Spacing { broadcast, dense, gap, side_by_side };

// Sets ld and stride of one operand stored with `rows` rows of `cols` columns.
void space(Spacing spacing, std::int64_t count, std::int64_t rows, std::int64_t cols,
           std::int64_t& ld, std::int64_t& stride) {
  switch (spacing) {
    case Spacing::broadcast:
      stride = 0;
      return;
    case Spacing::dense:
      stride = rows * ld;
      return;
    case Spacing::gap:
      stride = rows * ld + 5;
      return;
    case Spacing::side_by_side:
      stride = std::max<std::int64_t>(1, cols) + 1;
      ld = std::max(ld, std::max<std::int64_t>(1, count) * stride);
      return;
  }
}

TEST(GemmPlanBatch, BatchOneKeepsThePlanItsStringAndItsCacheKey) {
  std::mt19937 rng(99);
  for (const TypeCase types : kTypes) {
    for (const rig::cuda::Epilogue& epilogue : every_epilogue()) {
      GemmRequest r =
          random_request(rng, types.in, types.out, epilogue, rng() % 2 == 0, rng() % 2 == 0);
      const LtPlan before = plan_gemm(r);
      r.stride_a = 7;  // ignored with batch_count 1
      r.stride_b = 0;
      r.stride_c = 3;
      const LtPlan after = plan_gemm(r);
      EXPECT_EQ(after.describe(), before.describe());
      EXPECT_EQ(after.describe().find("batch"), std::string::npos) << after.describe();
      for (const rig::cuda::LtLayout* layout : {&after.a, &after.b, &after.c, &after.d}) {
        EXPECT_EQ(layout->batch_count, 1);
        EXPECT_EQ(layout->batch_offset, 0);
        EXPECT_FALSE(layout->batched());
      }
      EXPECT_EQ(after.batch_count(), 1);
    }
  }
}

// Q K^T per head of one sequence's q [seq, heads, dim] against a k shared by
// every head (as in multi-query attention): the exact layout arguments.
TEST(GemmPlanBatch, SwappedOperandsTakeSwappedStrides) {
  const std::int64_t heads = 4, seq = 6, dim = 8;
  GemmRequest r;
  r.m = seq;
  r.n = seq;
  r.k = dim;
  r.trans_b = true;
  r.lda = heads * dim;
  r.ldb = dim;
  r.ldc = seq;
  r.batch_count = heads;
  r.stride_a = dim;  // q's heads side by side in each row
  r.stride_b = 0;    // one k [seq, dim] for every head (broadcast)
  r.stride_c = seq * seq;
  const LtPlan p = plan_gemm(r);
  EXPECT_EQ(p.a_is, RigOperand::b);
  EXPECT_EQ(p.a.batch_offset, 0);    // cuBLASLt's A is rig's B
  EXPECT_EQ(p.b.batch_offset, dim);  // cuBLASLt's B is rig's A
  EXPECT_EQ(p.c.batch_offset, seq * seq);
  EXPECT_EQ(p.d.batch_offset, seq * seq);
  for (const rig::cuda::LtLayout* layout : {&p.a, &p.b, &p.c, &p.d}) {
    EXPECT_EQ(layout->batch_count, heads);
  }
  EXPECT_EQ(p.batch_count(), heads);
  EXPECT_NE(p.describe().find(", batch 4 offsets A 0 B 8 C 36 D 36)"), std::string::npos)
      << p.describe();
  std::mt19937 rng(5);
  EXPECT_EQ(batch_mismatches(r, p, rng, true), 0);
}

TEST(GemmPlanBatch, BatchesMatchTheReferenceAndALoopOfSingleProducts) {
  std::mt19937 rng(424242);
  const Spacing spacings[] = {Spacing::broadcast, Spacing::dense, Spacing::gap,
                              Spacing::side_by_side};
  const GemmActivation acts[] = {GemmActivation::none, GemmActivation::relu,
                                 GemmActivation::gelu_tanh};
  const std::int64_t counts[] = {0, 1, 2, 3, 5};
  int cases = 0, broadcast_a = 0, broadcast_b = 0, beta_cases = 0, padded_c = 0;
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      for (const Spacing sa : spacings) {
        for (const Spacing sb : spacings) {
          for (const bool c_side_by_side : {false, true}) {
            for (int repeat = 0; repeat < 2; ++repeat) {
              const TypeCase types = kTypes[rng() % std::size(kTypes)];
              rig::cuda::Epilogue e;
              e.activation = acts[rng() % std::size(acts)];
              GemmRequest r = random_request(rng, types.in, types.out, e, trans_a, trans_b);
              r.batch_count = counts[rng() % std::size(counts)];
              space(sa, r.batch_count, trans_a ? r.k : r.m, trans_a ? r.m : r.k, r.lda, r.stride_a);
              space(sb, r.batch_count, trans_b ? r.n : r.k, trans_b ? r.k : r.n, r.ldb, r.stride_b);
              space(c_side_by_side ? Spacing::side_by_side : Spacing::dense, r.batch_count, r.m,
                    r.n, r.ldc, r.stride_c);
              SCOPED_TRACE(describe_batch(r));
              const LtPlan plan = plan_gemm(r);
              ASSERT_EQ(plan.batch_count(), r.batch_count);
              ASSERT_EQ(batch_mismatches(r, plan, rng, true), 0);

              // The batched plan gives the bits of one single product per batch.
              const BatchOperands inputs = make_batch_operands(r, rng);
              BatchOperands batched = inputs;
              BatchOperands looped = inputs;
              run_batch_plan(plan, batched);
              run_unbatched_loop(r, looped);
              ASSERT_EQ(batched.c.bytes, looped.c.bytes);
              ASSERT_EQ(batched.a.bytes, inputs.a.bytes);
              ASSERT_EQ(batched.b.bytes, inputs.b.bytes);

              ++cases;
              broadcast_a += r.batch_count > 1 && r.stride_a == 0;
              broadcast_b += r.batch_count > 1 && r.stride_b == 0;
              beta_cases += r.batch_count > 1 && r.beta != 0.0F;
              padded_c += r.batch_count > 1 && r.ldc > r.n;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 256);
  EXPECT_GT(broadcast_a, 10);
  EXPECT_GT(broadcast_b, 10);
  EXPECT_GT(beta_cases, 10);
  EXPECT_GT(padded_c, 10);
}

// The interpreter's batch by hand: D_b = A_b B with B broadcast, column-major.
TEST(LtInterpreter, StridedBatchWithABroadcastOperand) {
  LtPlan p;
  p.m = 2;
  p.n = 1;
  p.k = 2;
  p.a = {GemmType::f32, 2, 2, 2, 2, 5};  // two 2x2 matrices 5 elements apart
  p.b = {GemmType::f32, 2, 1, 2, 2, 0};  // one column for both
  p.c = p.d = {GemmType::f32, 2, 1, 2, 2, 3};
  const float a[] = {1, 2, 3, 4, -9, 10, 20, 30, 40};  // A_0 = [1 3; 2 4], A_1 = [10 30; 20 40]
  const float b[] = {1, 1};
  float d[5] = {-1, -1, -1, -1, -1};
  rig::cuda::interpret_lt_matmul(p, a, b, nullptr, d, nullptr, nullptr);
  const float want[] = {4, 6, -1, 40, 60};  // row sums; the gap is left as it was
  for (int i = 0; i < 5; ++i) EXPECT_EQ(d[i], want[i]) << i;
  // An empty batch writes nothing; differing counts and a batched bias are refused.
  p.a.batch_count = p.b.batch_count = p.c.batch_count = p.d.batch_count = 0;
  rig::cuda::interpret_lt_matmul(p, a, b, nullptr, d, nullptr, nullptr);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(d[i], want[i]) << i;
  p.a.batch_count = 2;
  EXPECT_THROW(rig::cuda::interpret_lt_matmul(p, a, b, nullptr, d, nullptr, nullptr),
               std::invalid_argument);
  p.b.batch_count = p.c.batch_count = p.d.batch_count = 2;
  p.epilogue = LtEpilogue::bias;
  p.bias_role = rig::cuda::BiasRole::bias;
  p.bias_length = 2;
  float bias[2] = {};
  EXPECT_THROW(rig::cuda::interpret_lt_matmul(p, a, b, nullptr, d, bias, nullptr),
               std::invalid_argument);
}

TEST(GemmPlanBatch, TheComparisonCatchesAWrongBatchOffset) {
  std::mt19937 rng(8);
  GemmRequest r;
  r.m = 3;
  r.n = 4;
  r.k = 5;
  r.lda = 5;
  r.ldb = 4;
  r.ldc = 4;
  r.batch_count = 3;
  r.stride_a = 15;
  r.stride_b = 20;
  r.stride_c = 12;
  LtPlan plan = plan_gemm(r);
  EXPECT_EQ(batch_mismatches(r, plan, rng, true), 0);
  plan.b.batch_offset = 0;  // rig's A broadcast instead of stepped
  EXPECT_GT(batch_mismatches(r, plan, rng, false), 0);
  plan = plan_gemm(r);
  std::swap(plan.a.batch_offset, plan.b.batch_offset);  // unswapped strides (in the padding)
  EXPECT_GT(batch_mismatches(r, plan, rng, false), 0);
}

TEST(GemmPlanBatch, RejectsBadBatchesNamingTheValue) {
  GemmRequest good;
  good.m = 4;
  good.n = 6;
  good.k = 5;
  good.lda = 5;
  good.ldb = 6;
  good.ldc = 6;
  good.batch_count = 3;
  good.stride_a = 20;
  good.stride_b = 30;
  good.stride_c = 24;
  EXPECT_NO_THROW(plan_gemm(good));
  GemmRequest r = good;
  r.batch_count = -1;
  expect_invalid(r, "batch_count = -1: expected 0 to 2147483647");
  r.batch_count = std::int64_t{1} << 31;
  expect_invalid(r, "batch_count = 2147483648");
  r = good;
  r.stride_b = -30;
  expect_invalid(r, "stride_a, stride_b, stride_c = 20, -30, 24: expected strides >= 0");
  r = good;
  r.batch_count = 1;
  r.stride_c = -1;  // refused even where the strides are not used
  expect_invalid(r, "expected strides >= 0");

  // C: one after another needs (m - 1) * ldc + n = 24; side by side needs room in ldc.
  r = good;
  r.stride_c = 23;
  expect_invalid(r, "stride_c = 23 makes the 3 batches of C [4, 6] with ldc 6 overlap");
  r.stride_c = 0;
  expect_invalid(r, "stride_c = 0 makes the 3 batches");
  r.ldc = 18;  // three 6-column products side by side in each row
  r.stride_c = 6;
  EXPECT_NO_THROW(plan_gemm(r));
  r.stride_c = 5;  // columns overlap
  expect_invalid(r, "stride_c = 5");
  r.stride_c = 7;  // the third product's last column would pass ldc
  expect_invalid(r, "stride_c = 7");
  r.stride_c = 3 * 18 + 6;  // one after another
  EXPECT_NO_THROW(plan_gemm(r));
  r = good;
  r.m = 1;  // one row: stride n is one after another
  r.stride_c = 6;
  EXPECT_NO_THROW(plan_gemm(r));
  r = good;
  r.n = 0;  // nothing written: any stride
  r.ldb = 1;
  r.ldc = 1;
  r.stride_c = 0;
  EXPECT_NO_THROW(plan_gemm(r));
  r = good;
  r.stride_a = r.stride_b = 0;  // A and B may be broadcast
  EXPECT_NO_THROW(plan_gemm(r));
  r.batch_count = 0;
  r.stride_c = 0;
  EXPECT_NO_THROW(plan_gemm(r));
  EXPECT_EQ(plan_gemm(r).batch_count(), 0);

  // The same test, as the back end asks it before choosing a batch.
  EXPECT_TRUE(rig::cuda::strided_batches_apart(4, 6, 18, 3, 6));    // side by side
  EXPECT_FALSE(rig::cuda::strided_batches_apart(4, 6, 18, 4, 6));   // a fourth passes ldc
  EXPECT_TRUE(rig::cuda::strided_batches_apart(4, 6, 18, 4, 60));   // one after another
  EXPECT_FALSE(rig::cuda::strided_batches_apart(4, 6, 18, 2, 59));  // last row meets the next
  EXPECT_TRUE(rig::cuda::strided_batches_apart(4, 6, 18, 1, 0));    // one matrix
  EXPECT_TRUE(rig::cuda::strided_batches_apart(0, 6, 18, 5, 0));    // nothing written

  // A batch takes no bias, aux, bias gradient or erf GELU.
  for (const rig::cuda::Epilogue& e : every_epilogue()) {
    r = good;
    r.epilogue = e;
    r.epilogue.aux_ld = e.activation == GemmActivation::relu ? 128 : 8;
    if (e.kind == EpilogueKind::backward) r.beta = 0.0F;
    const bool plain = e.kind == EpilogueKind::forward && !e.bias && !e.aux &&
                       e.activation != GemmActivation::gelu_erf;
    r.batch_count = 1;
    EXPECT_NO_THROW(plan_gemm(r));
    for (const std::int64_t count : {0, 2}) {
      r.batch_count = count;
      if (plain) {
        EXPECT_NO_THROW(plan_gemm(r));
      } else {
        expect_invalid(r, "with a bias, aux, bias-gradient or erf GELU epilogue");
      }
    }
  }
}

}  // namespace
