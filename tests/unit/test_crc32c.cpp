// CRC-32C against published check values (the CRC catalogue's "123456789"
// and RFC 3720's iSCSI vectors) and TFRecord's masking.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/crc32c.hpp"

namespace {

using rig::util::crc32c;
using rig::util::masked_crc32c;

std::uint32_t crc_of(const std::vector<unsigned char>& bytes) {
  return crc32c(bytes.data(), bytes.size());
}

TEST(Crc32c, CheckValue) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283U);
  EXPECT_EQ(crc32c(""), 0U);
  EXPECT_EQ(crc32c("a"), 0xc1d04330U);
}

TEST(Crc32c, Rfc3720Vectors) {
  std::vector<unsigned char> bytes(32, 0x00);
  EXPECT_EQ(crc_of(bytes), 0x8a9136aaU);
  bytes.assign(32, 0xff);
  EXPECT_EQ(crc_of(bytes), 0x62a8ab43U);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc_of(bytes), 0x46dd794eU);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc_of(bytes), 0x113fdb5cU);
}

TEST(Crc32c, ContinuesAcrossChunks) {
  const std::string text = "The quick brown fox jumps over the lazy dog";
  for (std::size_t split = 0; split <= text.size(); split += 7) {
    const std::uint32_t first = crc32c(text.data(), split);
    EXPECT_EQ(crc32c(text.data() + split, text.size() - split, first), crc32c(text)) << split;
  }
  EXPECT_EQ(crc32c(text), 0x22620404U);
}

TEST(Crc32c, TfRecordMask) {
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8, as TensorFlow's crc32c::Mask;
  // 0xc78ab0e5 is also what tensorboard's masked_crc32c(b"123456789") returns.
  EXPECT_EQ(masked_crc32c(0xe3069283U), 0xc78ab0e5U);
  EXPECT_EQ(masked_crc32c(0U), 0xa282ead8U);
  EXPECT_EQ(masked_crc32c(0xffffffffU), 0xa282ead7U);  // wraps modulo 2^32
}

}  // namespace
