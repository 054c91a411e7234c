// Philox4x32-10 known answers and the counter-based streams built on it.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "rig/random.hpp"

namespace {

using rig::RandomKey;

TEST(TensorRandom, PhiloxMatchesRandom123KnownAnswers) {
  using C = std::array<std::uint32_t, 4>;
  using K = std::array<std::uint32_t, 2>;
  EXPECT_EQ(rig::philox4x32(C{0, 0, 0, 0}, K{0, 0}),
            (C{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      rig::philox4x32(C{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, K{0xffffffff, 0xffffffff}),
      (C{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  // The digits of pi.
  EXPECT_EQ(
      rig::philox4x32(C{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, K{0xa4093822, 0x299f31d0}),
      (C{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(TensorRandom, PurposeIdIsFnv1a32) {
  EXPECT_EQ(rig::purpose_id(""), 0x811c9dc5U);
  EXPECT_EQ(rig::purpose_id("a"), 0xe40c292cU);
  EXPECT_EQ(rig::purpose_id("foobar"), 0xbf9cf968U);
}

TEST(TensorRandom, DeriveIsDeterministicAndOrderSensitive) {
  const RandomKey key{7, 3, 1, rig::purpose_id("model")};
  const RandomKey a = key.derive("layers.0.dropout");
  EXPECT_EQ(a, key.derive("layers.0.dropout"));
  EXPECT_EQ(a.seed, key.seed);
  EXPECT_EQ(a.step, key.step);
  EXPECT_EQ(a.rank, key.rank);
  EXPECT_NE(a.purpose, key.purpose);
  EXPECT_NE(a.purpose, key.derive("layers.1.dropout").purpose);
  EXPECT_NE(key.derive("a").derive("b"), key.derive("b").derive("a"));
  // A different parent purpose gives a different child.
  EXPECT_NE((RandomKey{7, 3, 1, 0}.derive("x")), (RandomKey{7, 3, 1, 1}.derive("x")));
}

TEST(TensorRandom, RandomBitsFollowTheDocumentedMapping) {
  const RandomKey key{0x0123456789abcdefULL, 0x0000000500000009ULL, 3, 0xdeadbeef};
  for (std::uint64_t index : {0ULL, 1ULL, 7ULL, 4ULL * 0x1234567890ULL + 2}) {
    const std::uint64_t b = index / 4;
    const auto out = rig::philox4x32(
        {static_cast<std::uint32_t>(b), key.rank ^ (static_cast<std::uint32_t>(b >> 32U) << 16U),
         static_cast<std::uint32_t>(key.step),
         key.purpose ^ static_cast<std::uint32_t>(key.step >> 32U)},
        {static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32U)});
    EXPECT_EQ(rig::random_bits(key, index), out[index % 4]) << index;
  }
}

TEST(TensorRandom, StreamsAreDeterministicAndKeysDiffer) {
  const RandomKey base{42, 10, 0, rig::purpose_id("dropout")};
  std::vector<RandomKey> keys{base};
  keys.push_back({43, 10, 0, base.purpose});
  keys.push_back({42, 11, 0, base.purpose});
  keys.push_back({42, 10, 1, base.purpose});
  keys.push_back({42, 10, 0, base.purpose + 1});
  keys.push_back({42 + (1ULL << 32U), 10, 0, base.purpose});  // the seed's high half counts
  std::set<std::vector<std::uint32_t>> streams;
  for (const auto& key : keys) {
    std::vector<std::uint32_t> bits;
    for (std::uint64_t i = 0; i < 64; ++i) bits.push_back(rig::random_bits(key, i));
    std::vector<std::uint32_t> again;
    for (std::uint64_t i = 0; i < 64; ++i) again.push_back(rig::random_bits(key, i));
    EXPECT_EQ(bits, again);
    streams.insert(bits);
  }
  EXPECT_EQ(streams.size(), keys.size());
}

TEST(TensorRandom, FillUniformIsElementwiseAndSliceable) {
  const RandomKey key{1, 2, 3, 4};
  std::vector<float> all(1001);
  rig::fill_uniform(key, all.data(), 1001, -2.0F, 3.0F);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i],
              static_cast<float>(-2.0 + 5.0 * rig::uniform_float(rig::random_bits(key, i))));
  }
  // Any sub-range computed on its own (as a thread or a GPU block would) matches.
  std::vector<float> part(13);
  rig::fill_uniform(key, part.data(), 13, -2.0F, 3.0F, 501);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 501));
  EXPECT_EQ(rig::uniform_float(0), 0.0F);
  EXPECT_EQ(rig::uniform_float(0xffffffffU), 1.0F - 0x1.0p-24F);
  // Rounding never reaches `high`.
  std::vector<float> tight(4096);
  rig::fill_uniform(key, tight.data(), 4096, 1.0F, std::nextafter(1.0F, 2.0F));
  for (float v : tight) EXPECT_EQ(v, 1.0F);
}

TEST(TensorRandom, FillNormalIsElementwiseAndSliceable) {
  const RandomKey key{9, 0, 0, rig::purpose_id("init")};
  std::vector<float> all(101);
  rig::fill_normal(key, all.data(), 101, 1.0F, 2.0F);
  std::vector<float> part(10);
  rig::fill_normal(key, part.data(), 10, 1.0F, 2.0F, 37);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 37));
  // Element i uses stream elements 2i and 2i+1.
  const std::uint32_t a = rig::random_bits(key, 2 * 5), b = rig::random_bits(key, 2 * 5 + 1);
  const double u1 = (static_cast<double>(a >> 8U) + 1.0) * 0x1.0p-24;
  const double u2 = static_cast<double>(b >> 8U) * 0x1.0p-24;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  EXPECT_NEAR(all[5], 1.0 + 2.0 * z, 1e-6);
}

TEST(TensorRandom, StatisticsAreSane) {
  constexpr std::int64_t n = 200000;
  std::vector<float> u(n), g(n);
  rig::fill_uniform({5, 0, 0, 1}, u.data(), n);
  rig::fill_normal({5, 0, 0, 2}, g.data(), n, 3.0F, 0.5F);
  auto moments = [](const std::vector<float>& v) {
    double mean = 0, var = 0;
    for (float x : v) mean += x;
    mean /= static_cast<double>(v.size());
    for (float x : v) var += (x - mean) * (x - mean);
    return std::pair{mean, var / static_cast<double>(v.size())};
  };
  const auto [um, uv] = moments(u);
  EXPECT_NEAR(um, 0.5, 0.005);
  EXPECT_NEAR(uv, 1.0 / 12.0, 0.002);
  for (float x : u) ASSERT_TRUE(x >= 0.0F && x < 1.0F);
  const auto [gm, gv] = moments(g);
  EXPECT_NEAR(gm, 3.0, 0.01);
  EXPECT_NEAR(gv, 0.25, 0.005);
  // Tails: about 4.55% beyond 2 standard deviations.
  std::int64_t outside = 0;
  for (float x : g) outside += std::abs(x - 3.0F) > 1.0F;
  EXPECT_NEAR(static_cast<double>(outside) / n, 0.0455, 0.003);
  // Bits: every bit position is set about half the time.
  for (int bit = 0; bit < 32; ++bit) {
    std::int64_t ones = 0;
    for (std::uint64_t i = 0; i < 20000; ++i)
      ones += (rig::random_bits({1, 2, 3, 4}, i) >> bit) & 1U;
    EXPECT_NEAR(static_cast<double>(ones) / 20000.0, 0.5, 0.02) << "bit " << bit;
  }
}

}  // namespace
