// Cached decoding: feeding a sequence one position (or one chunk) at a time
// through causal self-attention with a KvCache gives the same outputs as one
// causal forward over the whole sequence.
#include <gtest/gtest.h>

#include <vector>

#include "golden.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "test_nn_blocks.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
namespace nn = rig::nn;
namespace ops = rig::ops;

Tensor random_input(Shape shape, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(rig::shape_numel(shape)));
  rig::fill_normal({seed, 0, 0, 5}, v.data(), static_cast<std::int64_t>(v.size()));
  return Tensor::from_vector(v, std::move(shape));
}

// Runs `step` on consecutive chunks of x along time and concatenates the outputs.
template <class Step>
Tensor decode_in_chunks(const Tensor& x, const std::vector<std::int64_t>& chunks, Step step) {
  std::vector<Tensor> outputs;
  std::int64_t start = 0;
  for (const auto length : chunks) {
    outputs.push_back(step(x.slice(1, start, start + length)));
    start += length;
  }
  EXPECT_EQ(start, x.size(1));
  return ops::concat(outputs, 1);
}

TEST(NnDecode, CachedSelfAttentionMatchesFullCausalForward) {
  rig::ParameterStore store;
  const nn::MultiHeadAttention attention(store, "dec.layers.0.self_attention", 8, 2);
  store.allocate(4);
  const Tensor x = random_input({2, 6, 8}, 1);
  rig::NoGradGuard no_grad;
  nn::MultiHeadAttention::Options full;
  full.causal = true;
  const Tensor expected = attention.forward(x, x, full);

  for (const auto& chunks :
       std::vector<std::vector<std::int64_t>>{{1, 1, 1, 1, 1, 1}, {4, 2}, {2, 3, 1}, {6}}) {
    nn::KvCache cache;
    EXPECT_EQ(cache.length(), 0);
    std::int64_t seen = 0;
    const Tensor got = decode_in_chunks(x, chunks, [&](const Tensor& step) {
      nn::MultiHeadAttention::Options options;
      options.causal = true;
      options.cache = &cache;
      const Tensor out = attention.forward(step, step, options);
      seen += step.size(1);
      EXPECT_EQ(cache.length(), seen);
      EXPECT_EQ(cache.keys.shape(), (Shape{2, 2, seen, 4}));
      EXPECT_EQ(cache.values.shape(), (Shape{2, 2, seen, 4}));
      return out;
    });
    EXPECT_TRUE(rig_test::tensors_close(got, expected, 1e-5, 1e-6))
        << "chunks of " << chunks.size();
  }
}

TEST(NnDecode, CachedDecoderLayerMatchesFullForward) {
  rig::ParameterStore store;
  const rig_test::DecoderLayer layer(store, "dec.layers.0", 16, 4, 32, 0.1F);
  store.allocate(8);
  const Tensor x = random_input({3, 7, 16}, 2);
  const Tensor memory = random_input({3, 5, 16}, 3);
  const Tensor mask = Tensor::from_vector(
      std::vector<std::uint8_t>{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0}, {3, 1, 1, 5});
  rig::NoGradGuard no_grad;
  const Tensor expected = layer.forward(x, memory, mask, false, {});
  nn::KvCache cache;
  const Tensor got = decode_in_chunks(x, {3, 1, 1, 2}, [&](const Tensor& step) {
    return layer.forward(step, memory, mask, false, {}, &cache);
  });
  EXPECT_EQ(cache.length(), 7);
  EXPECT_TRUE(rig_test::tensors_close(got, expected, 1e-5, 1e-5));
}

TEST(NnDecode, CacheMismatchThrows) {
  rig::ParameterStore store;
  const nn::MultiHeadAttention attention(store, "attention", 8, 2);
  store.allocate(0);
  nn::KvCache cache;
  nn::MultiHeadAttention::Options options;
  options.causal = true;
  options.cache = &cache;
  attention.forward(Tensor::zeros({2, 1, 8}), Tensor::zeros({2, 1, 8}), options);
  EXPECT_THROW(attention.forward(Tensor::zeros({3, 1, 8}), Tensor::zeros({3, 1, 8}), options),
               std::invalid_argument);
}

}  // namespace
