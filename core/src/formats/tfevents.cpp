#include "formats/tfevents.hpp"

#include <bit>

#include "util/crc32c.hpp"

namespace rig::formats::tfevents {
namespace {

// Protobuf wire types.
constexpr std::uint32_t kVarint = 0;
constexpr std::uint32_t kFixed64 = 1;
constexpr std::uint32_t kLengthDelimited = 2;
constexpr std::uint32_t kFixed32 = 5;

// Field numbers: Event (event.proto), Summary and Summary.Value (summary.proto).
constexpr std::uint32_t kEventWallTime = 1;     // double
constexpr std::uint32_t kEventStep = 2;         // int64
constexpr std::uint32_t kEventFileVersion = 3;  // string
constexpr std::uint32_t kEventSummary = 5;      // Summary
constexpr std::uint32_t kEventSessionLog = 7;   // SessionLog
constexpr std::uint32_t kSessionLogStatus = 1;  // enum SessionStatus
constexpr std::uint64_t kSessionStart = 1;      // SessionStatus.START
constexpr std::uint32_t kSummaryValue = 1;      // repeated Summary.Value
constexpr std::uint32_t kValueTag = 1;          // string
constexpr std::uint32_t kValueSimpleValue = 2;  // float

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_little_endian(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_key(std::string& out, std::uint32_t field, std::uint32_t wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, std::uint32_t field, double v) {
  put_key(out, field, kFixed64);
  put_little_endian(out, std::bit_cast<std::uint64_t>(v), 8);
}

void put_float(std::string& out, std::uint32_t field, float v) {
  put_key(out, field, kFixed32);
  put_little_endian(out, std::bit_cast<std::uint32_t>(v), 4);
}

// int64 is a varint of the two's-complement value (10 bytes when negative).
void put_int64(std::string& out, std::uint32_t field, std::int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<std::uint64_t>(v));
}

std::uint32_t masked_crc(std::string_view bytes) {
  return util::masked_crc32c(util::crc32c(bytes));
}

}  // namespace

std::string file_version_event(double wall_time) {
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_bytes(event, kEventFileVersion, kFileVersion);
  return event;
}

std::string session_start_event(double wall_time, std::int64_t step) {
  std::string session_log;
  put_key(session_log, kSessionLogStatus, kVarint);
  put_varint(session_log, kSessionStart);
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_int64(event, kEventStep, step);
  put_bytes(event, kEventSessionLog, session_log);
  return event;
}

std::string scalars_event(double wall_time, std::int64_t step,
                          std::span<const std::pair<std::string, double>> scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, kValueTag, tag);
    // simple_value is in a oneof, so it is written even when zero.
    put_float(v, kValueSimpleValue, static_cast<float>(value));
    put_bytes(summary, kSummaryValue, v);
  }
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  // proto3 leaves a zero scalar field out, as protobuf's own encoder does.
  if (step != 0) put_int64(event, kEventStep, step);
  put_bytes(event, kEventSummary, summary);
  return event;
}

std::string frame_record(std::string_view data) {
  std::string record;
  record.reserve(data.size() + 16);
  put_little_endian(record, data.size(), 8);
  put_little_endian(record, masked_crc(record), 4);
  record += data;
  put_little_endian(record, masked_crc(data), 4);
  return record;
}

}  // namespace rig::formats::tfevents
