// AttentionSoftmaxForward / AttentionSoftmaxBackward against their CPU
// reference: the keep-mask materialised on the host (the broadcast mask and
// causality), SoftmaxForward / SoftmaxBackward on it (themselves checked
// against the CPU back end in test_softmax.cpp), the dropout's product and
// the rounding to the weights' type computed on the host. The folded
// kernels must give those bits, under every schedule.
#include "cuda/kernels/attention_softmax.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "cuda/kernels/element_type.hpp"
#include "kernel_test_util.hpp"
#include "rig/half.hpp"

namespace rig::kernels::test {
namespace {

struct Case {
  std::int64_t batches = 2, heads = 3, tq = 4, tk = 37;
  bool mask = true, causal = false, dropout = false;
};

struct Inputs {
  std::vector<float> scores, g;
  std::vector<std::uint8_t> mask;  // [B, 1, 1, Tk]: key padding, broadcast
  std::vector<std::uint8_t> keep;  // [planes, tq, tk]
};

Inputs inputs_of(const Case& c, std::uint32_t seed) {
  const std::int64_t n = c.batches * c.heads * c.tq * c.tk;
  Inputs in;
  in.scores = uniform(n, -6.0F, 6.0F, seed);
  in.g = uniform(n, -1.0F, 1.0F, seed + 1);
  in.mask.assign(static_cast<std::size_t>(c.batches * c.tk), 1);
  for (std::int64_t j = 0; j < c.tk; j += 3) in.mask[static_cast<std::size_t>(j)] = 0;
  // The last batch element sees no key at all: its rows are zeros.
  for (std::int64_t j = 0; j < c.tk; ++j) {
    in.mask[static_cast<std::size_t>((c.batches - 1) * c.tk + j)] = 0;
  }
  std::mt19937 gen(seed + 2);
  in.keep.resize(static_cast<std::size_t>(n));
  for (auto& k : in.keep) k = gen() % 4 != 0 ? 1 : 0;
  return in;
}

// The keep-mask [planes, tq, tk] the composed kernels used to materialise.
std::vector<std::uint8_t> full_mask(const Case& c, const Inputs& in) {
  std::vector<std::uint8_t> full(in.keep.size());
  for (std::int64_t p = 0; p < c.batches * c.heads; ++p) {
    for (std::int64_t i = 0; i < c.tq; ++i) {
      for (std::int64_t j = 0; j < c.tk; ++j) {
        const bool masked =
            c.mask && in.mask[static_cast<std::size_t>((p / c.heads) * c.tk + j)] == 0;
        const bool future = c.causal && j > i + (c.tk - c.tq);
        full[static_cast<std::size_t>((p * c.tq + i) * c.tk + j)] = masked || future ? 0 : 1;
      }
    }
  }
  return full;
}

float dropped(float p, std::uint8_t keep, float scale) {
  return p * static_cast<float>(keep) * scale;
}

std::vector<std::uint16_t> bits_of(const std::vector<float>& x, ElementType type) {
  std::vector<std::uint16_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    out[i] = type == ElementType::bf16 ? float_to_bfloat16_bits(x[i]) : float_to_half_bits(x[i]);
  }
  return out;
}

// A kernel's output of `type` as bytes, to compare bit for bit.
std::vector<std::uint8_t> bytes_of(const void* data, std::size_t n, ElementType type) {
  const std::size_t size = type == ElementType::f32 ? 4 : 2;
  std::vector<std::uint8_t> out(n * size);
  std::memcpy(out.data(), data, out.size());
  return out;
}
std::vector<std::uint8_t> bytes_of(const std::vector<float>& x, ElementType type) {
  if (type == ElementType::f32) return bytes_of(x.data(), x.size(), type);
  const std::vector<std::uint16_t> b = bits_of(x, type);
  return bytes_of(b.data(), b.size(), type);
}

void check(const Case& c, ElementType type) {
  SCOPED_TRACE(::testing::Message()
               << "tk " << c.tk << " tq " << c.tq << " mask " << c.mask << " causal " << c.causal
               << " dropout " << c.dropout << " type " << static_cast<int>(type));
  const std::int64_t planes = c.batches * c.heads, rows = planes * c.tq;
  const auto n = static_cast<std::size_t>(rows * c.tk);
  const float scale = 1.25F;
  const Inputs in = inputs_of(c, static_cast<std::uint32_t>(c.tk * 7 + c.tq));
  const std::vector<std::uint8_t> mask = full_mask(c, in);
  const bool any_mask = c.mask || c.causal;

  // The reference: SoftmaxForward on the materialised mask, then the dropout and rounding.
  std::vector<float> want_probs(n), want_weights(n), want_dscores(n);
  run(SoftmaxForward{in.scores.data(), any_mask ? mask.data() : nullptr, want_probs.data(), rows,
                     c.tk, false});
  std::vector<float> kept_g = in.g;
  for (std::size_t e = 0; e < n; ++e) {
    want_weights[e] = c.dropout ? dropped(want_probs[e], in.keep[e], scale) : want_probs[e];
    if (c.dropout) kept_g[e] = dropped(in.g[e], in.keep[e], scale);
  }
  run(SoftmaxBackward{want_probs.data(), kept_g.data(), want_dscores.data(), rows, c.tk, false});

  for (const std::uint64_t seed : kSeeds) {
    std::vector<float> probs(n, 9.0F);
    std::vector<std::uint8_t> weights(n * 4, 0xFF), dscores(n * 4, 0xFF),
        weights_again(n * 4, 0xFF);
    AttentionSoftmaxForward f;
    f.scores = in.scores.data();
    if (c.mask) {
      f.mask = in.mask.data();
      f.mask_b = c.tk;  // [B, 1, 1, Tk]
      f.mask_k = 1;
    }
    f.causal = c.causal;
    f.keep = c.dropout ? in.keep.data() : nullptr;
    f.keep_scale = scale;
    f.probs = probs.data();
    f.weights = weights.data();
    f.type = type;
    f.heads = c.heads;
    f.planes = planes;
    f.tq = c.tq;
    f.tk = c.tk;
    run(f, seed);
    EXPECT_TRUE(bit_equal(probs, want_probs)) << "probs";
    EXPECT_TRUE(bit_equal(bytes_of(weights.data(), n, type), bytes_of(want_weights, type)))
        << "weights";

    // Backward, in place for f32 (dscores over g), with the weights again.
    std::vector<float> g = in.g;
    AttentionSoftmaxBackward b{
        want_probs.data(),
        g.data(),
        f.keep,
        scale,
        type == ElementType::f32 ? static_cast<void*>(g.data()) : dscores.data(),
        weights_again.data(),
        type,
        rows,
        c.tk};
    run(b, seed);
    const void* got_dscores =
        type == ElementType::f32 ? static_cast<void*>(g.data()) : dscores.data();
    EXPECT_TRUE(bit_equal(bytes_of(got_dscores, n, type), bytes_of(want_dscores, type)))
        << "dscores";
    EXPECT_TRUE(bit_equal(bytes_of(weights_again.data(), n, type), bytes_of(want_weights, type)))
        << "weights again";

    // The weights alone (no scores' gradient wanted): g is not read.
    std::vector<std::uint8_t> only(n * 4, 0xFF);
    run(AttentionSoftmaxBackward{want_probs.data(), nullptr, f.keep, scale, nullptr, only.data(),
                                 type, rows, c.tk},
        seed);
    EXPECT_TRUE(bit_equal(bytes_of(only.data(), n, type), bytes_of(want_weights, type)))
        << "weights only";
  }
}

TEST(KernelAttentionSoftmax, IsTheMaskedSoftmaxDropoutAndRounding) {
  for (const ElementType type : {ElementType::f32, ElementType::bf16, ElementType::f16}) {
    for (const bool dropout : {false, true}) {
      Case c;
      c.dropout = dropout;
      check(c, type);  // key padding broadcast over heads and queries
      c.causal = true;
      c.tq = 3;
      c.tk = 5;  // query i sees keys j <= i + 2
      check(c, type);
      c.mask = false;
      c.tq = c.tk = 6;
      check(c, type);  // causal alone
    }
  }
}

// Rows longer than kSoftmaxWarpCols take a block each.
TEST(KernelAttentionSoftmax, LongRowsTakeABlock) {
  for (const ElementType type : {ElementType::f32, ElementType::bf16}) {
    Case c;
    c.batches = 2;
    c.heads = 1;
    c.tq = 2;
    c.tk = kSoftmaxWarpCols + 77;
    c.dropout = true;
    c.causal = true;
    check(c, type);
  }
}

}  // namespace
}  // namespace rig::kernels::test
