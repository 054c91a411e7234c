// read_safetensors on hostile headers (inputs found while fuzzing,
// tests/fuzz/corpus/safetensors/regression-*): each is a UserError naming the
// file and what is wrong, before any tensor is allocated.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "formats/safetensors.hpp"
#include "test_tensor_util.hpp"
#include "user_error_of.hpp"

namespace {

namespace fs = std::filesystem;
using rig_test::contains;
using rig_test::user_error_of;

// A safetensors file of `header` (JSON) and `data`.
fs::path write_file(const std::string& name, const std::string& header, const std::string& data) {
  const fs::path file = fs::path(::testing::TempDir()) / name;
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  std::uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length >> (8 * i)));
  out << header << data;
  return file;
}

std::string read_error(const fs::path& file) {
  return user_error_of([&] { rig::formats::read_safetensors(file); });
}

TEST(Safetensors, ReadsAValidFile) {
  const auto file = write_file(
      "ok.safetensors", R"({"w":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}})", "abcd");
  const auto tensors = rig::formats::read_safetensors(file);
  ASSERT_EQ(tensors.size(), 1U);
  EXPECT_EQ(tensors.at("w").data<std::uint8_t>()[3], 'd');
}

TEST(Safetensors, AHugeShapeIsRefusedBeforeItIsAllocated) {
  // 4 TB claimed by 8 bytes of data: was a std::bad_alloc from allocating the tensor first.
  const auto file = write_file(
      "huge.safetensors", R"({"w":{"dtype":"F32","shape":[1000000000000],"data_offsets":[0,8]}})",
      "12345678");
  const std::string message = read_error(file);
  EXPECT_TRUE(contains(message, file.string() + " is truncated or corrupt: tensor 'w' has 8 "
                                                "bytes for F32 shape [1000000000000]"))
      << message;
}

TEST(Safetensors, AShapeWhoseSizeOverflowsIsRefused) {
  // 2^62 x 4 x 4 bytes wraps to 0 in 64 bits, which matched an empty byte range.
  const auto file = write_file(
      "overflow.safetensors",
      R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", "");
  EXPECT_TRUE(contains(read_error(file), "tensor 'w' has 0 bytes for F32 shape"));
}

TEST(Safetensors, ANegativeDimensionIsRefused) {
  const auto file =
      write_file("negative.safetensors",
                 R"({"w":{"dtype":"U8","shape":[-2,-2],"data_offsets":[0,4]}})", "abcd");
  EXPECT_TRUE(contains(read_error(file),
                       "tensor 'w' has shape [-2,-2]; expected a list of whole numbers >= 0"));
}

TEST(Safetensors, AnOffsetThatWrapsAroundIsOutsideTheFile) {
  // data_start + 2^64 - 100 wrapped to a position inside the file, so the
  // tensor read the header's own bytes.
  const auto file = write_file(
      "wrap.safetensors",
      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551516,18446744073709551517]}})",
      "abcd");
  const std::string message = read_error(file);
  EXPECT_TRUE(contains(message, "tensor 'w' lies outside the file")) << message;
}

TEST(Safetensors, NumbersThatAreNotWholeAreRefused) {
  // An offset beyond 2^64 parses as a float, which nlohmann converted to an
  // integer out of range (undefined behaviour, UBSan's report while fuzzing).
  auto file = write_file(
      "float-offset.safetensors",
      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551516,18446749073709551537]}})",
      "abcd");
  std::string message = read_error(file);
  EXPECT_TRUE(contains(message, "tensor 'w' has data_offsets [18446744073709551516,1.") &&
              contains(message, "expected two whole numbers >= 0"))
      << message;
  file = write_file("float-dim.safetensors",
                    R"({"w":{"dtype":"U8","shape":[2.5],"data_offsets":[0,2]}})", "ab");
  EXPECT_TRUE(contains(read_error(file), "tensor 'w' has shape [2.5]; expected a list of whole"));
  file = write_file("three-offsets.safetensors",
                    R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "ab");
  EXPECT_TRUE(contains(read_error(file), "has data_offsets [0,1,2]; expected two whole numbers"));
}

TEST(Safetensors, TruncatedAndMalformedHeadersAreRefused) {
  const fs::path tiny = fs::path(::testing::TempDir()) / "tiny.safetensors";
  std::ofstream(tiny, std::ios::binary) << "1234";
  EXPECT_TRUE(contains(read_error(tiny), "shorter than the 8-byte header length"));
  const fs::path claims = fs::path(::testing::TempDir()) / "claims.safetensors";
  std::ofstream(claims, std::ios::binary) << std::string("\xE8\x03\0\0\0\0\0\0", 8) << "{}";
  EXPECT_TRUE(contains(read_error(claims), "header of 1000 bytes does not fit"));
  EXPECT_TRUE(contains(read_error(write_file("notjson.safetensors", "[1,2]", "")),
                       "header is not a JSON object"));
  EXPECT_TRUE(
      contains(read_error(write_file("dtype.safetensors",
                                     R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
                                     "12345678")),
               "tensor 'w' has dtype \"F64\", which rig does not read"));
  EXPECT_TRUE(
      contains(read_error(write_file("entry.safetensors", R"({"w":3})", "")), "tensor 'w': "));
}

}  // namespace
