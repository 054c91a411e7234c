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

// What KvCache must hold after appending `chunks` of [B, H, t, D] and
// reordering rows: the positions concatenated, rows picked by index_select.
struct ReferenceCache {
  Tensor keys, values;
  void append(const Tensor& k, const Tensor& v) {
    keys = keys.defined() ? ops::concat({keys, k}, 2) : k;
    values = values.defined() ? ops::concat({values, v}, 2) : v;
  }
  void reorder(const Tensor& index) {
    keys = ops::index_select(keys, 0, index);
    values = ops::index_select(values, 0, index);
  }
};

// Keys / values as MultiHeadAttention makes them: [B, t, H, D] viewed as [B, H, t, D].
Tensor heads_view(std::int64_t batch, std::int64_t heads, std::int64_t t, std::uint64_t seed) {
  return random_input({batch, t, heads, 4}, seed).transpose(1, 2);
}

TEST(NnDecode, ReservedCacheAppendsAndReordersInPlace) {
  rig::NoGradGuard no_grad;
  const std::int64_t batch = 4, heads = 2, steps = 9;
  nn::KvCache cache;
  cache.reserve(steps);
  ReferenceCache reference;
  Tensor spare;
  const Tensor index = Tensor::from_vector(std::vector<std::int64_t>{1, 1, 3, 2}, {batch});
  for (std::int64_t t = 0; t < steps; ++t) {
    const Tensor k = heads_view(batch, heads, 1, 100 + static_cast<std::uint64_t>(t));
    const Tensor v = heads_view(batch, heads, 1, 200 + static_cast<std::uint64_t>(t));
    const std::size_t requests = rig::allocator_stats().requests;
    cache.append(k, v);
    cache.reorder(index, spare);
    // The first step allocates the key and value buffers and the spare; the
    // others write into them and allocate nothing.
    EXPECT_EQ(rig::allocator_stats().requests - requests, t == 0 ? 3U : 0U) << "step " << t;
    EXPECT_EQ(cache.capacity(), steps);
    EXPECT_EQ(cache.keys.shape(), (Shape{batch, heads, t + 1, 4}));
    reference.append(k, v);
    reference.reorder(index);
    EXPECT_EQ(cache.keys.to_vector(), reference.keys.to_vector()) << "step " << t;
    EXPECT_EQ(cache.values.to_vector(), reference.values.to_vector()) << "step " << t;
  }
  EXPECT_FALSE(spare.shares_storage(cache.keys));
  EXPECT_FALSE(spare.shares_storage(cache.values));
}

TEST(NnDecode, UnreservedCacheDoublesItsCapacity) {
  rig::NoGradGuard no_grad;
  nn::KvCache cache;
  ReferenceCache reference;
  std::vector<std::int64_t> capacities;
  for (std::int64_t t = 0; t < 9; ++t) {
    const Tensor k = heads_view(3, 2, t == 0 ? 2 : 1, 300 + static_cast<std::uint64_t>(t));
    const Tensor v = heads_view(3, 2, t == 0 ? 2 : 1, 400 + static_cast<std::uint64_t>(t));
    cache.append(k, v);
    reference.append(k, v);
    capacities.push_back(cache.capacity());
  }
  EXPECT_EQ(capacities, (std::vector<std::int64_t>{2, 4, 4, 8, 8, 8, 8, 16, 16}));
  EXPECT_EQ(cache.length(), 10);
  EXPECT_EQ(cache.keys.to_vector(), reference.keys.to_vector());
  EXPECT_EQ(cache.values.to_vector(), reference.values.to_vector());
  // A pair assigned directly (project_memory's) is extended by copying it.
  nn::KvCache fixed(reference.keys, reference.values);
  const Tensor k = heads_view(3, 2, 1, 500);
  fixed.append(k, k);
  reference.append(k, k);
  EXPECT_EQ(fixed.keys.to_vector(), reference.keys.to_vector());
  EXPECT_EQ(fixed.values.to_vector(), reference.values.to_vector());
}

TEST(NnDecode, CacheReorderChecksItsIndex) {
  rig::NoGradGuard no_grad;
  nn::KvCache cache;
  cache.append(heads_view(2, 2, 1, 1), heads_view(2, 2, 1, 2));
  Tensor spare;
  const auto index = [](std::vector<std::int64_t> v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return Tensor::from_vector(v, {n});
  };
  EXPECT_THROW(cache.reorder(index({0, 2}), spare), std::invalid_argument);
  EXPECT_THROW(cache.reorder(index({0, -1}), spare), std::invalid_argument);
  EXPECT_THROW(cache.reorder(index({0, 1, 1}), spare), std::invalid_argument);
  EXPECT_THROW(cache.reorder(Tensor::zeros({2}), spare), std::invalid_argument);  // f32
  const Tensor before = cache.keys.contiguous();
  cache.reorder(index({0, 1}), spare);  // the identity: nothing to copy
  EXPECT_FALSE(spare.defined());
  EXPECT_EQ(cache.keys.to_vector(), before.to_vector());
  EXPECT_THROW(cache.append(heads_view(3, 2, 1, 3), heads_view(3, 2, 1, 4)), std::invalid_argument);
  EXPECT_THROW(cache.append(heads_view(2, 2, 1, 3), heads_view(2, 2, 2, 4)), std::invalid_argument);
}

TEST(NnDecode, CacheUnderAutogradStaysDifferentiable) {
  // Training through a cache: the appended keys keep their history, so the
  // gradient reaches every position (a copy into a buffer would cut it).
  nn::KvCache cache;
  cache.reserve(4);
  Tensor first = heads_view(2, 2, 1, 7).contiguous();
  Tensor second = heads_view(2, 2, 1, 8).contiguous();
  first.set_requires_grad(true);
  second.set_requires_grad(true);
  cache.append(first, first);
  cache.append(second, second);
  EXPECT_EQ(cache.length(), 2);
  ops::sum(ops::mul(cache.keys, cache.values)).backward();
  ASSERT_TRUE(first.grad().defined());
  ASSERT_TRUE(second.grad().defined());
  // d/dx sum(x * x) = 2x, through keys and values alike.
  EXPECT_TRUE(
      rig_test::tensors_close(first.grad(), ops::mul_scalar(first.detach(), 2.0F), 1e-6, 1e-6));
  EXPECT_TRUE(
      rig_test::tensors_close(second.grad(), ops::mul_scalar(second.detach(), 2.0F), 1e-6, 1e-6));
}

}  // namespace
