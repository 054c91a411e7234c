// The parameter server's message payloads: packs of named tensors, 2-bit
// compression with its residual, and optimizer state cut into shards and put
// back together.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/ps/protocol.hpp"
#include "engine/ps/shard_state.hpp"
#include "engine/ps/two_bit.hpp"
#include "rig/error.hpp"
#include "rig/tensor.hpp"

namespace {

using rig::Tensor;
namespace ps = rig::engine::ps;

std::vector<float> floats(const Tensor& t) {
  return t.to_vector();
}

TEST(PsProtocol, PackCarriesMetaAndTensorsOfEveryType) {
  YAML::Node meta;
  meta["step"] = 12;
  meta["name"] = "shard";
  const Tensor a = Tensor::from_vector(std::vector<float>{1.5F, -2.0F, 3.25F}, {3});
  const Tensor b = Tensor::from_vector(std::vector<std::int64_t>{7}, {1});
  const ps::Pack p = ps::unpack(ps::pack(meta, {{"a", a}, {"b", b}}));
  EXPECT_EQ(p.meta["step"].as<int>(), 12);
  EXPECT_EQ(p.meta["name"].as<std::string>(), "shard");
  EXPECT_EQ(floats(p.at("a")), floats(a));
  EXPECT_EQ(p.at("b").dtype(), rig::DType::i64);
  EXPECT_EQ(p.at("b").to_vector(), std::vector<float>{7.0F});
  EXPECT_THROW(p.at("c"), std::runtime_error);
}

TEST(PsProtocol, CutShortPackIsRefused) {
  const Tensor a = Tensor::from_vector(std::vector<float>{1.0F, 2.0F}, {2});
  std::vector<std::byte> bytes = ps::pack(YAML::Node(), {{"a", a}});
  bytes.pop_back();
  EXPECT_THROW(ps::unpack(bytes), std::runtime_error);
}

TEST(PsProtocol, CopyFloatsWritesTheSliceAndChecksTheSize) {
  rig::PsMessage m;
  m.payload = ps::bytes_of(Tensor::from_vector(std::vector<float>{1.0F, 2.0F}, {2}));
  // Room for a transport's header after the bytes, so appending it moves nothing.
  EXPECT_GE(m.payload.capacity(), m.payload.size() + rig::kPsPayloadRoom);
  Tensor buffer = Tensor::zeros({5});
  ps::copy_floats(m, buffer.slice(0, 2, 4));
  EXPECT_EQ(floats(buffer), (std::vector<float>{0.0F, 0.0F, 1.0F, 2.0F, 0.0F}));
  EXPECT_THROW(ps::copy_floats(m, buffer.slice(0, 0, 3)), std::runtime_error);
}

// MXNet's semantics: at or beyond +-threshold an element is sent as
// +-threshold and the rest stays; below it nothing is sent and it all stays.
TEST(PsTwoBit, SendsThresholdsAndKeepsTheRest) {
  const std::vector<float> g = {0.7F, -0.2F, -1.1F, 0.5F, 0.0F, -0.5F, 0.3F};
  std::vector<float> residual(g.size(), 0.0F);
  residual[6] = 0.25F;  // 0.25 + 0.3 crosses the threshold
  const auto payload = ps::compress_2bit(g.data(), residual.data(), 7, 0.5F);
  EXPECT_EQ(payload.size(), 2U);
  std::vector<float> sent(g.size());
  ps::decompress_2bit(payload, 7, 0.5F, sent.data());
  EXPECT_EQ(sent, (std::vector<float>{0.5F, 0.0F, -0.5F, 0.5F, 0.0F, -0.5F, 0.5F}));
  const std::vector<float> kept = {0.2F, -0.2F, -0.6F, 0.0F, 0.0F, 0.0F, 0.05F};
  for (std::size_t i = 0; i < kept.size(); ++i) EXPECT_NEAR(residual[i], kept[i], 1e-6F) << i;
}

TEST(PsTwoBit, NothingIsLostOverPushes) {
  // What was sent plus what is kept always equals everything pushed so far.
  std::vector<float> residual(5, 0.0F);
  std::vector<float> pushed(5, 0.0F);
  std::vector<float> sent_total(5, 0.0F);
  for (int step = 0; step < 50; ++step) {
    std::vector<float> g(5);
    for (int i = 0; i < 5; ++i)
      g[static_cast<std::size_t>(i)] = 0.03F * static_cast<float>((step * 7 + i * 3) % 11 - 5);
    const auto payload = ps::compress_2bit(g.data(), residual.data(), 5, 0.1F);
    std::vector<float> sent(5);
    ps::decompress_2bit(payload, 5, 0.1F, sent.data());
    for (std::size_t i = 0; i < 5; ++i) {
      pushed[i] += g[i];
      sent_total[i] += sent[i];
    }
  }
  for (std::size_t i = 0; i < 5; ++i) EXPECT_NEAR(sent_total[i] + residual[i], pushed[i], 1e-4F);
  std::vector<float> out(5);
  EXPECT_THROW(ps::decompress_2bit(std::vector<std::byte>(1), 5, 0.1F, out.data()),
               std::runtime_error);
}

// Two parameters of 6 and 4 elements; server 0 holds the first and 2 of the
// second's rows (split), server 1 the rest.
std::vector<ps::Shard> two_shards(bool split) {
  ps::Shard a;
  ps::Shard b;
  if (split) {
    a = {0, 8, {{0, "w", {3, 2}, 0, 6, 6}, {1, "b", {2}, 6, 2, 4}}};
    b = {8, 10, {{1, "b", {2}, 8, 2, 4}}};
  } else {
    a = {0, 6, {{0, "w", {3, 2}, 0, 6, 6}}};
    b = {6, 10, {{1, "b", {4}, 6, 4, 4}}};
  }
  return {a, b};
}

TEST(PsShardState, FlatPerParameterAndCountersRoundTrip) {
  std::vector<float> flat(10);
  for (int i = 0; i < 10; ++i) flat[static_cast<std::size_t>(i)] = static_cast<float>(i) + 0.5F;
  const ps::OptimizerState full = {
      {"momentum", Tensor::from_vector(flat, {10})},
      {"grads_ema", Tensor::from_vector(std::vector<float>{3.0F, 4.0F}, {2})},
      {"step", Tensor::from_vector(std::vector<std::int64_t>{9}, {1})}};
  const auto shards = two_shards(false);
  std::vector<ps::OptimizerState> parts;
  for (const auto& shard : shards) parts.push_back(ps::shard_state(full, shard, 10, 2));
  EXPECT_EQ(floats(parts[1].at("momentum")), (std::vector<float>{6.5F, 7.5F, 8.5F, 9.5F}));
  EXPECT_EQ(floats(parts[0].at("grads_ema")), std::vector<float>{3.0F});
  EXPECT_EQ(floats(parts[1].at("grads_ema")), std::vector<float>{4.0F});
  EXPECT_EQ(parts[1].at("step").to_vector(), std::vector<float>{9.0F});
  const ps::OptimizerState merged = ps::merge_state(parts, shards, 10, 2);
  EXPECT_EQ(floats(merged.at("momentum")), flat);
  EXPECT_EQ(floats(merged.at("grads_ema")), (std::vector<float>{3.0F, 4.0F}));
  EXPECT_EQ(merged.at("step").to_vector(), std::vector<float>{9.0F});
}

TEST(PsShardState, PerParameterStateCannotBeSplit) {
  const ps::OptimizerState full = {
      {"grads_ema", Tensor::from_vector(std::vector<float>{3.0F, 4.0F}, {2})}};
  EXPECT_THROW(ps::shard_state(full, two_shards(true)[0], 10, 2), rig::UserError);
  // Flat state splits anywhere.
  std::vector<float> flat(10, 1.0F);
  const ps::OptimizerState m = {{"m", Tensor::from_vector(flat, {10})}};
  EXPECT_EQ(ps::shard_state(m, two_shards(true)[0], 10, 2).at("m").numel(), 8);
}

}  // namespace
